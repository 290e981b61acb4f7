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
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import orjson

from otel_bridge.errors import DecodeError

from .report import schema

_OPTIONS = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2
_HOLE = "\x00provenance\x00"
"""Stands for the provenance object while the rest of the document is encoded."""


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
        atomically and owner-only."""
        head, tail = orjson.dumps({**doc, "provenance": _HOLE}, option=_OPTIONS).split(
            orjson.dumps(_HOLE), 1
        )
        tmp = path.with_name(f".tmp-{path.name}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(head + b"{\n")
            self._file.seek(0)
            shutil.copyfileobj(self._file, out, 1 << 20)
            out.write(b"\n}" + tail + b"\n")
        os.replace(tmp, path)

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
