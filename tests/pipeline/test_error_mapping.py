"""What a client is answered when the pipeline behind the OTLP receiver raises.

Only a refusal (:class:`RefusedError`: memory limit, queue full) is retryable: HTTP 429 with
Retry-After, gRPC RESOURCE_EXHAUSTED with RetryInfo. Anything else raised downstream, a permanent
error or a processor's ``ValueError`` on a poison batch, is permanent: HTTP 400, gRPC
INVALID_ARGUMENT, with a message saying what was wrong, counted as rejected, and the OpenTelemetry
SDK's exporters do not send it again. The collectors here are real (receiver -> failing
processor -> exporter).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_bridge.commands.observe_report import otlp_summary
from otel_bridge.component import RECEIVER, Endpoint
from otel_bridge.config import parse_config
from otel_bridge.otlp import json_codec, proto_codec
from otel_bridge.pipeline import Collector
from otel_bridge.receivers import otlp as otlp_receiver
from otel_bridge.testing import (
    FailingProcessor,
    double_registry,
    failing_processor_factory,
    make_span,
)


def collector_with(error: str) -> Collector:
    """OTLP (gRPC and HTTP on port 0) -> ``failing`` processor raising ``error`` -> recording."""
    doc: dict[str, Any] = {
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": "127.0.0.1:0"},
                    "http": {"endpoint": "127.0.0.1:0"},
                },
                "retry_after": 2,
            }
        },
        "processors": {"failing": {"error": error}},
        "exporters": {"recording": None},
        "service": {
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["failing"],
                    "exporters": ["recording"],
                }
            }
        },
    }
    registry = double_registry(otlp_receiver.factory, failing_processor_factory())
    return Collector(parse_config(doc, env={}, registry=registry))


@pytest.fixture
def running() -> Iterator[Any]:
    """A factory of started collectors, shut down after the test."""
    started: list[Collector] = []

    def start(error: str) -> Collector:
        collector = collector_with(error)
        collector.start()
        started.append(collector)
        return collector

    yield start
    for collector in started:
        collector.shutdown()


def endpoint(collector: Collector, protocol: str) -> Endpoint:
    """The bound endpoint of the receiver, read through the status protocol."""
    found = collector.status("otlp").endpoint(protocol)
    assert found is not None
    return found


def processor(collector: Collector) -> FailingProcessor:
    """The failing processor instance of the ``traces`` pipeline."""
    [proc] = collector.processors("traces")
    assert isinstance(proc, FailingProcessor)
    return proc


def sdk_spans(n: int) -> tuple[ReadableSpan, ...]:
    """``n`` finished spans made by the OpenTelemetry SDK."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("poison")
    for i in range(n):
        with tracer.start_as_current_span(f"step-{i}"):
            pass
    provider.shutdown()
    return memory.get_finished_spans()


def counter(collector: Collector, name: str) -> int:
    """Counter ``name`` of the ``otlp`` receiver."""
    return collector.host.telemetry.value(name, kind=RECEIVER, id="otlp")


