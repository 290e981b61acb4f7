"""OTLP/JSON, written by hand from the OTLP specification (``docs/specification.md``).

OTLP/JSON is the proto3 JSON mapping with deviations that a generic protobuf JSON library gets
wrong, which is why ``google.protobuf.json_format`` is not used here:

* ``traceId``/``spanId`` (in spans, links and log records) are case-insensitive **hex** strings,
  not base64;
* enum fields (``kind``, ``status.code``, ``severityNumber``) are integers, never names;
* keys are lowerCamelCase; unknown keys are ignored. Like the Collector we also accept the
  snake_case proto names when decoding, and always write lowerCamelCase;
* 64-bit integers are written as decimal strings; numbers and strings are both accepted.

Decoding keeps every valid record. A record that is malformed or invalid (a trace id of 31 hex
characters or with a ``g`` in it, an all-zero id, a span kind given by name or unknown, a
timestamp that is not a number) is rejected alone, and reported as partial success naming
exactly where and what (``resourceSpans[0].scopeSpans[1].spans[3].traceId: expected 32 hex
characters, got 31``), as :mod:`otel_bridge.otlp.proto_codec` rejects the spans it cannot take;
a bad resource or scope rejects the records under it. Only a body whose records cannot be
counted (not JSON, not an object, an envelope array or object of the wrong type) or that holds a
string that is not valid Unicode raises :class:`~otel_bridge.errors.DecodeError` for the whole
request, which the receiver answers with HTTP 400 (``docs/components.md``, *A bad record, or a
bad request*). The functions here are the reference; a record of the usual shape is read by
:mod:`.json_fast` without field paths, and the body parsed by msgspec where it can
(:func:`parse_fast`), neither changing any decoded value or message.

The single-record encoders (:func:`span_to_dict`, :func:`log_to_dict`) are what the ``file``
exporter writes; :func:`encode_traces`/:func:`encode_logs` produce whole export requests.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec

from otel_bridge.errors import DecodeError
from otel_bridge.model import (
    AnyValue,
    Attributes,
    LogRecord,
    Resource,
    Scope,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    Status,
    StatusCode,
    TransportPeer,
)
from otel_bridge.otlp import json_fast
from otel_bridge.otlp.json_read import (
    NotUnicodeError,
    field,
    parse_int,
    read_any_value,
    read_attributes,
    read_enum,
    read_hex_id,
    read_list,
    read_object,
    read_str,
    read_uint32,
    read_uint64,
    type_name,
)
from otel_bridge.otlp.records import Decoded, Rejections, group_by_resource_scope

__all__ = [
    "any_value_to_json",
    "attributes_to_json",
    "decode_logs",
    "decode_traces",
    "encode_logs",
    "encode_traces",
    "load_body",
    "log_to_dict",
    "parse_fast",
    "resource_to_dict",
    "scope_to_dict",
    "span_to_dict",
]

_SPAN_KINDS = {int(k): k for k in SpanKind}
_STATUS_CODES = {int(c): c for c in StatusCode}
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------


def any_value_to_json(value: AnyValue) -> dict[str, Any]:
    """The OTLP/JSON ``AnyValue`` object of a model value (``None`` is ``{}``)."""
    if value is None:
        return {}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return {"intValue": str(value)}
        return {"stringValue": str(value)}  # wider than int64: kept exactly, as text
    if isinstance(value, float):
        if math.isnan(value):
            return {"doubleValue": "NaN"}
        if math.isinf(value):
            return {"doubleValue": "Infinity" if value > 0 else "-Infinity"}
        return {"doubleValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple | list):
        return {"arrayValue": {"values": [any_value_to_json(v) for v in value]}}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": attributes_to_json(value)}}
    raise TypeError(f"not an OTLP AnyValue: {type(value).__name__}")


def attributes_to_json(attributes: Attributes) -> list[dict[str, Any]]:
    """The OTLP/JSON ``KeyValue`` array of ``attributes``."""
    return [{"key": k, "value": any_value_to_json(v)} for k, v in attributes.items()]


def _put_attributes(
    out: dict[str, Any],
    attributes: Attributes,
    dropped: int,
    to_json: Callable[[Attributes], list[Any]] = attributes_to_json,
) -> None:
    if attributes:
        out["attributes"] = to_json(attributes)
    if dropped:
        out["droppedAttributesCount"] = dropped


def resource_to_dict(resource: Resource) -> dict[str, Any]:
    """The OTLP/JSON ``Resource`` object (``schemaUrl`` belongs to the enclosing message)."""
    out: dict[str, Any] = {}
    _put_attributes(out, resource.attributes, resource.dropped_attributes_count)
    return out


def scope_to_dict(scope: Scope) -> dict[str, Any]:
    """The OTLP/JSON ``InstrumentationScope`` object."""
    out: dict[str, Any] = {}
    if scope.name:
        out["name"] = scope.name
    if scope.version:
        out["version"] = scope.version
    _put_attributes(out, scope.attributes, scope.dropped_attributes_count)
    return out


def span_to_dict(span: Span) -> dict[str, Any]:
    """The OTLP/JSON ``Span`` object of one span (its resource and scope are not included)."""
    out: dict[str, Any] = {"traceId": span.trace_id.hex(), "spanId": span.span_id.hex()}
    if span.trace_state:
        out["traceState"] = span.trace_state
    if span.parent_span_id:
        out["parentSpanId"] = span.parent_span_id.hex()
    if span.flags:
        out["flags"] = span.flags
    out["name"] = span.name
    out["kind"] = int(span.kind)
    out["startTimeUnixNano"] = str(span.start_time_unix_nano)
    out["endTimeUnixNano"] = str(span.end_time_unix_nano)
    _put_attributes(out, span.attributes, span.dropped_attributes_count)
    if span.events:
        events = []
        for event in span.events:
            e: dict[str, Any] = {"timeUnixNano": str(event.time_unix_nano), "name": event.name}
            _put_attributes(e, event.attributes, event.dropped_attributes_count)
            events.append(e)
        out["events"] = events
    if span.dropped_events_count:
        out["droppedEventsCount"] = span.dropped_events_count
    if span.links:
        links = []
        for link in span.links:
            lk: dict[str, Any] = {"traceId": link.trace_id.hex(), "spanId": link.span_id.hex()}
            if link.trace_state:
                lk["traceState"] = link.trace_state
            _put_attributes(lk, link.attributes, link.dropped_attributes_count)
            if link.flags:
                lk["flags"] = link.flags
            links.append(lk)
        out["links"] = links
    if span.dropped_links_count:
        out["droppedLinksCount"] = span.dropped_links_count
    status: dict[str, Any] = {}
    if span.status.message:
        status["message"] = span.status.message
    if span.status.code:
        status["code"] = int(span.status.code)
    out["status"] = status
    return out


def log_to_dict(
    log: LogRecord, attributes: Callable[[Attributes], list[Any]] = attributes_to_json
) -> dict[str, Any]:
    """The OTLP/JSON ``LogRecord`` object of one log record (without resource and scope);
    ``attributes`` converts its attributes (the file exporter's remembers their text)."""
    out: dict[str, Any] = {
        "timeUnixNano": str(log.time_unix_nano),
        "observedTimeUnixNano": str(log.observed_time_unix_nano),
    }
    if log.severity_number:
        out["severityNumber"] = log.severity_number
    if log.severity_text:
        out["severityText"] = log.severity_text
    if log.body is not None:
        out["body"] = any_value_to_json(log.body)
    _put_attributes(out, log.attributes, log.dropped_attributes_count, attributes)
    if log.flags:
        out["flags"] = log.flags
    if log.trace_id:
        out["traceId"] = log.trace_id.hex()
    if log.span_id:
        out["spanId"] = log.span_id.hex()
    if log.event_name:
        out["eventName"] = log.event_name
    return out


def _envelope(
    resource: Resource, scope_groups: list[dict[str, Any]], scopes_key: str
) -> dict[str, Any]:
    out: dict[str, Any] = {"resource": resource_to_dict(resource), scopes_key: scope_groups}
    if resource.schema_url:
        out["schemaUrl"] = resource.schema_url
    return out


def _scope_group(scope: Scope, records_key: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"scope": scope_to_dict(scope), records_key: records}
    if scope.schema_url:
        out["schemaUrl"] = scope.schema_url
    return out


def encode_traces(spans: Sequence[Span]) -> dict[str, Any]:
    """The OTLP/JSON ``ExportTraceServiceRequest`` of ``spans``, grouped by resource and scope."""
    return {
        "resourceSpans": [
            _envelope(
                resource,
                [
                    _scope_group(scope, "spans", [span_to_dict(s) for s in items])
                    for scope, items in scopes
                ],
                "scopeSpans",
            )
            for resource, scopes in group_by_resource_scope(spans)
        ]
    }


def encode_logs(logs: Sequence[LogRecord]) -> dict[str, Any]:
    """The OTLP/JSON ``ExportLogsServiceRequest`` of ``logs``, grouped by resource and scope."""
    return {
        "resourceLogs": [
            _envelope(
                resource,
                [
                    _scope_group(scope, "logRecords", [log_to_dict(r) for r in items])
                    for scope, items in scopes
                ],
                "scopeLogs",
            )
            for resource, scopes in group_by_resource_scope(logs)
        ]
    }


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


def load_body(body: bytes | str | Mapping[str, Any]) -> Mapping[str, Any]:
    """The top-level JSON object of a request body; a ``DecodeError`` if it is not JSON."""
    if isinstance(body, Mapping):
        return body
    try:
        value = _loads(body, oversize=False)
    except ValueError:
        # an integer literal over the interpreter's digit limit: parsed again (only then: the
        # hook costs a call per integer) keeping it as a marker that the field readers refuse
        # with the field's path (json_read.OversizeInt)
        value = _loads(body, oversize=True)
    if not isinstance(value, dict):
        raise DecodeError(f"body: expected a JSON object, got {type_name(value)}")
    return value


_PARSER = msgspec.json.Decoder()
_PARSE_FRAMES = 8
"""Extra Python calls under which msgspec parses. On Python 3.11 a C parser's nesting counts
against the same recursion budget as Python calls; ``json.loads`` parses five calls below
``_decode`` (``load_body``, ``_loads``, ``json.loads``, ``decode``, ``raw_decode``), msgspec ten
(``parse_fast`` and nine ``_parse_below``), so msgspec gives up on slightly shallower nesting
than ``json.loads`` and never accepts a body that ``json.loads`` finds nested too deeply."""


def parse_fast(body: bytes | str | Mapping[str, Any]) -> dict[str, Any] | None:
    """The body's top-level object as :func:`load_body` gives it, parsed by msgspec's faster
    JSON parser; None when that parser refuses the body or it is not an object.

    msgspec is the stricter parser: where it differs from ``json`` it refuses (``NaN``, integers
    over 64 bits, a lone surrogate, a byte order mark, UTF-16 text, nesting near the recursion
    limit, ...), and the caller then has :func:`load_body`, the reference, parse and decide.
    """
    if type(body) is bytes or type(body) is str:
        try:
            value = _parse_below(_PARSE_FRAMES, body)
        except (msgspec.DecodeError, RecursionError, ValueError):
            return None
        if type(value) is dict:
            return value
    return None


def _parse_below(frames: int, body: bytes | str) -> Any:
    if frames:
        return _parse_below(frames - 1, body)
    return _PARSER.decode(body)


def _loads(body: bytes | str, *, oversize: bool) -> Any:
    """``json.loads``; malformed JSON and too deep nesting as ``DecodeError``."""
    try:
        return json.loads(body, parse_int=parse_int) if oversize else json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DecodeError(f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise DecodeError("body: JSON nested too deeply") from None


def _resource(obj: Mapping[str, Any], path: str, peer: TransportPeer | None) -> Resource:
    rpath = f"{path}.resource"
    pb = read_object(obj.get("resource"), rpath)
    return Resource(
        attributes=read_attributes(pb.get("attributes"), f"{rpath}.attributes"),
        dropped_attributes_count=read_uint32(
            field(pb, "droppedAttributesCount", "dropped_attributes_count"),
            f"{rpath}.droppedAttributesCount",
        ),
        schema_url=read_str(field(obj, "schemaUrl", "schema_url"), f"{path}.schemaUrl"),
        peer=peer,
    )


def _scope(obj: Mapping[str, Any], path: str) -> Scope:
    spath = f"{path}.scope"
    pb = read_object(obj.get("scope"), spath)
    return Scope(
        name=read_str(pb.get("name"), f"{spath}.name"),
        version=read_str(pb.get("version"), f"{spath}.version"),
        attributes=read_attributes(pb.get("attributes"), f"{spath}.attributes"),
        dropped_attributes_count=read_uint32(
            field(pb, "droppedAttributesCount", "dropped_attributes_count"),
            f"{spath}.droppedAttributesCount",
        ),
        schema_url=read_str(field(obj, "schemaUrl", "schema_url"), f"{path}.schemaUrl"),
    )


def _dropped(obj: Mapping[str, Any], path: str) -> int:
    return read_uint32(
        field(obj, "droppedAttributesCount", "dropped_attributes_count"),
        f"{path}.droppedAttributesCount",
    )


def _events(obj: Mapping[str, Any], path: str) -> tuple[SpanEvent, ...]:
    events = []
    for i, item in enumerate(read_list(obj.get("events"), f"{path}.events")):
        epath = f"{path}.events[{i}]"
        e = read_object(item, epath)
        events.append(
            SpanEvent(
                time_unix_nano=read_uint64(
                    field(e, "timeUnixNano", "time_unix_nano"), f"{epath}.timeUnixNano"
                ),
                name=read_str(e.get("name"), f"{epath}.name"),
                attributes=read_attributes(e.get("attributes"), f"{epath}.attributes"),
                dropped_attributes_count=_dropped(e, epath),
            )
        )
    return tuple(events)


def _links(obj: Mapping[str, Any], path: str) -> tuple[SpanLink, ...]:
    links = []
    for i, item in enumerate(read_list(obj.get("links"), f"{path}.links")):
        lpath = f"{path}.links[{i}]"
        lk = read_object(item, lpath)
        links.append(
            SpanLink(
                trace_id=read_hex_id(
                    field(lk, "traceId", "trace_id"), f"{lpath}.traceId", 16, optional=False
                ),
                span_id=read_hex_id(
                    field(lk, "spanId", "span_id"), f"{lpath}.spanId", 8, optional=False
                ),
                trace_state=read_str(field(lk, "traceState", "trace_state"), f"{lpath}.traceState"),
                attributes=read_attributes(lk.get("attributes"), f"{lpath}.attributes"),
                dropped_attributes_count=_dropped(lk, lpath),
                flags=read_uint32(lk.get("flags"), f"{lpath}.flags"),
            )
        )
    return tuple(links)


def _invalid(span: Span, kind: int, code: int, path: str) -> str | None:
    """Why a well-formed span is invalid (rejected alone, partial success), or None."""
    if kind not in _SPAN_KINDS:
        return f"{path}.kind: unknown span kind {kind}"
    if code not in _STATUS_CODES:
        return f"{path}.status.code: unknown status code {code}"
    if span.trace_id == bytes(16):
        return f"{path}.traceId: must not be all zeros"
    if span.span_id == bytes(8):
        return f"{path}.spanId: must not be all zeros"
    for i, link in enumerate(span.links):
        if link.trace_id == bytes(16):
            return f"{path}.links[{i}].traceId: must not be all zeros"
        if link.span_id == bytes(8):
            return f"{path}.links[{i}].spanId: must not be all zeros"
    return None


def _span(item: Any, path: str, resource: Resource, scope: Scope) -> Span | str:
    """The span at ``path``, or why it is invalid; a malformed field raises ``DecodeError``."""
    obj = read_object(item, path)
    kind = read_enum(obj.get("kind"), f"{path}.kind")
    status_obj = read_object(obj.get("status"), f"{path}.status")
    code = read_enum(status_obj.get("code"), f"{path}.status.code")
    span = Span(
        resource=resource,
        scope=scope,
        trace_id=read_hex_id(
            field(obj, "traceId", "trace_id"), f"{path}.traceId", 16, optional=False
        ),
        span_id=read_hex_id(field(obj, "spanId", "span_id"), f"{path}.spanId", 8, optional=False),
        parent_span_id=read_hex_id(
            field(obj, "parentSpanId", "parent_span_id"), f"{path}.parentSpanId", 8, optional=True
        ),
        trace_state=read_str(field(obj, "traceState", "trace_state"), f"{path}.traceState"),
        flags=read_uint32(obj.get("flags"), f"{path}.flags"),
        name=read_str(obj.get("name"), f"{path}.name"),
        kind=_SPAN_KINDS.get(kind, SpanKind.UNSPECIFIED),
        start_time_unix_nano=read_uint64(
            field(obj, "startTimeUnixNano", "start_time_unix_nano"), f"{path}.startTimeUnixNano"
        ),
        end_time_unix_nano=read_uint64(
            field(obj, "endTimeUnixNano", "end_time_unix_nano"), f"{path}.endTimeUnixNano"
        ),
        attributes=read_attributes(obj.get("attributes"), f"{path}.attributes"),
        dropped_attributes_count=_dropped(obj, path),
        events=_events(obj, path),
        dropped_events_count=read_uint32(
            field(obj, "droppedEventsCount", "dropped_events_count"), f"{path}.droppedEventsCount"
        ),
        links=_links(obj, path),
        dropped_links_count=read_uint32(
            field(obj, "droppedLinksCount", "dropped_links_count"), f"{path}.droppedLinksCount"
        ),
        status=Status(
            code=_STATUS_CODES.get(code, StatusCode.UNSET),
            message=read_str(status_obj.get("message"), f"{path}.status.message"),
        ),
    )
    return _invalid(span, kind, code, path) or span


@dataclass(frozen=True, slots=True)
class _Shape:
    """The keys of one signal's export request (camelCase, and the proto names also accepted)."""

    top: str
    top_snake: str
    scopes: str
    scopes_snake: str
    records: str
    records_snake: str | None
    noun: str


_TRACES = _Shape(
    "resourceSpans", "resource_spans", "scopeSpans", "scope_spans", "spans", None, "spans"
)
_LOGS = _Shape(
    "resourceLogs",
    "resource_logs",
    "scopeLogs",
    "scope_logs",
    "logRecords",
    "log_records",
    "log records",
)

R = TypeVar("R", Span, LogRecord)


def _decode(
    body: bytes | str | Mapping[str, Any],
    shape: _Shape,
    read_record: Callable[[Any, str, Resource, Scope], R | str],
    peer: TransportPeer | None,
    fast: Callable[[Any, Resource, Scope], R] | None = None,
) -> Decoded[R]:
    """The records of an export request: what is valid is kept, what is not is rejected.

    A fault inside one record (a field of the wrong type, a bad id, an unknown enum value, an
    unreadable value) rejects that record, named by path. A fault in a resource or scope rejects
    the records under it (they cannot be read without it), counted. The request fails as a whole
    (``DecodeError``, HTTP 400) only when the records cannot be counted: the body is not JSON or
    not an object, or an envelope (``resourceSpans``, its items, ``scopeSpans``, its items, the
    ``spans`` arrays) is not of the OTLP shape; and for a string that is not valid Unicode
    (:class:`~otel_bridge.otlp.json_read.NotUnicodeError`), as on the protobuf path.

    ``fast``, when given, reads a record of the usual shape without building its path
    (:mod:`~otel_bridge.otlp.json_fast`); a record it does not take is read by ``read_record``,
    the reference, which alone decides rejections and their messages. The body is then parsed
    by :func:`parse_fast` where it can; without ``fast``, by :func:`load_body` (the reference).
    """
    parsed = None if fast is None else parse_fast(body)
    # load_body here, as deep in the stack with ``fast`` as without (the nesting limit)
    root = load_body(body) if parsed is None else parsed
    records: list[R] = []
    rejects = Rejections()
    for ri, item in enumerate(read_list(field(root, shape.top, shape.top_snake), shape.top)):
        rpath = f"{shape.top}[{ri}]"
        envelope = read_object(item, rpath)
        groups = _scope_groups(envelope, rpath, shape)
        try:
            resource = _resource(envelope, rpath, peer)
        except NotUnicodeError:
            raise
        except DecodeError as exc:
            _reject_group(rejects, str(exc), rpath, sum(len(g[2]) for g in groups), shape.noun)
            continue
        for spath, group, items in groups:
            try:
                scope = _scope(group, spath)
            except NotUnicodeError:
                raise
            except DecodeError as exc:
                _reject_group(rejects, str(exc), spath, len(items), shape.noun)
                continue
            for pi, record in enumerate(items):
                if fast is not None:
                    try:
                        records.append(fast(record, resource, scope))
                        continue
                    except json_fast.SLOW:
                        pass  # not the usual shape, or invalid: the reference decides
                try:
                    result = read_record(record, f"{spath}.{shape.records}[{pi}]", resource, scope)
                except NotUnicodeError:
                    raise
                except DecodeError as exc:
                    result = str(exc)
                if isinstance(result, str):
                    rejects.add(result)
                else:
                    records.append(result)
    return Decoded(tuple(records), rejects.count, rejects.message(shape.noun))


def _scope_groups(
    envelope: Mapping[str, Any], rpath: str, shape: _Shape
) -> list[tuple[str, Mapping[str, Any], list[Any]]]:
    """Each scope group of one resource: its path, its object and its records (unread)."""
    spath = f"{rpath}.{shape.scopes}"
    groups = []
    for si, item in enumerate(read_list(field(envelope, shape.scopes, shape.scopes_snake), spath)):
        gpath = f"{spath}[{si}]"
        group = read_object(item, gpath)
        items = read_list(
            field(group, shape.records, shape.records_snake), f"{gpath}.{shape.records}"
        )
        groups.append((gpath, group, items))
    return groups


def _reject_group(rejects: Rejections, problem: str, where: str, count: int, noun: str) -> None:
    """Reject the ``count`` records under the resource or scope at ``where``."""
    if count:
        rejects.add(f"{problem} (all {count} {noun} of {where} rejected)", count)


def decode_traces(
    body: bytes | str | Mapping[str, Any], peer: TransportPeer | None = None
) -> Decoded[Span]:
    """The spans of an OTLP/JSON ``ExportTraceServiceRequest`` body.

    Raises ``DecodeError`` naming the path when the request as a whole is malformed; a span
    that is malformed or invalid is rejected alone and reported in the result (see
    :func:`_decode` for which is which).
    """
    return _decode(body, _TRACES, _span, peer, json_fast.span)


def _log(item: Any, path: str, resource: Resource, scope: Scope) -> LogRecord:
    obj = read_object(item, path)
    body = obj.get("body")
    return LogRecord(
        resource=resource,
        scope=scope,
        time_unix_nano=read_uint64(
            field(obj, "timeUnixNano", "time_unix_nano"), f"{path}.timeUnixNano"
        ),
        observed_time_unix_nano=read_uint64(
            field(obj, "observedTimeUnixNano", "observed_time_unix_nano"),
            f"{path}.observedTimeUnixNano",
        ),
        severity_number=read_enum(
            field(obj, "severityNumber", "severity_number"), f"{path}.severityNumber"
        ),
        severity_text=read_str(field(obj, "severityText", "severity_text"), f"{path}.severityText"),
        body=None if body is None else read_any_value(body, f"{path}.body"),
        attributes=read_attributes(obj.get("attributes"), f"{path}.attributes"),
        dropped_attributes_count=_dropped(obj, path),
        flags=read_uint32(obj.get("flags"), f"{path}.flags"),
        trace_id=read_hex_id(
            field(obj, "traceId", "trace_id"), f"{path}.traceId", 16, optional=True
        ),
        span_id=read_hex_id(field(obj, "spanId", "span_id"), f"{path}.spanId", 8, optional=True),
        event_name=read_str(field(obj, "eventName", "event_name"), f"{path}.eventName"),
    )


def decode_logs(
    body: bytes | str | Mapping[str, Any], peer: TransportPeer | None = None
) -> Decoded[LogRecord]:
    """The log records of an OTLP/JSON ``ExportLogsServiceRequest`` body.

    Raises ``DecodeError`` naming the path when the request as a whole is malformed; a record
    that is malformed is rejected alone and reported in the result, as spans are.
    """
    return _decode(body, _LOGS, _log, peer, json_fast.log)
