"""Conversion between opentelemetry-proto messages and the typed model, both directions.

Decoding turns an ``ExportTraceServiceRequest`` / ``ExportLogsServiceRequest`` into typed
:class:`~otel_bridge.model.Span` / :class:`~otel_bridge.model.LogRecord` values. Records that are
invalid on their own (a trace id that is not 16 bytes, an unknown span kind) are rejected one by one
and reported in a :class:`Decoded` result, so a receiver can answer with OTLP *partial success*
while accepting the valid rest. Every record of one ``ResourceSpans``/``ScopeSpans`` shares one
:class:`~otel_bridge.model.Resource` and one :class:`~otel_bridge.model.Scope` object.

Encoding groups records by resource and scope (equal values share one ``ResourceSpans`` /
``ScopeSpans``), keeping the records' order within each group. Both directions are pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue as PbAnyValue,
)
from opentelemetry.proto.common.v1.common_pb2 import (
    InstrumentationScope,
    KeyValue,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as PbLogRecord
from opentelemetry.proto.logs.v1.logs_pb2 import ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PbResource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

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
)

__all__ = [
    "Decoded",
    "Rejections",
    "any_value_from_pb",
    "any_value_to_pb",
    "attributes_from_pb",
    "decode_logs",
    "decode_traces",
    "encode_logs",
    "encode_traces",
    "fill_attributes",
    "group_by_resource_scope",
]

T = TypeVar("T")

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_SPAN_KINDS = {int(k): k for k in SpanKind}
_STATUS_CODES = {int(c): c for c in StatusCode}
_MAX_REJECT_DETAILS = 5
"""How many rejected records a partial-success message names before summarising."""


@dataclass(frozen=True, slots=True)
class Decoded(Generic[T]):
    """The result of decoding one request: the accepted records and what was rejected."""

    records: tuple[T, ...]
    rejected: int = 0
    """How many records were rejected (OTLP ``rejected_spans`` / ``rejected_log_records``)."""
    error_message: str = ""
    """Why, naming the first few rejected records by path; empty when nothing was rejected."""


# --------------------------------------------------------------------------------------------
# AnyValue and attributes
# --------------------------------------------------------------------------------------------


def any_value_from_pb(value: PbAnyValue) -> AnyValue:
    """The model value of a protobuf ``AnyValue`` (an unset value is ``None``)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return value.double_value
    if kind == "array_value":
        return tuple(any_value_from_pb(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return attributes_from_pb(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value
    return None


def attributes_from_pb(kvs: Iterable[KeyValue]) -> dict[str, AnyValue]:
    """Model attributes from repeated ``KeyValue`` (a repeated key keeps its last value)."""
    out: dict[str, AnyValue] = {}
    for kv in kvs:
        value = kv.value
        # Strings are by far the most common attribute type: test them first, without the
        # generic dispatch.
        if value.HasField("string_value"):
            out[kv.key] = value.string_value
        else:
            out[kv.key] = any_value_from_pb(value)
    return out


def any_value_to_pb(value: AnyValue, out: PbAnyValue) -> None:
    """Fill the protobuf ``AnyValue`` ``out`` from a model value (``None`` leaves it unset)."""
    if value is None:
        return
    if isinstance(value, str):
        out.string_value = value
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            out.int_value = value
        else:
            # OTLP integers are int64; a wider Python int is kept exactly as its decimal text.
            out.string_value = str(value)
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, bytes):
        out.bytes_value = value
    elif isinstance(value, tuple | list):
        array = out.array_value
        array.SetInParent()
        for item in value:
            any_value_to_pb(item, array.values.add())
    elif isinstance(value, Mapping):
        kvlist = out.kvlist_value
        kvlist.SetInParent()
        fill_attributes(kvlist.values, value)
    else:
        raise TypeError(f"not an OTLP AnyValue: {type(value).__name__}")


def fill_attributes(out: Any, attributes: Attributes) -> None:
    """Append ``attributes`` to a repeated ``KeyValue`` field ``out``."""
    for key, value in attributes.items():
        kv = out.add()
        kv.key = key
        any_value_to_pb(value, kv.value)


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


def _resource(pb: PbResource, schema_url: str) -> Resource:
    return Resource(
        attributes=attributes_from_pb(pb.attributes),
        dropped_attributes_count=pb.dropped_attributes_count,
        schema_url=schema_url,
    )


def _scope(pb: InstrumentationScope, schema_url: str) -> Scope:
    return Scope(
        name=pb.name,
        version=pb.version,
        attributes=attributes_from_pb(pb.attributes),
        dropped_attributes_count=pb.dropped_attributes_count,
        schema_url=schema_url,
    )


def _id_problem(value: bytes, size: int, *, optional: bool) -> str:
    """Why ``value`` is not a valid id of ``size`` bytes, or ``""``."""
    n = len(value)
    if n == size:
        if value == bytes(size) and not optional:
            return "must not be all zeros"
        return ""
    if n == 0 and optional:
        return ""
    return f"expected {size} bytes, got {n}"


class Rejections:
    """Collects the rejected records of one request: a count and the first few problems."""

    __slots__ = ("count", "details")

    def __init__(self) -> None:
        self.count = 0
        self.details: list[str] = []

    def add(self, problem: str) -> None:
        """Count one rejected record; ``problem`` is ``"path: what is wrong"``."""
        self.count += 1
        if len(self.details) < _MAX_REJECT_DETAILS:
            self.details.append(problem)

    def message(self, noun: str) -> str:
        """The partial-success ``error_message`` (empty when nothing was rejected)."""
        if not self.count:
            return ""
        more = self.count - len(self.details)
        tail = f"; and {more} more" if more > 0 else ""
        return f"rejected {self.count} invalid {noun}: " + "; ".join(self.details) + tail


def _span_problem(pb: PbSpan) -> str:
    problem = _id_problem(pb.trace_id, 16, optional=False)
    if problem:
        return "traceId: " + problem
    problem = _id_problem(pb.span_id, 8, optional=False)
    if problem:
        return "spanId: " + problem
    problem = _id_problem(pb.parent_span_id, 8, optional=True)
    if problem:
        return "parentSpanId: " + problem
    if pb.kind not in _SPAN_KINDS:
        return f"kind: unknown span kind {pb.kind}"
    if pb.status.code not in _STATUS_CODES:
        return f"status.code: unknown status code {pb.status.code}"
    for i, link in enumerate(pb.links):
        problem = _id_problem(link.trace_id, 16, optional=False)
        if problem:
            return f"links[{i}].traceId: {problem}"
        problem = _id_problem(link.span_id, 8, optional=False)
        if problem:
            return f"links[{i}].spanId: {problem}"
    return ""


def _span(pb: PbSpan, resource: Resource, scope: Scope) -> Span:
    status = pb.status
    return Span(
        resource=resource,
        scope=scope,
        trace_id=pb.trace_id,
        span_id=pb.span_id,
        parent_span_id=pb.parent_span_id,
        trace_state=pb.trace_state,
        flags=pb.flags,
        name=pb.name,
        kind=_SPAN_KINDS[pb.kind],
        start_time_unix_nano=pb.start_time_unix_nano,
        end_time_unix_nano=pb.end_time_unix_nano,
        attributes=attributes_from_pb(pb.attributes),
        dropped_attributes_count=pb.dropped_attributes_count,
        events=tuple(
            SpanEvent(
                time_unix_nano=e.time_unix_nano,
                name=e.name,
                attributes=attributes_from_pb(e.attributes),
                dropped_attributes_count=e.dropped_attributes_count,
            )
            for e in pb.events
        )
        if pb.events
        else (),
        dropped_events_count=pb.dropped_events_count,
        links=tuple(
            SpanLink(
                trace_id=link.trace_id,
                span_id=link.span_id,
                trace_state=link.trace_state,
                attributes=attributes_from_pb(link.attributes),
                dropped_attributes_count=link.dropped_attributes_count,
                flags=link.flags,
            )
            for link in pb.links
        )
        if pb.links
        else (),
        dropped_links_count=pb.dropped_links_count,
        status=Status(code=_STATUS_CODES[status.code], message=status.message)
        if status.code or status.message
        else _UNSET_STATUS,
    )


_UNSET_STATUS = Status()


def decode_traces(request: ExportTraceServiceRequest) -> Decoded[Span]:
    """The spans of ``request``; invalid spans are rejected and counted, the rest accepted."""
    spans: list[Span] = []
    rejects = Rejections()
    for ri, rs in enumerate(request.resource_spans):
        resource = _resource(rs.resource, rs.schema_url)
        for si, ss in enumerate(rs.scope_spans):
            scope = _scope(ss.scope, ss.schema_url)
            for pi, pb in enumerate(ss.spans):
                problem = _span_problem(pb)
                if problem:
                    rejects.add(f"resourceSpans[{ri}].scopeSpans[{si}].spans[{pi}].{problem}")
                    continue
                spans.append(_span(pb, resource, scope))
    return Decoded(tuple(spans), rejects.count, rejects.message("spans"))


def _log_problem(pb: PbLogRecord) -> str:
    problem = _id_problem(pb.trace_id, 16, optional=True)
    if problem:
        return "traceId: " + problem
    problem = _id_problem(pb.span_id, 8, optional=True)
    if problem:
        return "spanId: " + problem
    return ""


def decode_logs(request: ExportLogsServiceRequest) -> Decoded[LogRecord]:
    """The log records of ``request``; invalid ones are rejected and counted."""
    logs: list[LogRecord] = []
    rejects = Rejections()
    for ri, rl in enumerate(request.resource_logs):
        resource = _resource(rl.resource, rl.schema_url)
        for si, sl in enumerate(rl.scope_logs):
            scope = _scope(sl.scope, sl.schema_url)
            for pi, pb in enumerate(sl.log_records):
                problem = _log_problem(pb)
                if problem:
                    rejects.add(f"resourceLogs[{ri}].scopeLogs[{si}].logRecords[{pi}].{problem}")
                    continue
                logs.append(
                    LogRecord(
                        resource=resource,
                        scope=scope,
                        time_unix_nano=pb.time_unix_nano,
                        observed_time_unix_nano=pb.observed_time_unix_nano,
                        severity_number=pb.severity_number,
                        severity_text=pb.severity_text,
                        body=any_value_from_pb(pb.body) if pb.HasField("body") else None,
                        attributes=attributes_from_pb(pb.attributes),
                        dropped_attributes_count=pb.dropped_attributes_count,
                        flags=pb.flags,
                        trace_id=pb.trace_id,
                        span_id=pb.span_id,
                        event_name=pb.event_name,
                    )
                )
    return Decoded(tuple(logs), rejects.count, rejects.message("log records"))


# --------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------


R = TypeVar("R", Span, LogRecord)


def group_by_resource_scope(
    records: Sequence[R],
) -> list[tuple[Resource, list[tuple[Scope, list[R]]]]]:
    """``records`` grouped by equal resource, then equal scope, in first-seen order."""
    groups: list[tuple[Resource, list[tuple[Scope, list[R]]]]] = []
    last_resource: Resource | None = None
    last_scope: Scope | None = None
    last_list: list[R] = []
    for record in records:
        # Records of one batch usually share the very same objects: try identity first.
        if record.resource is last_resource and record.scope is last_scope:
            last_list.append(record)
            continue
        scopes = None
        for resource, scope_groups in groups:
            if resource is record.resource or resource == record.resource:
                scopes = scope_groups
                break
        if scopes is None:
            scopes = []
            groups.append((record.resource, scopes))
        target = None
        for scope, items in scopes:
            if scope is record.scope or scope == record.scope:
                target = items
                break
        if target is None:
            target = []
            scopes.append((record.scope, target))
        target.append(record)
        last_resource, last_scope, last_list = record.resource, record.scope, target
    return groups


def _fill_resource(out: PbResource, resource: Resource) -> None:
    fill_attributes(out.attributes, resource.attributes)
    out.dropped_attributes_count = resource.dropped_attributes_count


def _fill_scope(out: InstrumentationScope, scope: Scope) -> None:
    out.name = scope.name
    out.version = scope.version
    fill_attributes(out.attributes, scope.attributes)
    out.dropped_attributes_count = scope.dropped_attributes_count


def _fill_span(out: PbSpan, span: Span) -> None:
    out.trace_id = span.trace_id
    out.span_id = span.span_id
    out.parent_span_id = span.parent_span_id
    out.trace_state = span.trace_state
    out.flags = span.flags
    out.name = span.name
    out.kind = int(span.kind)  # type: ignore[assignment]
    out.start_time_unix_nano = span.start_time_unix_nano
    out.end_time_unix_nano = span.end_time_unix_nano
    fill_attributes(out.attributes, span.attributes)
    out.dropped_attributes_count = span.dropped_attributes_count
    for event in span.events:
        pe = out.events.add()
        pe.time_unix_nano = event.time_unix_nano
        pe.name = event.name
        fill_attributes(pe.attributes, event.attributes)
        pe.dropped_attributes_count = event.dropped_attributes_count
    out.dropped_events_count = span.dropped_events_count
    for link in span.links:
        pl = out.links.add()
        pl.trace_id = link.trace_id
        pl.span_id = link.span_id
        pl.trace_state = link.trace_state
        fill_attributes(pl.attributes, link.attributes)
        pl.dropped_attributes_count = link.dropped_attributes_count
        pl.flags = link.flags
    out.dropped_links_count = span.dropped_links_count
    if span.status.code or span.status.message:
        out.status.code = int(span.status.code)  # type: ignore[assignment]
        out.status.message = span.status.message


def encode_traces(spans: Sequence[Span]) -> ExportTraceServiceRequest:
    """An ``ExportTraceServiceRequest`` carrying ``spans``, grouped by resource and scope."""
    request = ExportTraceServiceRequest()
    for resource, scopes in group_by_resource_scope(spans):
        rs: ResourceSpans = request.resource_spans.add()
        _fill_resource(rs.resource, resource)
        rs.schema_url = resource.schema_url
        for scope, items in scopes:
            ss: ScopeSpans = rs.scope_spans.add()
            _fill_scope(ss.scope, scope)
            ss.schema_url = scope.schema_url
            for span in items:
                _fill_span(ss.spans.add(), span)
    return request


def _fill_log(out: PbLogRecord, log: LogRecord) -> None:
    out.time_unix_nano = log.time_unix_nano
    out.observed_time_unix_nano = log.observed_time_unix_nano
    out.severity_number = log.severity_number  # type: ignore[assignment]
    out.severity_text = log.severity_text
    if log.body is not None:
        any_value_to_pb(log.body, out.body)
    fill_attributes(out.attributes, log.attributes)
    out.dropped_attributes_count = log.dropped_attributes_count
    out.flags = log.flags
    out.trace_id = log.trace_id
    out.span_id = log.span_id
    out.event_name = log.event_name


def encode_logs(logs: Sequence[LogRecord]) -> ExportLogsServiceRequest:
    """An ``ExportLogsServiceRequest`` carrying ``logs``, grouped by resource and scope."""
    request = ExportLogsServiceRequest()
    for resource, scopes in group_by_resource_scope(logs):
        rl: ResourceLogs = request.resource_logs.add()
        _fill_resource(rl.resource, resource)
        rl.schema_url = resource.schema_url
        for scope, items in scopes:
            sl: ScopeLogs = rl.scope_logs.add()
            _fill_scope(sl.scope, scope)
            sl.schema_url = scope.schema_url
            for log in items:
                _fill_log(sl.log_records.add(), log)
    return request
