"""The run directory that ``observe`` writes, and its integrity manifest.

Layout (``docs/rundir.md`` describes each file)::

    <run dir>/                 mode 0700
      os.jsonl                 raw OS stream (host receiver records, as received)
      sem.jsonl                semantic stream (spans and logs received over OTLP)
      correlated.jsonl         correlated stream (observations incl. derived ones, coverage)
      graph.json               the finalized evidence graph
      summary.json             run summary (command, exit code, backend, collection states)
      queue/                   with ``-c``: its exporters' persistent queues (mutable)
      manifest.json            SHA-256 digest and size of every other file

Every directory is 0700 and every file 0600: a run directory is a sensitive artifact. The
manifest detects changes relative to itself, except below the *mutable* queue directory, which
a later collector may drain (only its layout is checked); evidence and manifest share one
writable trust boundary, so it is a tamper-evidence check for honest mistakes and careless
edits, not adversary-resistant logging.

Nothing here follows a symbolic link: directories are walked with ``os.fwalk`` (no link
followed), modes are changed through descriptors opened with ``O_NOFOLLOW``, and only regular
files are hashed (a FIFO or device left in the directory is recorded by kind, never opened for
reading). ``observe`` writes an *incomplete* manifest when it starts (:meth:`RunDir.begin`) and
the complete one last, so a run killed in between is reported as ``incomplete: ...``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_bridge.errors import OtelBridgeError, VerificationError

OS_STREAM = "os.jsonl"
SEM_STREAM = "sem.jsonl"
CORRELATED_STREAM = "correlated.jsonl"
GRAPH = "graph.json"
SUMMARY = "summary.json"
MANIFEST = "manifest.json"
REQUIRED = (OS_STREAM, SEM_STREAM, CORRELATED_STREAM, GRAPH, SUMMARY)
"""The files every complete ``observe`` run directory holds."""
QUEUE_DIR = "queue"
"""The run directory's subdirectory holding the persistent queues and journals a ``-c`` file's
exporters and ``enrich`` processors keep there: a later collector whose storage is this
directory drains them, so the manifest records it as *mutable* (its layout is checked, not its
bytes)."""
EXPORTER_QUEUE_PREFIX, PROCESSOR_QUEUE_PREFIX = "exporter_", "processor_"
"""How one component's directory in a queue directory begins (an exporter's queue, an
``enrich`` processor's journal): ``otel_bridge.exporters.otlp.wal.queue_dir_name``."""
QUEUE_COMPONENT_PREFIXES = (EXPORTER_QUEUE_PREFIX, PROCESSOR_QUEUE_PREFIX)
WAL_LOG, WAL_ACKS, WAL_LOCK, WAL_TMP = "wal.log", "wal.ack", "lock", "wal.log.tmp"
"""The files the write-ahead log (``otel_bridge.exporters.otlp.wal``) keeps in one component's
directory: named here, where :func:`check` reads a queue's layout, so both use one spelling."""
QUEUE_FILES = frozenset({WAL_LOG, WAL_ACKS, WAL_LOCK, WAL_TMP})

DIR_MODE = 0o700
FILE_MODE = 0o600
MANIFEST_FORMAT = "otel-bridge.manifest"
MANIFEST_VERSION = 3
COMPLETE = "complete"
INCOMPLETE = "incomplete"

_NOFOLLOW_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {
    stat.S_IFDIR: "directory",
    stat.S_IFLNK: "symbolic link",
    stat.S_IFIFO: "fifo",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
}


class RunDirError(OtelBridgeError):
    """A run directory cannot be created or used as asked (the message says why)."""


def kind_of(mode: int) -> str:
    """``file`` for a regular file, else the kind of a non-regular entry (``symbolic link``)."""
    return "file" if stat.S_ISREG(mode) else _KINDS.get(stat.S_IFMT(mode), "other")


