"""The run directory that ``observe`` writes, and its integrity manifest.

Layout (``docs/rundir.md`` describes each file)::

    <run dir>/                 mode 0700
      os.jsonl                 raw OS stream (host receiver records, as received)
      sem.jsonl                semantic stream (spans and logs received over OTLP)
      correlated.jsonl         correlated stream (observations incl. derived ones, coverage)
      graph.json               the finalized evidence graph
      summary.json             run summary (command, exit code, backend, collection states)
      manifest.json            SHA-256 digest and size of every other file

Every directory is 0700 and every file 0600: a run directory is a sensitive artifact. The
manifest detects changes relative to itself; evidence and manifest share one writable trust
boundary, so it is a tamper-evidence check for honest mistakes and careless edits, not
adversary-resistant logging.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_bridge.errors import VerificationError

OS_STREAM = "os.jsonl"
SEM_STREAM = "sem.jsonl"
CORRELATED_STREAM = "correlated.jsonl"
GRAPH = "graph.json"
SUMMARY = "summary.json"
MANIFEST = "manifest.json"

DIR_MODE = 0o700
FILE_MODE = 0o600
MANIFEST_FORMAT = "otel-bridge.manifest"


def _mkdir(path: str) -> None:
    os.makedirs(path, mode=DIR_MODE, exist_ok=True)
    os.chmod(path, DIR_MODE)


def sha256_file(path: str) -> str:
    """The hex SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_private(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


@dataclass(frozen=True, slots=True)
class RunDir:
    """One run directory (see the module docstring)."""

    path: str

    @classmethod
    def create(cls, path: str) -> RunDir:
        """Create ``path`` (and missing parents) with mode 0700."""
        path = os.path.abspath(path)
        parent = os.path.dirname(path)
        if not os.path.isdir(parent):
            _mkdir(parent)
        _mkdir(path)
        return cls(path)

    def file(self, name: str) -> str:
        """The absolute path of ``name`` inside the run directory."""
        return os.path.join(self.path, name)

    def write_json(self, name: str, value: Any) -> str:
        """Write ``value`` as indented, key-sorted JSON (0600); returns the path."""
        path = self.file(name)
        write_private(path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode())
        return path

    def secure(self) -> None:
        """Force 0700 on every directory and 0600 on every file below the run directory."""
        os.chmod(self.path, DIR_MODE)
        for root, dirs, files in os.walk(self.path):
            for d in dirs:
                os.chmod(os.path.join(root, d), DIR_MODE)
            for f in files:
                os.chmod(os.path.join(root, f), FILE_MODE)

    def files(self, *, temporaries: bool = False) -> list[str]:
        """Relative paths of every file except the manifest, sorted.

        A writer's temporaries (``.tmp-*``, renamed into place when complete) are left out
        unless ``temporaries`` is true: the manifest never lists them, and :func:`verify` reports
        any that remain, since nothing writes to a run directory after its manifest.
        """
        out: list[str] = []
        for root, _dirs, files in os.walk(self.path):
            for f in files:
                rel = os.path.relpath(os.path.join(root, f), self.path)
                if rel == MANIFEST or (not temporaries and f.startswith(".tmp-")):
                    continue
                out.append(rel.replace(os.sep, "/"))
        return sorted(out)

    def write_manifest(self, run: Mapping[str, Any] | None = None) -> str:
        """Digest every file into ``manifest.json`` (after :meth:`secure`); returns its path."""
        self.secure()
        entries = {
            rel: {"sha256": sha256_file(self.file(rel)), "bytes": os.path.getsize(self.file(rel))}
            for rel in self.files()
        }
        manifest = {
            "format": MANIFEST_FORMAT,
            "version": 1,
            "algorithm": "sha256",
            "run": dict(run or {}),
            "files": entries,
        }
        return self.write_json(MANIFEST, manifest)


def verify(path: str) -> list[str]:
    """Every problem of run directory ``path`` against its manifest; empty when it matches.

    Each problem names a file: ``modified: os.jsonl``, ``missing: graph.json``,
    ``unexpected: extra.txt`` (a file the manifest does not list).
    """
    run = RunDir(os.path.abspath(path))
    manifest_path = run.file(MANIFEST)
    try:
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
    except FileNotFoundError as exc:
        raise VerificationError(f"{path}: no {MANIFEST}: not a run directory") from exc
    except (OSError, ValueError) as exc:
        raise VerificationError(f"{manifest_path}: unreadable manifest: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise VerificationError(f"{manifest_path}: not an otel-bridge manifest")
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        raise VerificationError(f"{manifest_path}: no file list")
    problems: list[str] = []
    for rel, entry in sorted(listed.items()):
        full = run.file(rel)
        if not os.path.isfile(full):
            problems.append(f"missing: {rel}")
            continue
        expected = entry.get("sha256") if isinstance(entry, dict) else None
        if sha256_file(full) != expected:
            problems.append(f"modified: {rel}")
    for rel in run.files(temporaries=True):
        if rel not in listed:
            problems.append(f"unexpected: {rel}")
    return problems
