"""Small typed readers over OTLP attribute values, shared by the span and log normalizers."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping

from otel_bridge.model import AnyValue, Attributes


def get_str(attrs: Attributes, *keys: str) -> str | None:
    """The first non-empty string value among ``keys`` (numbers are converted), or None."""
    for key in keys:
        value = attrs.get(key)
        if value is None:
            continue
        if value.__class__ is str:  # the common case, without the isinstance chain
            if value:
                return value
            continue
        if isinstance(value, str):
            if value:
                return value
        elif isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
    return None


def get_int(attrs: Attributes, key: str) -> int | None:
    """An integer attribute (a decimal string is accepted), or None."""
    value = attrs.get(key)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def get_bool(attrs: Attributes, key: str) -> bool | None:
    """A Boolean attribute stated explicitly (``"true"``/``"false"`` strings too), or None."""
    value = attrs.get(key)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def iso_to_ms(value: str | None) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 time (``Z`` or offset; naive means UTC)."""
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return round(parsed.timestamp() * 1000)


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