def post_json(collector: Collector) -> tuple[int, dict[str, str], dict[str, Any]]:
    """POST one span as OTLP/JSON with urllib; status, headers and the decoded body."""
    body = json.dumps(json_codec.encode_traces([make_span(1)])).encode()
    request = urllib.request.Request(
        f"{endpoint(collector, 'http').url}/v1/traces",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def grpc_export(collector: Collector) -> grpc.RpcError:
    """Export one span with a raw gRPC stub; the error it raises."""
    target = f"127.0.0.1:{endpoint(collector, 'grpc').port}"
    with grpc.insecure_channel(target) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as info:
            stub.Export(proto_codec.encode_traces([make_span(1)]), timeout=5)
    return info.value


@pytest.mark.parametrize("error", ["value", "permanent"])
def test_poison_batch_is_a_400_over_http_and_the_server_keeps_serving(
    running: Any, error: str
) -> None:
    """A processor raising on a batch: 400 with the reason, no Retry-After, counted rejected."""
    collector = running(error)
    first = post_json(collector)
    second = post_json(collector)
    for status, headers, body in (first, second):
        assert status == 400
        assert "Retry-After" not in headers
        assert body["code"] == 3  # INVALID_ARGUMENT
        assert "poison batch of 1 records" in body["message"]
    assert "ValueError" in first[2]["message"] or error == "permanent"
    assert counter(collector, "spans_rejected") == 2
    assert counter(collector, "spans_refused") == 0
    assert collector.host.telemetry.value("rejected", kind=RECEIVER, id="otlp") == 2


def test_sdk_http_exporter_does_not_retry_a_poison_batch(running: Any) -> None:
    """The SDK's OTLP/HTTP exporter gets 400, fails the export at once and sends it once."""
    collector = running("value")
    spans = sdk_spans(3)
    exporter = HttpSpanExporter(endpoint=f"{endpoint(collector, 'http').url}/v1/traces")
    began = time.monotonic()
    result = exporter.export(spans)
    elapsed = time.monotonic() - began
    exporter.shutdown()  # type: ignore[no-untyped-call]
    assert result is SpanExportResult.FAILURE
    assert processor(collector).calls == 1
    assert counter(collector, "spans_rejected") == 3
    assert elapsed < 1.0  # no backoff: the SDK's first retry would wait about a second


def test_poison_batch_is_invalid_argument_over_grpc(running: Any) -> None:
    """A raw gRPC client gets INVALID_ARGUMENT naming the error; the SDK does not retry it."""
    collector = running("value")
    err = grpc_export(collector)
    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "ValueError" in (err.details() or "")
    assert "poison batch" in (err.details() or "")
    exporter = GrpcSpanExporter(
        endpoint=f"127.0.0.1:{endpoint(collector, 'grpc').port}", insecure=True
    )
    began = time.monotonic()
    result = exporter.export(sdk_spans(2))
    elapsed = time.monotonic() - began
    exporter.shutdown()
    assert result is SpanExportResult.FAILURE
    assert processor(collector).calls == 2  # one raw call, one SDK call: no retry
    assert counter(collector, "spans_rejected") == 3
    assert elapsed < 1.0


def test_refusal_is_still_retryable_429_and_resource_exhausted(running: Any) -> None:
    """A RefusedError downstream: HTTP 429 with Retry-After, gRPC RESOURCE_EXHAUSTED with
    RetryInfo (the OTLP throttling answers)."""
    collector = running("refused")
    status, headers, body = post_json(collector)
    assert status == 429
    assert headers["Retry-After"] == "2"
    assert body["code"] == 8  # RESOURCE_EXHAUSTED
    err = grpc_export(collector)
    assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers: dict[str, Any] = dict(err.trailing_metadata() or ())  # type: ignore[arg-type]
    assert "google.rpc.retryinfo-bin" in trailers
    assert counter(collector, "spans_refused") == 2
    assert counter(collector, "spans_rejected") == 0
    assert collector.host.telemetry.value("refused", kind=RECEIVER, id="otlp") == 2


def test_observe_summary_says_why_spans_were_refused(running: Any) -> None:
    """The summary's warning gives the refusal's own reason (here the pipeline's error), never
    a cause it did not see (it said "over its memory limit" for every refusal)."""
    collector = running("refused")
    status, _, _ = post_json(collector)
    assert status == 429
    summary = otlp_summary(collector.host.telemetry, None, recorded=0)
    assert summary["spans_refused"] == 1
    (warning,) = [w for w in summary["warnings"] if "refused for now" in w]
    assert "the pipeline could not take them" in warning
    assert "poison batch of 1 records" in warning  # the processor's own message
    assert "memory limit" not in warning


def test_observe_summary_says_a_batch_the_pipeline_rejected_was_lost_whole(running: Any) -> None:
    """A batch the pipeline rejected loses every span in it: the summary's warning gives the
    pipeline's reason and does not say the rest of the request was kept (it did)."""
    collector = running("value")
    status, _, _ = post_json(collector)
    assert status == 400
    summary = otlp_summary(collector.host.telemetry, None, recorded=0)
    assert summary["spans_rejected"] == 1
    (warning,) = [w for w in summary["warnings"] if "rejected for good" in w]
    assert "the pipeline rejected them" in warning
    assert "poison batch of 1 records" in warning
    assert "kept" not in warning


def test_spans_delivered_while_the_receiver_closes_are_refused_and_said(running: Any) -> None:
    """A request its server thread delivers after the receiver's shutdown began (accepted
    before the servers stopped) is refused for now, and the summary says it came during the
    shutdown."""
    collector = running("none")
    receiver = collector.component("otlp")
    assert isinstance(receiver, otlp_receiver.OtlpReceiver)
    receiver.shutdown()
    outcome = receiver.deliver_spans(
        json_codec.decode_traces(json_codec.encode_traces([make_span(1)]))
    )
    assert outcome.refused
    summary = otlp_summary(collector.host.telemetry, None, recorded=0)
    (warning,) = [w for w in summary["warnings"] if "refused for now" in w]
    assert "shutting down" in warning
