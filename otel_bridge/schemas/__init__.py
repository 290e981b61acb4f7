"""The JSON Schemas of the documents otel-bridge writes, shipped in the package, and one check.

``graph.schema.json`` (graph.json, ``docs/graph.md``), ``review.schema.json`` (review.json,
``docs/review.md``) and ``compare.schema.json`` (compare.json, ``docs/compare.md``).
"""

from __future__ import annotations

import functools
import importlib
import json
from importlib import resources
from typing import Any

from otel_bridge.errors import DecodeError


@functools.cache
def load(name: str) -> dict[str, Any]:
    """The schema ``<name>.schema.json`` (``graph``, ``review``, ``compare``)."""
    text = resources.files(__name__).joinpath(f"{name}.schema.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@functools.cache
def _validator(name: str) -> Any:
    # Imported by name: jsonschema ships no type stubs here, and only this function needs it.
    validators = importlib.import_module("jsonschema.validators")
    return validators.validator_for(load(name))(load(name))


def check(name: str, doc: Any, *, shown: int = 5) -> None:
    """Raise :class:`DecodeError` naming the first ``shown`` places where ``doc`` breaks the
    schema ``name`` (``<name>.json does not match its schema: path: message; ...``)."""
    errors = sorted(_validator(name).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if not errors:
        return
    lines = [
        f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in errors[:shown]
    ]
    more = f" (and {len(errors) - shown} more)" if len(errors) > shown else ""
    raise DecodeError(f"{name}.json does not match its schema: " + "; ".join(lines) + more)
