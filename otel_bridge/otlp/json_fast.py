"""The fast path of OTLP/JSON decoding: the usual span or log record read without field paths.

**Marked hot path.** :func:`span` reads a span of the usual shape (lowerCamelCase keys, ids as hex
strings, timestamps as decimal strings or numbers, scalar attribute values) straight into the
model, building no ``resourceSpans[0]...`` path string. Anything else (a snake_case key, a
number given as ``1e3`` or ``1.0``, a bytes, array or key-value-list value, an out-of-range or
mistyped field, an id that is not exactly hex, an invalid span) raises :class:`UnusualError`,
and the caller reads that span again with the readable reference, ``json_codec._span`` (with the
``json_read`` readers), which names the path of any fault and is the contract. So this path
decides nothing on its own: it either returns exactly the span the reference returns, or hands
the span to the reference. :func:`log` does the same for log records (reference:
``json_codec._log``). ``tests/otlp/test_otlp_json_fast.py`` checks both on a wide corpus of
valid and invalid documents.
"""

from __future__ import annotations

from typing import Any

from otel_bridge.model import (
    UNSET_STATUS,
    AnyValue,
    LogRecord,
    Resource,
    Scope,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    Status,
    StatusCode,
)

__all__ = ["SLOW", "UnusualError", "log", "span"]

_SPAN_KINDS = {int(k): k for k in SpanKind}
_STATUS_CODES = {int(c): c for c in StatusCode}
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1
_UINT32_MAX = 2**32 - 1
_ZERO16 = bytes(16)
_ZERO8 = bytes(8)
_UNSPECIFIED = SpanKind.UNSPECIFIED
_SPAN_SNAKE = frozenset(
    {
        "trace_id",
        "span_id",
        "parent_span_id",
        "trace_state",
        "start_time_unix_nano",
        "end_time_unix_nano",
        "dropped_attributes_count",
        "dropped_events_count",
        "dropped_links_count",
    }
)
"""The proto field names the reference also accepts: a span using any of them goes there."""
_EVENT_SNAKE = frozenset({"time_unix_nano", "dropped_attributes_count"})
_LOG_SNAKE = frozenset(
    {
        "time_unix_nano",
        "observed_time_unix_nano",
        "severity_number",
        "severity_text",
        "dropped_attributes_count",
        "trace_id",
        "span_id",
        "event_name",
    }
)
_LINK_SNAKE = frozenset({"trace_id", "span_id", "trace_state", "dropped_attributes_count"})


class UnusualError(Exception):
    """This span is not of the usual shape: read it with the reference reader."""


SLOW = (UnusualError, ValueError, KeyError, OverflowError)
"""What :func:`span` raises to hand a span to the reference (``ValueError``: ``int``,
``bytes.fromhex`` or ``str.encode`` refused the text; ``KeyError``: an unknown enum value;
``OverflowError``: ``float`` refused an integer past the double range)."""


def _text(value: Any) -> str:
    """A string field (``null`` is empty); a lone surrogate raises (``UnicodeEncodeError``)."""
    if type(value) is str:
        if not value.isascii():
            value.encode("utf-8")
        return value
    if value is None:
        return ""
    raise UnusualError


def _uint(value: Any, hi: int) -> int:
    """An unsigned integer up to ``hi`` given as a JSON integer or a decimal string."""
    if type(value) is str:
        number = int(value)  # as the reference's int(value.strip(), 10); else ValueError
    elif type(value) is int:
        number = value
    elif value is None:
        return 0
    else:
        raise UnusualError
    if 0 <= number <= hi:
        return number
    raise UnusualError


def _id(value: Any, size: int, zero: bytes) -> bytes:
    """A hex id of ``size`` bytes (exactly ``2 * size`` hex digits), not ``zero`` (all zeros)."""
    if type(value) is not str or len(value) != 2 * size:
        raise UnusualError
    raw = bytes.fromhex(value)  # ValueError on a non-hex character
    if len(raw) != size or raw == zero:  # fewer bytes: fromhex skipped whitespace
        raise UnusualError
    return raw


def _value(av: Any) -> AnyValue:
    """A scalar ``AnyValue`` object of one key (``{}`` and ``null`` are None)."""
    if type(av) is not dict:
        if av is None:
            return None
        raise UnusualError
    if len(av) != 1:
        if not av:
            return None
        raise UnusualError
    x = av.get("stringValue")
    if x is not None:
        return _text(x)
    x = av.get("intValue")
    if x is not None:
        if type(x) is str:
            number = int(x)
        elif type(x) is int:
            number = x
        else:
            raise UnusualError
        if _INT64_MIN <= number <= _INT64_MAX:
            return number
        raise UnusualError
    x = av.get("boolValue")
    if type(x) is bool:
        return x
    x = av.get("doubleValue")
    if type(x) is float:
        return x
    if type(x) is int:
        return float(x)
    raise UnusualError


def _attributes(value: Any) -> dict[str, AnyValue]:
    """An array of ``KeyValue`` objects with scalar values."""
    out: dict[str, AnyValue] = {}
    if value is None:
        return out
    if type(value) is not list:
        raise UnusualError
    for kv in value:
        if type(kv) is not dict:
            raise UnusualError
        key = kv.get("key")
        if type(key) is not str or not key.isascii():
            key = _text(key)
        av = kv.get("value")
        if type(av) is dict and len(av) == 1:  # inline: an ASCII stringValue, the usual value
            x = av.get("stringValue")
            if type(x) is str and x.isascii():
                out[key] = x
                continue
        out[key] = _value(av)
    return out


