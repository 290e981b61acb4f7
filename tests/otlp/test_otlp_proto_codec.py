"""Tests of the protobuf codec: typed spans/logs <-> opentelemetry-proto messages."""

from __future__ import annotations

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from otlp_fixtures import RESOURCE, SCOPE, make_span

from otel_bridge.model import LogRecord, Resource, Scope, SpanEvent, SpanLink
from otel_bridge.otlp import proto_codec


def test_span_round_trip_keeps_every_field() -> None:
    """Encoding then decoding a span returns an equal span (ids, attributes, events, links)."""
    span = make_span(
        3,
        events=(SpanEvent(time_unix_nano=5, name="e", attributes={"x": 1}),),
        links=(SpanLink(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, trace_state="a=b", flags=1),),
        dropped_attributes_count=2,
        dropped_events_count=3,
        dropped_links_count=4,
        trace_state="k=v",
        flags=0x301,
    )
    wire = proto_codec.encode_traces([span]).SerializeToString()
    decoded = proto_codec.decode_traces(ExportTraceServiceRequest.FromString(wire))
    assert decoded.rejected == 0
    assert decoded.records == (span,)


def test_encode_groups_by_resource_and_scope() -> None:
    """Spans with equal resources and scopes share one ResourceSpans/ScopeSpans, in order."""
    other_scope = Scope(name="other")
    other_resource = Resource(attributes={"service.name": "b"})
    spans = [
        make_span(1),
        make_span(2, scope=other_scope),
        make_span(3, resource=other_resource),
        make_span(
            4,
            resource=Resource(attributes=dict(RESOURCE.attributes), schema_url="https://r"),
        ),
    ]
    request = proto_codec.encode_traces(spans)
    assert len(request.resource_spans) == 2
    first = request.resource_spans[0]
    assert [len(ss.spans) for ss in first.scope_spans] == [2, 1]
    assert [s.name for s in first.scope_spans[0].spans] == ["span-1", "span-4"]
    assert first.schema_url == "https://r"
    assert first.scope_spans[0].schema_url == "https://s"


def test_decoded_spans_share_resource_and_scope_objects() -> None:
    """All spans of one ScopeSpans point at the very same Resource and Scope objects."""
    request = proto_codec.encode_traces([make_span(1), make_span(2)])
    decoded = proto_codec.decode_traces(request)
    a, b = decoded.records
    assert a.resource is b.resource
    assert a.scope is b.scope


def test_invalid_spans_are_rejected_individually() -> None:
    """A bad trace id length rejects only that span, with a message naming its path."""
    request = proto_codec.encode_traces([make_span(1), make_span(2), make_span(3)])
    request.resource_spans[0].scope_spans[0].spans[1].trace_id = b"\x01" * 15
    decoded = proto_codec.decode_traces(request)
    assert [s.name for s in decoded.records] == ["span-1", "span-3"]
    assert decoded.rejected == 1
    assert (
        "resourceSpans[0].scopeSpans[0].spans[1].traceId: expected 16 bytes, got 15"
        in decoded.error_message
    )


def test_each_kind_of_invalid_span_is_named() -> None:
    """Zero ids, short span ids, bad parents, unknown kinds and bad links are all reported."""
    request = proto_codec.encode_traces([make_span(i) for i in range(1, 8)])
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].trace_id = bytes(16)
    spans[1].span_id = b"\x01" * 4
    spans[2].parent_span_id = b"\x01" * 3
    spans[3].kind = 9  # type: ignore[assignment]
    spans[4].status.code = 7  # type: ignore[assignment]
    link = spans[5].links.add()
    link.trace_id = b"\x01" * 16
    link.span_id = b"\x01"
    decoded = proto_codec.decode_traces(request)
    assert [s.name for s in decoded.records] == ["span-7"]
    assert decoded.rejected == 6
    message = decoded.error_message
    assert "spans[0].traceId: must not be all zeros" in message
    assert "spans[1].spanId: expected 8 bytes, got 4" in message
    assert "spans[2].parentSpanId: expected 8 bytes, got 3" in message
    assert "spans[3].kind: unknown span kind 9" in message
    assert "spans[4].status.code: unknown status code 7" in message
    assert "and 1 more" in message


def test_log_round_trip_keeps_every_field() -> None:
    """Encoding then decoding a log record returns an equal record, body and event name too."""
    log = LogRecord(
        resource=RESOURCE,
        scope=SCOPE,
        time_unix_nano=10,
        observed_time_unix_nano=11,
        severity_number=9,
        severity_text="INFO",
        body={"msg": "hi", "n": (1, 2.5)},
        attributes={"process.pid": 7, "file.path": "/tmp/x"},
        dropped_attributes_count=1,
        flags=1,
        trace_id=b"\x05" * 16,
        span_id=b"\x06" * 8,
        event_name="process.start",
    )
    no_body = LogRecord(resource=RESOURCE, scope=SCOPE, event_name="file.open")
    wire = proto_codec.encode_logs([log, no_body]).SerializeToString()
    decoded = proto_codec.decode_logs(ExportLogsServiceRequest.FromString(wire))
    assert decoded.records == (log, no_body)


def test_log_with_bad_trace_id_is_rejected() -> None:
    """A log record whose trace id is neither empty nor 16 bytes is rejected and named."""
    request = proto_codec.encode_logs([LogRecord(resource=RESOURCE, scope=SCOPE)] * 2)
    request.resource_logs[0].scope_logs[0].log_records[0].trace_id = b"\x01" * 4
    decoded = proto_codec.decode_logs(request)
    assert len(decoded.records) == 1
    assert decoded.rejected == 1
    assert "logRecords[0].traceId: expected 16 bytes, got 4" in decoded.error_message


def test_int_wider_than_int64_is_kept_as_text() -> None:
    """A Python int outside int64 cannot be an OTLP intValue: it is encoded as its decimal text."""
    request = proto_codec.encode_traces([make_span(1, attributes={"big": 2**70})])
    decoded = proto_codec.decode_traces(request)
    assert decoded.records[0].attributes == {"big": str(2**70)}


def test_empty_request_decodes_to_nothing() -> None:
    """An empty request carries no records and rejects nothing."""
    decoded = proto_codec.decode_traces(ExportTraceServiceRequest())
    assert decoded.records == ()
    assert decoded.rejected == 0
    assert decoded.error_message == ""
