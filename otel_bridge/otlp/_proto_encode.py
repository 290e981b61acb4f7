"""Encoding half of :mod:`otel_bridge.otlp.proto_codec`: typed records -> protobuf requests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue as PbAnyValue
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as PbLogRecord
from opentelemetry.proto.logs.v1.logs_pb2 import ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource as PbResource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from otel_bridge.model import AnyValue, Attributes, LogRecord, Resource, Scope, Span
from otel_bridge.otlp.records import group_by_resource_scope

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


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