def _events(value: Any) -> tuple[SpanEvent, ...]:
    if value is None:
        return ()
    if type(value) is not list:
        raise UnusualError
    events = []
    for e in value:
        if type(e) is not dict or not _EVENT_SNAKE.isdisjoint(e):
            raise UnusualError
        get = e.get
        dropped = get("droppedAttributesCount")
        events.append(
            SpanEvent(
                time_unix_nano=_uint(get("timeUnixNano"), _UINT64_MAX),
                name=_text(get("name")),
                attributes=_attributes(get("attributes")),
                dropped_attributes_count=0 if dropped is None else _uint(dropped, _UINT32_MAX),
            )
        )
    return tuple(events)


def _links(value: Any) -> tuple[SpanLink, ...]:
    if value is None:
        return ()
    if type(value) is not list:
        raise UnusualError
    links = []
    for lk in value:
        if type(lk) is not dict or not _LINK_SNAKE.isdisjoint(lk):
            raise UnusualError
        get = lk.get
        links.append(
            SpanLink(
                trace_id=_id(get("traceId"), 16, _ZERO16),
                span_id=_id(get("spanId"), 8, _ZERO8),
                trace_state=_text(get("traceState")),
                attributes=_attributes(get("attributes")),
                dropped_attributes_count=_uint(get("droppedAttributesCount"), _UINT32_MAX),
                flags=_uint(get("flags"), _UINT32_MAX),
            )
        )
    return tuple(links)


def _status(value: Any) -> Status:
    if value is None or (type(value) is dict and not value):
        return UNSET_STATUS
    if type(value) is not dict:
        raise UnusualError
    code = value.get("code")
    if code is None:
        code = 0
    elif type(code) is not int:
        raise UnusualError
    return Status(code=_STATUS_CODES[code], message=_text(value.get("message")))


def span(obj: Any, resource: Resource, scope: Scope) -> Span:
    """The span ``obj``, exactly as ``json_codec._span`` reads it; raises one of :data:`SLOW`
    for any span that is not of the usual shape or is invalid (the reference then decides)."""
    if type(obj) is not dict or not _SPAN_SNAKE.isdisjoint(obj):
        raise UnusualError
    get = obj.get
    kind = get("kind")
    if type(kind) is int:
        kind = _SPAN_KINDS[kind]
    elif kind is None:
        kind = _UNSPECIFIED
    else:
        raise UnusualError
    parent = get("parentSpanId")
    state = get("traceState")
    dropped = get("droppedAttributesCount")
    flags = get("flags")
    events = get("events")
    dropped_events = get("droppedEventsCount")
    links = get("links")
    dropped_links = get("droppedLinksCount")
    return Span(
        resource=resource,
        scope=scope,
        trace_id=_id(get("traceId"), 16, _ZERO16),
        span_id=_id(get("spanId"), 8, _ZERO8),
        parent_span_id=_optional_id(parent, 8),
        trace_state="" if state is None else _text(state),
        flags=0 if flags is None else _uint(flags, _UINT32_MAX),
        name=_text(get("name")),
        kind=kind,
        start_time_unix_nano=_uint(get("startTimeUnixNano"), _UINT64_MAX),
        end_time_unix_nano=_uint(get("endTimeUnixNano"), _UINT64_MAX),
        attributes=_attributes(get("attributes")),
        dropped_attributes_count=0 if dropped is None else _uint(dropped, _UINT32_MAX),
        events=() if events is None else _events(events),
        dropped_events_count=0 if dropped_events is None else _uint(dropped_events, _UINT32_MAX),
        links=() if links is None else _links(links),
        dropped_links_count=0 if dropped_links is None else _uint(dropped_links, _UINT32_MAX),
        status=_status(get("status")),
    )


def _optional_id(value: Any, size: int) -> bytes:
    """A parent span id, or a log record's ids: absent, empty, or exactly ``2 * size`` hex
    digits (all zeros allowed: the reference does not refuse them)."""
    if value is None or value == "":
        return b""
    if type(value) is not str or len(value) != 2 * size:
        raise UnusualError
    raw = bytes.fromhex(value)
    if len(raw) != size:
        raise UnusualError
    return raw


def log(obj: Any, resource: Resource, scope: Scope) -> LogRecord:
    """The log record ``obj``, exactly as ``json_codec._log`` reads it; raises one of
    :data:`SLOW` for any record that is not of the usual shape (the reference then decides)."""
    if type(obj) is not dict or not _LOG_SNAKE.isdisjoint(obj):
        raise UnusualError
    get = obj.get
    severity = get("severityNumber")
    if severity is None:
        severity = 0
    elif type(severity) is not int or not -(2**31) <= severity < 2**31:
        raise UnusualError
    body = get("body")
    dropped = get("droppedAttributesCount")
    flags = get("flags")
    return LogRecord(
        resource=resource,
        scope=scope,
        time_unix_nano=_uint(get("timeUnixNano"), _UINT64_MAX),
        observed_time_unix_nano=_uint(get("observedTimeUnixNano"), _UINT64_MAX),
        severity_number=severity,
        severity_text=_text(get("severityText")),
        body=None if body is None else _value(body),
        attributes=_attributes(get("attributes")),
        dropped_attributes_count=0 if dropped is None else _uint(dropped, _UINT32_MAX),
        flags=0 if flags is None else _uint(flags, _UINT32_MAX),
        trace_id=_optional_id(get("traceId"), 16),
        span_id=_optional_id(get("spanId"), 8),
        event_name=_text(get("eventName")),
    )
