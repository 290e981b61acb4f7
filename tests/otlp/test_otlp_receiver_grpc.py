"""The otlp receiver over gRPC, driven by the real OpenTelemetry SDK exporters and raw stubs."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from opentelemetry import trace
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource as SdkResource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from otlp_fixtures import RESOURCE, SCOPE, StartReceiver, make_span

from otel_bridge.errors import RefusedError
from otel_bridge.model import LogRecord, SpanKind
from otel_bridge.otlp import proto_codec
from otel_bridge.testing import RecordingConsumer


def trace_stub(target: str) -> tuple[grpc.Channel, trace_service_pb2_grpc.TraceServiceStub]:
    """A channel and TraceService stub for ``target``."""
    channel = grpc.insecure_channel(target)
    return channel, trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]


def test_sdk_grpc_span_exporter_delivers_spans(start_receiver: StartReceiver) -> None:
    """Spans from the SDK's OTLP/gRPC exporter arrive with their ids, names and attributes."""
    running = start_receiver(http=False)
    provider = TracerProvider(resource=SdkResource.create({"service.name": "agent"}))
    exporter = OTLPSpanExporter(endpoint=running.grpc_target, insecure=True)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test.scope", "2.0")
    with (
        tracer.start_as_current_span("parent", kind=trace.SpanKind.SERVER) as parent,
        tracer.start_as_current_span("child", attributes={"n": 3, "tags": ["a", "b"]}) as child,
    ):
        pass
    provider.shutdown()
    spans = {s.name: s for s in running.sink.spans}
    assert set(spans) == {"parent", "child"}
    got = spans["child"]
    assert got.trace_id == child.get_span_context().trace_id.to_bytes(16, "big")
    assert got.span_id == child.get_span_context().span_id.to_bytes(8, "big")
    assert got.parent_span_id == parent.get_span_context().span_id.to_bytes(8, "big")
    assert got.attributes == {"n": 3, "tags": ("a", "b")}
    assert spans["parent"].kind is SpanKind.SERVER
    assert got.resource.attributes["service.name"] == "agent"
    assert (got.scope.name, got.scope.version) == ("test.scope", "2.0")
    assert running.counter("spans_accepted") == 2


def test_sdk_grpc_log_exporter_delivers_log_records(start_receiver: StartReceiver) -> None:
    """Log records from the SDK's OTLP/gRPC log exporter arrive with body and attributes."""
    running = start_receiver(http=False)
    provider = LoggerProvider(resource=SdkResource.create({"service.name": "host"}))
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=running.grpc_target, insecure=True))
    )
    logger = provider.get_logger("os.events")
    logger.emit(
        timestamp=123,
        body="started",
        severity_number=SeverityNumber.INFO,
        attributes={"process.pid": 77},
        event_name="process.start",
    )
    provider.shutdown()
    (log,) = running.sink.logs
    assert log.body == "started"
    assert log.attributes == {"process.pid": 77}
    assert log.event_name == "process.start"
    assert log.time_unix_nano == 123
    assert running.counter("log_records_accepted") == 1


def test_partial_success_rejects_only_invalid_spans(start_receiver: StartReceiver) -> None:
    """A span with a 15-byte trace id is rejected in partial_success; the others are accepted."""
    running = start_receiver(http=False)
    request = proto_codec.encode_traces([make_span(1), make_span(2), make_span(3)])
    request.resource_spans[0].scope_spans[0].spans[1].trace_id = b"\x01" * 15
    channel, stub = trace_stub(running.grpc_target)
    with channel:
        response = stub.Export(request, timeout=5)
    assert response.partial_success.rejected_spans == 1
    assert "spans[1].traceId: expected 16 bytes, got 15" in response.partial_success.error_message
    assert [s.name for s in running.sink.spans] == ["span-1", "span-3"]
    assert running.counter("spans_rejected") == 1
    assert running.counter("spans_accepted") == 2


