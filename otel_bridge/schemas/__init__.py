"""The JSON Schemas of the documents otel-bridge writes, shipped in the package, and one check.

``graph.schema.json`` (graph.json, ``docs/graph.md``), ``review.schema.json`` (review.json,
``docs/review.md``) and ``compare.schema.json`` (compare.json, ``docs/compare.md``).

:func:`check` answers a valid document with a compiled validator (``jsonschema-rs``, a Rust
implementation of draft 2020-12, a base dependency: about 150 times faster than ``jsonschema`` on
a one-hour review). A document it refuses, or any document when ``jsonschema-rs`` cannot be
imported, is checked by ``jsonschema``, which decides and names the places that break the schema.
So the verdict and the messages are ``jsonschema``'s whenever the fast validator says no.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Callable
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


@functools.cache
def fast_validator(name: str) -> Callable[[Any], bool] | None:
    """``is_valid`` of the compiled validator of schema ``name``, or ``None`` without
    ``jsonschema-rs`` (then :func:`check` uses ``jsonschema`` alone).

    Formats are annotations, not assertions, as in ``jsonschema``'s default validator."""
    try:
        compiled = importlib.import_module("jsonschema_rs")
    except ImportError:
        return None
    is_valid: Callable[[Any], bool] = compiled.validator_for(
        load(name), validate_formats=False
    ).is_valid
    return is_valid


def check(name: str, doc: Any, *, shown: int = 5) -> None:
    """Raise :class:`DecodeError` naming the first ``shown`` places where ``doc`` breaks the
    schema ``name`` (``<name>.json does not match its schema: path: message; ...``)."""
    fast = fast_validator(name)
    if fast is not None and fast(doc):
        return
    errors = sorted(_validator(name).iter_errors(doc), key=lambda e: list(e.absolute_path))
    if not errors:
        return
    lines = [
        f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in errors[:shown]
    ]
    more = f" (and {len(errors) - shown} more)" if len(errors) > shown else ""
    raise DecodeError(f"{name}.json does not match its schema: " + "; ".join(lines) + more)
