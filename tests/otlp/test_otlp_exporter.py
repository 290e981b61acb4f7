"""The otlp (gRPC) / otlphttp exporters against our receiver and small scripted test servers."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import msgspec
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from otlp_fixtures import RESOURCE, SCOPE, StartReceiver, make_span

from otel_bridge.component import CreateSettings, Host
from otel_bridge.errors import ComponentError, RefusedError
from otel_bridge.exporters.otlp import OtlpExporter, grpc_factory, http_factory
from otel_bridge.exporters.otlp.config import (
    GrpcExporterConfig,
    HttpExporterConfig,
    QueueConfig,
    RetryConfig,
)
from otel_bridge.exporters.otlp.sender import Backoff
from otel_bridge.exporters.otlp.transport import parse_retry_after
from otel_bridge.model import (
    Batch,
    Channel,
    Entity,
    EntityKind,
    LogRecord,
    Observation,
    Source,
    Span,
    SpanEvent,
    SpanLink,
)
from otel_bridge.testing import RecordingConsumer

FAST_RETRY = RetryConfig(initial_interval=0.05, max_interval=0.2, max_elapsed_time=10)


def start_exporter(factory: Any, config: Any, name: str) -> tuple[OtlpExporter, Host]:
    """Create and start an exporter; the caller shuts it down."""
    exporter = factory.create(CreateSettings(id=name), config, None)
    assert isinstance(exporter, OtlpExporter)
    host = Host()
    exporter.start(host)
    return exporter, host


def rich_spans() -> list[Any]:
    """Spans with events, links and every attribute type, over two scopes."""
    return [
        make_span(
            1,
            events=(SpanEvent(time_unix_nano=3, name="ev", attributes={"a": 1}),),
            links=(SpanLink(trace_id=b"\x07" * 16, span_id=b"\x08" * 8, attributes={"l": "x"}),),
        ),
        make_span(2),
        make_span(3, scope=SCOPE.__class__(name="other")),
    ]


@pytest.mark.parametrize(
    ("factory", "encoding", "compression"),
    [
        (grpc_factory, "proto", "gzip"),
        (grpc_factory, "proto", "none"),
        (http_factory, "proto", "gzip"),
        (http_factory, "json", "none"),
    ],
)
def test_round_trip_through_our_receiver_keeps_ids_and_attributes(
    start_receiver: StartReceiver, factory: Any, encoding: Any, compression: Any
) -> None:
    """Spans and logs exported to our receiver come back identical (ids, attributes, all)."""
    running = start_receiver()
    if factory is grpc_factory:
        config: Any = GrpcExporterConfig(endpoint=running.grpc_target, compression=compression)
    else:
        config = HttpExporterConfig(
            endpoint=running.http_url, encoding=encoding, compression=compression
        )
    exporter, host = start_exporter(factory, config, factory.type_name)
    spans = rich_spans()
    log = LogRecord(
        resource=RESOURCE,
        scope=SCOPE,
        body={"k": (1, "two")},
        attributes={"process.pid": 5},
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        event_name="process.start",
    )
    observation = Observation(
        id="o#1",
        time_unix_nano=1,
        source=Source(channel=Channel.OS, backend="linux", record_id="r"),
        subject=Entity(kind=EntityKind.PROCESS, id="process:x"),
    )
    exporter.consume(Batch(spans=tuple(spans), logs=(log,), observations=(observation,)))
    assert running.sink.wait_for(4, timeout=5)
    exporter.shutdown()
    received = sorted(running.sink.spans, key=lambda s: s.name)
    # The receiver adds what it observed, the transport peer, beside what was sent.
    grpc = factory is grpc_factory
    protocol = "grpc" if grpc else f"http/{'json' if encoding == 'json' else 'protobuf'}"
    port = running.receiver.grpc_port if grpc else running.receiver.http_port
    resources = [r.resource for r in received] + [r.resource for r in running.sink.logs]
    for resource in resources:
        peer = resource.peer
        assert peer is not None
        assert (peer.protocol, peer.address, peer.local_port) == (protocol, "127.0.0.1", port)
        assert peer.port > 0
    assert [_sent(s) for s in received] == spans
    assert [_sent(r) for r in running.sink.logs] == [log]
    counters = host.telemetry.counters()
    assert counters[f"exporter.{factory.type_name}.sent_spans"] == 3
    assert counters[f"exporter.{factory.type_name}.sent_log_records"] == 1


class Scripted(BaseHTTPRequestHandler):
    """Answers POSTs from a script of (status, headers) and records arrival times."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        """Answer with the next scripted status."""
        server: Any = self.server
        self.rfile.read(int(self.headers["Content-Length"]))
        server.arrivals.append(time.monotonic())
        status, headers, body = server.script.pop(0) if server.script else (200, {}, b"")
        self.send_response(status)
        for key, value in {"Content-Type": "application/x-protobuf", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def scripted() -> Iterator[Any]:
    """A scripted HTTP server on a free port."""
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    server.script = []
    server.arrivals = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def test_http_503_with_retry_after_is_retried_after_that_delay(scripted: Any) -> None:
    """A 503 with Retry-After: 1 is retried about one second later (not the 50 ms backoff)."""
    scripted.script = [(503, {"Retry-After": "1"}, b""), (200, {}, b"")]
    config = HttpExporterConfig(
        endpoint=f"http://127.0.0.1:{scripted.server_address[1]}", retry_on_failure=FAST_RETRY
    )
    exporter, host = start_exporter(http_factory, config, "otlp_http")
    exporter.consume(Batch(spans=(make_span(1),)))
    exporter.shutdown()
    first, second = scripted.arrivals
    assert 0.9 <= second - first < 3
    assert host.telemetry.counters()["exporter.otlp_http.sent_spans"] == 1


@pytest.mark.parametrize("status", [429, 502, 504])
def test_other_retryable_statuses_use_backoff(scripted: Any, status: int) -> None:
    """429, 502 and 504 without Retry-After are retried with the (fast) backoff."""
    scripted.script = [(status, {}, b""), (200, {}, b"")]
    config = HttpExporterConfig(
        endpoint=f"http://127.0.0.1:{scripted.server_address[1]}", retry_on_failure=FAST_RETRY
    )
    exporter, host = start_exporter(http_factory, config, "otlp_http")
    exporter.consume(Batch(spans=(make_span(1),)))
    exporter.shutdown()
    assert len(scripted.arrivals) == 2
    assert host.telemetry.counters()["exporter.otlp_http.sent_spans"] == 1


def test_http_400_is_not_retried(scripted: Any) -> None:
    """A 400 is permanent: one attempt, counted as failed."""
    scripted.script = [(400, {}, b"")]
    config = HttpExporterConfig(
        endpoint=f"http://127.0.0.1:{scripted.server_address[1]}", retry_on_failure=FAST_RETRY
    )
    exporter, host = start_exporter(http_factory, config, "otlp_http")
    exporter.consume(Batch(spans=(make_span(1), make_span(2))))
    exporter.shutdown()
    assert len(scripted.arrivals) == 1
    assert host.telemetry.counters()["exporter.otlp_http.failed_spans"] == 2


def test_partial_success_answer_is_counted_not_retried(scripted: Any) -> None:
    """A 200 with partial_success counts the rejected spans and does not retry."""
    response = ExportTraceServiceResponse()
    response.partial_success.rejected_spans = 1
    response.partial_success.error_message = "one was bad"
    scripted.script = [(200, {}, response.SerializeToString())]
    config = HttpExporterConfig(endpoint=f"http://127.0.0.1:{scripted.server_address[1]}")
    exporter, host = start_exporter(http_factory, config, "otlp_http")
    exporter.consume(Batch(spans=(make_span(1), make_span(2))))
    exporter.shutdown()
    counters = host.telemetry.counters()
    assert counters["exporter.otlp_http.rejected_spans"] == 1
    assert counters["exporter.otlp_http.sent_spans"] == 1
    assert len(scripted.arrivals) == 1


def test_grpc_unavailable_with_retry_info_is_retried(start_receiver: StartReceiver) -> None:
    """A refusal (UNAVAILABLE + RetryInfo 0.4 s) makes the exporter wait that long and retry."""

    class FlakyConsumer(RecordingConsumer):
        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []

        def consume(self, batch: Batch) -> None:
            self.times.append(time.monotonic())
            if len(self.times) == 1:
                raise RefusedError("memory limiter: over the limit")
            super().consume(batch)

    sink = FlakyConsumer()
    running = start_receiver(http=False, sink=sink, retry_after=0.4)
    config = GrpcExporterConfig(endpoint=running.grpc_target, retry_on_failure=FAST_RETRY)
    exporter, host = start_exporter(grpc_factory, config, "otlp_grpc")
    exporter.consume(Batch(spans=(make_span(1),)))
    assert sink.wait_for(1, timeout=5)
    exporter.shutdown()
    assert sink.times[1] - sink.times[0] >= 0.35
    assert host.telemetry.counters()["exporter.otlp_grpc.sent_spans"] == 1
    assert running.counter("spans_refused") == 1
    assert running.counter("spans_accepted") == 1


def test_dead_endpoint_with_small_queue_counts_drops(unused_port: int) -> None:
    """With nobody listening and a queue of 2, extra batches are dropped and counted, and the
    shutdown deadline drops (and counts) what is still queued."""
    config = HttpExporterConfig(
        endpoint=f"http://127.0.0.1:{unused_port}",
        retry_on_failure=RetryConfig(initial_interval=10, max_interval=10),
        sending_queue=QueueConfig(queue_size=2, num_consumers=1),
        shutdown_timeout=0.2,
    )
    exporter, host = start_exporter(http_factory, config, "otlp_http")
    for i in range(10):
        exporter.consume(Batch(spans=(make_span(i + 1),)))
    started = time.monotonic()
    exporter.shutdown()
    assert time.monotonic() - started < 3
    counters = host.telemetry.counters()
    dropped = counters.get("exporter.otlp_http.dropped_spans", 0)
    failed = counters.get("exporter.otlp_http.failed_spans", 0)
    assert dropped >= 7
    assert dropped + failed == 10
    assert "exporter.otlp_http.sent_spans" not in counters


def test_consume_after_shutdown_drops_and_counts(start_receiver: StartReceiver) -> None:
    """A batch arriving after shutdown is counted as dropped, not lost silently."""
    running = start_receiver(grpc=False)
    exporter, host = start_exporter(
        http_factory, HttpExporterConfig(endpoint=running.http_url), "otlp_http"
    )
    exporter.shutdown()
    exporter.shutdown()
    exporter.consume(Batch(logs=(LogRecord(resource=RESOURCE, scope=SCOPE),)))
    assert host.telemetry.counters()["exporter.otlp_http.dropped_log_records"] == 1


def test_without_queue_a_failed_send_raises(unused_port: int) -> None:
    """With the sending queue off, consume sends synchronously and raises when it cannot."""
    config = GrpcExporterConfig(
        endpoint=f"127.0.0.1:{unused_port}",
        timeout=0.5,
        retry_on_failure=RetryConfig(enabled=False),
        sending_queue=QueueConfig(enabled=False),
    )
    exporter, host = start_exporter(grpc_factory, config, "otlp_grpc")
    with pytest.raises(ComponentError, match="UNAVAILABLE"):
        exporter.consume(Batch(spans=(make_span(1),)))
    exporter.shutdown()
    assert host.telemetry.counters()["exporter.otlp_grpc.failed_spans"] == 1


def test_shutdown_before_start_is_safe() -> None:
    """Both exporters shut down cleanly without having started."""
    exporters = [
        grpc_factory.create(CreateSettings(id="g"), grpc_factory.default_config(), None),
        http_factory.create(CreateSettings(id="h"), http_factory.default_config(), None),
    ]
    for exporter in exporters:
        exporter.shutdown()
        exporter.shutdown()


def test_backoff_grows_with_jitter_up_to_the_cap() -> None:
    """Backoff delays stay within ±randomization of an interval growing by the multiplier."""
    config = RetryConfig(initial_interval=1, max_interval=4, multiplier=2, randomization_factor=0.5)
    backoff = Backoff(config, random.Random(7))
    delays = [backoff.next_delay() for _ in range(6)]
    for delay, interval in zip(delays, [1, 2, 4, 4, 4, 4], strict=True):
        assert interval * 0.5 <= delay <= interval * 1.5
    assert len(set(delays)) == len(delays)


def test_retry_after_parses_seconds_and_http_dates() -> None:
    """Retry-After accepts delta seconds and HTTP dates; garbage is ignored."""
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_config_validation_names_the_keys() -> None:
    """Bad endpoints, timeouts, retry and queue settings are reported with their key paths."""
    bad_http = HttpExporterConfig(
        endpoint="ftp://x",
        traces_endpoint="nope",
        timeout=0,
        retry_on_failure=RetryConfig(initial_interval=0, max_interval=-1),
        sending_queue=QueueConfig(queue_size=0, num_consumers=0),
    )
    problems = bad_http.validate()
    for key in (
        "endpoint:",
        "traces_endpoint:",
        "timeout:",
        "retry_on_failure.initial_interval:",
        "retry_on_failure.max_interval:",
        "sending_queue.queue_size:",
        "sending_queue.num_consumers:",
    ):
        assert any(p.startswith(key) for p in problems), key
    assert GrpcExporterConfig(endpoint="localhost").validate() == [
        "endpoint: 'localhost' is not host:port"
    ]
    assert GrpcExporterConfig(endpoint="https://collector:4317").validate() == []
    assert HttpExporterConfig(logs_endpoint="http://h:1/custom").url("logs") == "http://h:1/custom"


_R = TypeVar("_R", Span, LogRecord)


def _sent(record: _R) -> _R:
    """``record`` as its sender sent it: without the transport peer the receiver added."""
    return msgspec.structs.replace(
        record, resource=msgspec.structs.replace(record.resource, peer=None)
    )
