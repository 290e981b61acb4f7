"""Writing ``compare.json`` in bounded memory: each run's provenance is spooled to disk as the
run is compared, and the document is written around it.

The finished document (runs, coverage, impact, joined graph) is encoded with sorted keys and
two-space indentation, as before; the ``provenance`` object is copied in from the spool, one
member per run in the order the runs were given (each member itself sorted and indented from
column 0). The result is the same JSON value :func:`~otel_bridge.compare.compare` builds in
memory; only the whitespace inside ``provenance`` and the order of its members differ.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import secrets
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import orjson

from otel_bridge.errors import DecodeError

from .compact import Streamed
from .report import schema

_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2


@functools.cache
def _provenance_validator() -> Any:
    full = schema()
    member = {"$defs": full["$defs"], **full["properties"]["provenance"]["additionalProperties"]}
    validators = importlib.import_module("jsonschema.validators")
    return validators.validator_for(full)(member)


def validate_provenance(run_id: str, provenance: Any) -> None:
    """Raise :class:`DecodeError` when one run's provenance member breaks the schema."""
    errors = sorted(
        _provenance_validator().iter_errors(provenance), key=lambda e: list(e.absolute_path)
    )
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "<root>"
        raise DecodeError(
            f"compare.json does not match its schema: provenance/{run_id}/{where}: "
            f"{errors[0].message}"
        )


class _Spooled(Streamed):
    """The spooled provenance members, copied in as they are."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file

    def encoded(self, indent: int) -> Iterator[bytes]:
        yield b"{\n"
        while chunk := self.file.read(1 << 20):
            yield chunk
        yield b"\n}"


def write_document(doc: Mapping[str, Any], path: Path) -> None:
    """Write ``doc`` to ``path`` as ``orjson`` encodes it with sorted keys and two-space
    indentation, atomically and owner-only, encoding each :class:`~.compact.Streamed` value in
    it piece by piece, so the whole text is never in memory."""
    streamed: list[Streamed] = []
    mark = secrets.token_hex(8)

    def hole(value: Any) -> str:
        if not isinstance(value, Streamed):
            raise TypeError(f"not JSON serializable: {type(value).__name__}")
        streamed.append(value)
        return f"\x00{mark}:{len(streamed) - 1}\x00"

    text = orjson.dumps(doc, default=hole, option=_OPTIONS)
    parts = re.split(rb'"\\u0000' + mark.encode() + rb":(\d+)\\u0000\"", text)
    tmp = path.with_name(f".tmp-{path.name}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(parts[0])
        for n in range(1, len(parts), 2):
            before = parts[n - 1]
            line = before[before.rfind(b"\n") + 1 :]
            indent = len(line) - len(line.lstrip(b" "))
            for piece in streamed[int(parts[n])].encoded(indent):
                out.write(piece)
            out.write(parts[n + 1])
        out.write(b"\n")
    os.replace(tmp, path)


class ProvenanceSpool:
    """A private temporary file beside the output that collects provenance members."""

    def __init__(self, directory: Path) -> None:
        fd, name = tempfile.mkstemp(prefix=".provenance-", dir=directory)
        os.fchmod(fd, 0o600)
        self.path = Path(name)
        self._file: BinaryIO = os.fdopen(fd, "w+b")
        self.count = 0

    def add(self, run_id: str, provenance: Mapping[str, Any]) -> None:
        """Append one run's member (``"run id": {...}``)."""
        if self.count:
            self._file.write(b",\n")
        self._file.write(orjson.dumps(run_id) + b": " + orjson.dumps(provenance, option=_OPTIONS))
        self.count += 1

    def write_document(self, doc: Mapping[str, Any], path: Path) -> None:
        """Write ``doc`` (without ``provenance``) and the spooled members to ``path``,
        atomically and owner-only; :class:`~.compact.Streamed` values in ``doc`` are encoded
        piece by piece (:func:`write_document`)."""
        self._file.seek(0)
        write_document({**doc, "provenance": _Spooled(self._file)}, path)

    def close(self) -> None:
        """Remove the spool."""
        self._file.close()
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> ProvenanceSpool:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