def test_full_success_leaves_partial_success_unset(start_receiver: StartReceiver) -> None:
    """A fully accepted request answers without a partial_success field."""
    running = start_receiver(http=False)
    channel, stub = trace_stub(running.grpc_target)
    with channel:
        response = stub.Export(proto_codec.encode_traces([make_span(1)]), timeout=5)
    assert not response.HasField("partial_success")


def test_malformed_message_is_invalid_argument(start_receiver: StartReceiver) -> None:
    """Bytes that are not an ExportTraceServiceRequest get INVALID_ARGUMENT with a reason."""
    running = start_receiver(http=False)
    with grpc.insecure_channel(running.grpc_target) as channel:
        call = channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export", None, None
        )
        with pytest.raises(grpc.RpcError) as info:
            call(b"\x0a\xff\xff\xff", timeout=5)
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot decode ExportTraceServiceRequest" in (info.value.details() or "")
    assert running.counter("requests_malformed") == 1


def test_oversized_message_is_resource_exhausted(start_receiver: StartReceiver) -> None:
    """A request over max_recv_msg_size_mib is refused with RESOURCE_EXHAUSTED."""
    running = start_receiver(http=False, max_recv_msg_size_mib=1)
    big = make_span(1, attributes={"blob": "x" * (1024 * 1024 + 10)})
    channel, stub = trace_stub(running.grpc_target)
    with channel, pytest.raises(grpc.RpcError) as info:
        stub.Export(proto_codec.encode_traces([big]), timeout=5)
    assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert running.sink.spans == []


def test_refusal_downstream_is_resource_exhausted_with_retry_info(
    start_receiver: StartReceiver,
) -> None:
    """When the next consumer refuses, the client gets RESOURCE_EXHAUSTED with a RetryInfo delay
    (the OTLP throttling answer: retryable only because RetryInfo is there)."""
    sink = RecordingConsumer(error=RefusedError("memory limit exceeded"))
    running = start_receiver(http=False, sink=sink, retry_after=2.5)
    channel, stub = trace_stub(running.grpc_target)
    with channel, pytest.raises(grpc.RpcError) as info:
        stub.Export(proto_codec.encode_traces([make_span(1)]), timeout=5)
    err = info.value
    assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "memory limit exceeded" in (err.details() or "")
    trailers: dict[str, Any] = dict(err.trailing_metadata() or ())  # type: ignore[arg-type]
    retry = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.seconds == 2
    assert retry.retry_delay.nanos == 500_000_000
    rich = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert rich.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert rich.details[0].type_url.endswith("google.rpc.RetryInfo")
    assert running.counter("spans_refused") == 1
    assert running.counter("spans_accepted") == 0


def test_logs_service_partial_success(start_receiver: StartReceiver) -> None:
    """LogsService reports rejected_log_records for a record with a bad span id."""
    running = start_receiver(http=False)
    request = proto_codec.encode_logs([LogRecord(resource=RESOURCE, scope=SCOPE, body="ok")] * 2)
    request.resource_logs[0].scope_logs[0].log_records[1].span_id = b"\x01\x02"
    with grpc.insecure_channel(running.grpc_target) as channel:
        stub = logs_service_pb2_grpc.LogsServiceStub(channel)  # type: ignore[no-untyped-call]
        response = stub.Export(request, timeout=5)
    assert isinstance(response, logs_service_pb2.ExportLogsServiceResponse)
    assert response.partial_success.rejected_log_records == 1
    assert len(running.sink.logs) == 1


def test_empty_request_is_success(start_receiver: StartReceiver) -> None:
    """An empty request is answered with success and nothing is passed on."""
    running = start_receiver(http=False)
    channel, stub = trace_stub(running.grpc_target)
    with channel:
        stub.Export(trace_service_pb2.ExportTraceServiceRequest(), timeout=5)
    assert running.sink.batches == []
