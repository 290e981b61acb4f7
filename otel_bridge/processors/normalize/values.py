"""Conveniences over :mod:`otel_bridge.identity`'s attribute readers, and JSON-bearing values.

The readers themselves (``str_value``, ``int_value``, ``bool_value``) live in ``identity``; these
wrappers only look a key (or the first of several keys) up first.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from otel_bridge.identity import bool_value, int_value, str_value
from otel_bridge.model import AnyValue, Attributes


def get_str(attrs: Attributes, *keys: str) -> str | None:
    """The first of ``keys`` whose value :func:`~otel_bridge.identity.str_value` accepts, or None.

    A thin wrapper: a plain non-empty ``str`` (nearly every value) is taken without a call.
    """
    for key in keys:
        value = attrs.get(key)
        if value is None:
            continue
        if value.__class__ is str:
            if value:
                return value
            continue
        found = str_value(value)
        if found is not None:
            return found
    return None


def get_int(attrs: Attributes, key: str) -> int | None:
    """``attrs[key]`` read by :func:`~otel_bridge.identity.int_value` (None when absent)."""
    return int_value(attrs.get(key))


def get_bool(attrs: Attributes, key: str) -> bool | None:
    """``attrs[key]`` read by :func:`~otel_bridge.identity.bool_value` (None when absent)."""
    return bool_value(attrs.get(key))


def json_value(value: AnyValue) -> object:
    """Decode a JSON-bearing attribute: a JSON string is parsed, a mapping is taken as is.

    Returns the sentinel :data:`NOT_JSON` when the value is a string that is not JSON.
    """
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, str):
        try:
            decoded: object = json.loads(value)
        except ValueError:
            return NOT_JSON
        return decoded
    return NOT_JSON


def _plain(value: AnyValue) -> object:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


class _NotJson:
    """Marker for a value that did not decode as JSON."""

    def __repr__(self) -> str:
        return "NOT_JSON"


NOT_JSON: object = _NotJson()
"""Returned by :func:`json_value` for a string that is not JSON."""