def _open_regular(path: str, *, dir_fd: int | None = None) -> int | None:
    """A read descriptor on ``path`` when it is a regular file (no link followed), else None."""
    try:
        fd = os.open(path, _NOFOLLOW_READ, dir_fd=dir_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _digest_fd(fd: int) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def sha256_file(path: str) -> str:
    """The hex SHA-256 of a regular file's bytes (OSError for anything else, links included)."""
    fd = _open_regular(path)
    if fd is None:
        raise OSError(f"{path}: not a regular file")
    return _digest_fd(fd)[0]


def make_private_dirs(path: str) -> None:
    """Create ``path`` and its missing parents with mode 0700 (existing ones are left as is)."""
    missing: list[str] = []
    current = os.path.abspath(path)
    while current and not os.path.isdir(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)


def write_private(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600.

    The temporary is created exclusively (mode 0600) and renamed over ``path``: a symbolic link
    at ``path`` is replaced, its target never written.
    """
    write_private_blocks(path, (data,))


def write_private_blocks(path: str, blocks: Iterable[bytes]) -> None:
    """:func:`write_private` of the concatenation of ``blocks``, written as they come."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            for block in blocks:
                f.write(block)
            os.fchmod(f.fileno(), FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _chmod_entry(name: str, dir_fd: int, mode: int, *, directory: bool) -> None:
    """Set ``mode`` on a directory or regular file through a no-follow descriptor."""
    flags = _NOFOLLOW_READ | (os.O_DIRECTORY if directory else 0)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return  # a link, a vanished entry: never followed
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode):
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _cannot_create(path: str, exc: OSError) -> str:
    """Why ``path`` could not be created, and what to do: one message for one cause."""
    where = exc.filename if isinstance(exc.filename, str) else path
    text = f"cannot create the run directory {path}: {exc.strerror}"
    if where != path:
        text += f" ({where})"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        text += "; choose a writable place with -o DIR"
    return text


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry below a run directory: its kind, and a link's target."""

    kind: str
    target: str | None = None

    def describe(self) -> str:
        """``symbolic link to /etc/passwd``, ``fifo``, ``directory``."""
        return f"{self.kind} to {self.target}" if self.target is not None else self.kind


@dataclass(frozen=True, slots=True)
class RunDir:
    """One run directory (see the module docstring)."""

    path: str
    made: tuple[str, ...] = field(default=(), compare=False)
    """The directories :meth:`create` made for it (missing parents, then the run directory
    itself), outermost first; empty when the directory existed before."""

    @classmethod
    def create(cls, path: str, *, replace: bool = False) -> RunDir:
        """Create ``path`` (and missing parents) with mode 0700.

        An existing empty directory is used. A non-empty one is refused unless ``replace`` is
        true and it is a run directory (holds a manifest): then its contents are removed (links
        removed, never followed). A symbolic link or a non-directory at ``path`` is refused.
        """
        path = os.path.abspath(path)
        parent = os.path.dirname(path)
        made: list[str] = []
        try:
            if not os.path.isdir(parent):
                made = _missing_ancestors(parent)
                os.makedirs(parent, mode=DIR_MODE, exist_ok=True)
            os.mkdir(path, DIR_MODE)
            made.append(path)
        except FileExistsError:
            _reuse(path, replace=replace)
        except OSError as exc:
            raise RunDirError(_cannot_create(path, exc)) from None
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchmod(fd, DIR_MODE)
        finally:
            os.close(fd)
        return cls(path, tuple(made))

    def discard(self) -> None:
        """Remove what a run that never started put here: everything in the run directory
        (links removed, never followed), then each directory :meth:`create` made, innermost
        first (one that is not empty, or existed before, is left)."""
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            _empty(self.path)
        for directory in reversed(self.made):
            try:
                os.rmdir(directory)
            except OSError:
                return

    def file(self, name: str) -> str:
        """The absolute path of ``name`` inside the run directory."""
        return os.path.join(self.path, name)

    def write_json(self, name: str, value: Any) -> str:
        """Write ``value`` as indented, key-sorted JSON (0600); returns the path."""
        path = self.file(name)
        write_private(path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode())
        return path

    def secure(self) -> None:
        """Force 0700 on every directory and 0600 on every regular file below the run directory.

        Walks with descriptors and never follows a link; other kinds of entries are left as
        they are (the manifest records them).
        """
        _chmod_entry(self.path, -1, DIR_MODE, directory=True)
        for _root, dirs, files, root_fd in os.fwalk(self.path, follow_symlinks=False):
            for d in dirs:
                _chmod_entry(d, root_fd, DIR_MODE, directory=True)
            for f in files:
                _chmod_entry(f, root_fd, FILE_MODE, directory=False)

    def entries(self) -> dict[str, Entry]:
        """Every entry below the run directory but the manifest, by relative path (no link
        followed; a link to a directory is an entry, not descended into)."""
        out: dict[str, Entry] = {}
        for root, dirs, files, root_fd in os.fwalk(self.path, follow_symlinks=False):
            rel_root = os.path.relpath(root, self.path)
            for name in (*dirs, *files):
                rel = name if rel_root == "." else os.path.join(rel_root, name)
                rel = rel.replace(os.sep, "/")
                if rel == MANIFEST:
                    continue
                try:
                    st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                kind = kind_of(st.st_mode)
                target = os.readlink(name, dir_fd=root_fd) if kind == "symbolic link" else None
                out[rel] = Entry(kind, target)
        return out

    def files(self, *, temporaries: bool = False) -> list[str]:
        """Relative paths of every regular file except the manifest, sorted.

        A writer's temporaries (``.tmp-*``, renamed into place when complete) are left out
        unless ``temporaries`` is true: the manifest never lists them, and :func:`verify` reports
        any that remain, since nothing but a queue's drain writes to a run directory after its
        manifest.
        """
        return sorted(
            rel
            for rel, entry in self.entries().items()
            if entry.kind == "file"
            and (temporaries or not os.path.basename(rel).startswith(".tmp-"))
        )

    def begin(self, run: Mapping[str, Any] | None = None) -> str:
        """Write the *incomplete* manifest that marks a run in progress; returns its path.

        Written when ``observe`` starts: if it never gets to :meth:`write_manifest` (killed,
        crashed), :func:`verify` reports the directory as ``incomplete: ...``.
        """
        return self.write_json(MANIFEST, _manifest(INCOMPLETE, run, {}, {}, ()))

    def write_manifest(
        self,
        run: Mapping[str, Any] | None = None,
        *,
        required: Iterable[str] = (),
        mutable: Iterable[str] = (),
    ) -> str:
        """Digest every regular file and record every other entry into ``manifest.json``
        (after :meth:`secure`); returns its path. ``required`` names files the run must hold:
        one absent is recorded, and :func:`verify` reports it as missing. ``mutable`` names
        queue directories (:data:`QUEUE_DIR`) that a later collector may drain: one present is
        recorded as a directory and listed under ``mutable``, and what it holds is not
        digested (:func:`verify` checks its layout only)."""
        self.secure()
        present = self.entries()
        drainable = sorted(m for m in mutable if m in present and present[m].kind == "directory")
        files: dict[str, Any] = {}
        others: dict[str, Any] = {}
        for rel, entry in sorted(present.items()):
            if _below(rel, drainable):
                continue
            if entry.kind != "file":
                others[rel] = {"kind": entry.kind, "target": entry.target}
                continue
            if os.path.basename(rel).startswith(".tmp-"):
                continue
            fd = _open_regular(self.file(rel))
            if fd is not None:
                digest, size = _digest_fd(fd)
                files[rel] = {"sha256": digest, "bytes": size}
        manifest = _manifest(COMPLETE, run, files, others, required)
        manifest["mutable"] = drainable
        return self.write_json(MANIFEST, manifest)

    def redigest(self) -> str:
        """Write :meth:`write_manifest` again after files were added to a complete run (its
        review), keeping what the earlier manifest states of the run: its ``run``, its
        ``required`` files and its ``mutable`` queue directories."""
        earlier = _read_manifest(self, self.path)
        return self.write_manifest(
            earlier.get("run") or {},
            required=earlier.get("required") or (),
            mutable=earlier.get("mutable") or (),
        )


def _below(rel: str, directories: Iterable[str]) -> str | None:
    """The directory of ``directories`` that ``rel`` lies below (not the directory itself)."""
    return next((d for d in directories if rel.startswith(d + "/")), None)


def _queue_layout_problem(inside: str, entry: Entry) -> bool:
    """Whether ``inside`` (a path relative to a queue directory) is not what the write-ahead log
    keeps there: a component's directory, holding its log, acks, lock and compaction
    temporary as regular files."""
    parts = inside.split("/")
    if len(parts) == 1:
        return entry.kind != "directory" or not parts[0].startswith(QUEUE_COMPONENT_PREFIXES)
    return len(parts) != 2 or entry.kind != "file" or parts[1] not in QUEUE_FILES


def _manifest(
    state: str,
    run: Mapping[str, Any] | None,
    files: Mapping[str, Any],
    others: Mapping[str, Any],
    required: Iterable[str],
) -> dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "state": state,
        "algorithm": "sha256",
        "run": dict(run or {}),
        "files": dict(files),
        "entries": dict(others),
        "required": sorted(required),
        "mutable": [],
    }


def _reuse(path: str, *, replace: bool) -> None:
    """Check (and with ``replace`` empty) an existing ``path`` for use as a run directory."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise RunDirError(f"{path}: is a symbolic link; give the run directory's real path")
    if not stat.S_ISDIR(st.st_mode):
        raise RunDirError(f"{path}: exists and is not a directory")
    names = os.listdir(path)
    if not names:
        return
    manifest = os.path.join(path, MANIFEST)
    if not replace:
        raise RunDirError(
            f"{path}: exists and is not empty (choose a new directory"
            + (", or --replace to discard this earlier run)" if os.path.lexists(manifest) else ")")
        )
    fd = _open_regular(manifest)
    if fd is None:
        raise RunDirError(f"{path}: not a run directory (no {MANIFEST}); refusing to replace it")
    os.close(fd)
    _empty(path)


def _empty(path: str) -> None:
    """Remove everything in directory ``path`` (links removed, never followed)."""
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full)  # fd-based, removes links without following them
        else:
            os.unlink(full)


def _missing_ancestors(path: str) -> list[str]:
    """``path`` and each of its ancestors that does not exist yet, outermost first."""
    missing: list[str] = []
    while not os.path.lexists(path) and path != os.path.dirname(path):
        missing.append(path)
        path = os.path.dirname(path)
    return missing[::-1]


def claim_outputs(directory: str, names: Iterable[str], *, replace: bool, what: str) -> list[str]:
    """Check ``directory`` before a command writes its files ``names`` there (``compare -o``,
    ``review -o``), as :meth:`RunDir.create` checks a run directory: one that holds any of them
    (an earlier ``what``) is refused unless ``replace`` is true. Returns those it holds (for the
    command to remove when it writes, so no file of the earlier one is left beside the new one);
    a missing directory, or one holding only other files, holds none. Nothing is changed here."""
    path = os.path.abspath(directory)
    earlier = [name for name in names if os.path.lexists(os.path.join(path, name))]
    if earlier and not replace:
        raise RunDirError(
            f"{path}: holds an earlier {what} ({', '.join(earlier)}) (choose a new directory, "
            f"or --replace to discard this earlier {what})"
        )
    return earlier


def _read_manifest(run: RunDir, shown: str) -> dict[str, Any]:
    manifest_path = run.file(MANIFEST)
    if not os.path.lexists(manifest_path):
        raise VerificationError(f"{shown}: no {MANIFEST}: not a run directory")
    fd = _open_regular(manifest_path)
    if fd is None:
        raise VerificationError(f"{manifest_path}: not a regular file (a link or special file)")
    try:
        with os.fdopen(fd, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as exc:
        raise VerificationError(f"{manifest_path}: unreadable manifest: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise VerificationError(f"{manifest_path}: not an otel-bridge manifest")
    if not isinstance(manifest.get("files"), dict):
        raise VerificationError(f"{manifest_path}: no file list")
    return manifest


def _incomplete(manifest: Mapping[str, Any]) -> str:
    run = manifest.get("run")
    run_id = run.get("id") if isinstance(run, dict) else None
    name = f"run {run_id}" if run_id else "the run"
    return (
        f"incomplete: {name} never finished (observe was killed or crashed before writing "
        "its manifest); the files hold what was recorded until then and are not checked"
    )


def graph_document(path: str) -> str:
    """``path`` itself, or the ``graph.json`` of the run directory ``path`` names (what
    ``otel-bridge observe`` prints as the run dir), so readers take either."""
    if not os.path.isdir(path):
        return path
    graph = os.path.join(path, GRAPH)
    if not os.path.exists(graph):
        raise OtelBridgeError(f"{path}: a directory without {GRAPH} (not a run directory)")
    return graph


def verify(path: str) -> list[str]:
    """Every problem of run directory ``path`` against its manifest; empty when it matches
    (:func:`check`, without the unchecked queue directories)."""
    return check(path)[0]


def check(path: str) -> tuple[list[str], list[str]]:
    """Every problem of run directory ``path`` against its manifest (empty when it matches),
    and the queue directories whose bytes the manifest does not cover (its ``mutable``).

    Each problem names an entry: ``modified: os.jsonl``, ``missing: graph.json``,
    ``unexpected: extra.txt`` (something the manifest does not list; its kind is added when it
    is not a regular file: ``unexpected: sub (directory)``). A listed file now a link or another
    non-regular entry is ``modified: os.jsonl (now a symbolic link to ...)``. Below a mutable
    queue directory only the write-ahead log's layout is checked: anything else there is
    unexpected. A run that never finished is one problem, ``incomplete: ...``.
    """
    run = RunDir(os.path.abspath(path))
    manifest = _read_manifest(run, path)
    if manifest.get("state") == INCOMPLETE:
        return [_incomplete(manifest)], []
    listed: dict[str, Any] = manifest["files"]
    others = manifest.get("entries")
    listed_others: dict[str, Any] = others if isinstance(others, dict) else {}
    stated = manifest.get("mutable")
    mutable = (
        [m for m in stated if isinstance(m, str) and m in listed_others]
        if isinstance(stated, list)
        else []
    )
    present = run.entries()
    problems = _listed_problems(run, manifest, listed, listed_others, present)
    for rel, found in sorted(present.items()):
        if rel in listed or rel in listed_others:
            continue
        if found.kind == "directory" and any(r.startswith(rel + "/") for r in listed):
            continue  # a listed file's folder (a version-1 manifest lists no directories)
        queue = _below(rel, mutable)
        if queue is not None and not _queue_layout_problem(rel[len(queue) + 1 :], found):
            continue  # a persistent queue's own file: a later collector may have drained it
        suffix = "" if found.kind == "file" else f" ({found.describe()})"
        problems.append(f"unexpected: {rel}{suffix}")
    return problems, mutable


def _listed_problems(
    run: RunDir,
    manifest: Mapping[str, Any],
    listed: Mapping[str, Any],
    listed_others: Mapping[str, Any],
    present: Mapping[str, Entry],
) -> list[str]:
    """The problems of what the manifest lists: its files (by digest), the required files
    never written, and its other entries (by kind and link target)."""
    problems: list[str] = []
    for rel, entry in sorted(listed.items()):
        found = present.get(rel)
        if found is None or found.kind == "directory":
            problems.append(f"missing: {rel}")
            continue
        if found.kind != "file":
            problems.append(f"modified: {rel} (now a {found.describe()})")
            continue
        fd = _open_regular(run.file(rel))
        expected = entry.get("sha256") if isinstance(entry, dict) else None
        if fd is None or _digest_fd(fd)[0] != expected:
            problems.append(f"modified: {rel}")
    required = manifest.get("required")
    for rel in sorted(required) if isinstance(required, list) else ():
        if rel not in listed:
            problems.append(f"missing: {rel} (never written)")
    for rel, entry in sorted(listed_others.items()):
        want = (
            Entry(str(entry.get("kind")), entry.get("target")) if isinstance(entry, dict) else None
        )
        found = present.get(rel)
        if found is None:
            problems.append(f"missing: {rel}")
        elif found != want:
            problems.append(f"modified: {rel} (now a {found.describe()})")
    return problems
