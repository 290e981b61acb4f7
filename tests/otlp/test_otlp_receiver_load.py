"""The OTLP receivers under load: throttling answers SDK exporters retry, a listen backlog that
takes a burst of clients, and read/idle timeouts that release stalled connections."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from otlp_fixtures import Running
from waiting import wait_until

from otel_bridge.errors import RefusedError
from otel_bridge.model import Batch
from otel_bridge.receivers.otlp.config import GrpcConfig, HttpConfig, OtlpReceiverConfig, Protocols
from otel_bridge.receivers.otlp.http_server import LISTEN_BACKLOG
from otel_bridge.testing import RecordingConsumer

StartConfig = Callable[..., Running]


class RefusesFirst(RecordingConsumer):
    """Refuses the first ``n`` batches (as an over-limit memory limiter would), then records."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.refusals = n

    def consume(self, batch: Batch) -> None:
        """Refuse while refusals remain, else record."""
        if self.refusals > 0:
            self.refusals -= 1
            raise RefusedError("over the memory limit")
        super().consume(batch)


def _http(**kw: float) -> OtlpReceiverConfig:
    return OtlpReceiverConfig(
        protocols=Protocols(http=HttpConfig(endpoint="127.0.0.1:0", **kw)),  # type: ignore[arg-type]
        retry_after=0.2,
    )


def _sdk_send(exporter: object) -> bool:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    assert isinstance(exporter, SpanExporter)
    target = exporter
    results: list[SpanExportResult] = []

    class Recording(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            results.append(target.export(spans))
            return results[-1]

    provider = TracerProvider(resource=Resource.create({"service.name": "load"}))
    provider.add_span_processor(SimpleSpanProcessor(Recording()))
    with provider.get_tracer("load").start_as_current_span("throttled"):
        pass
    provider.shutdown()
    return results == [SpanExportResult.SUCCESS]


def test_sdk_http_exporter_retries_a_429_and_delivers(start_config: StartConfig) -> None:
    """The OTel SDK's OTLP/HTTP exporter retries our 429 + Retry-After and delivers once."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    running = start_config(_http(), RefusesFirst(2))
    exporter = OTLPSpanExporter(endpoint=f"{running.http_url}/v1/traces", timeout=10)
    assert _sdk_send(exporter)
    assert [s.name for s in running.sink.spans] == ["throttled"]
    assert running.counter("spans_refused") == 2


def test_sdk_grpc_exporter_retries_resource_exhausted_and_delivers(
    start_config: StartConfig,
) -> None:
    """The OTel SDK's OTLP/gRPC exporter retries RESOURCE_EXHAUSTED + RetryInfo and delivers."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the gRPC exporter")
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    config = OtlpReceiverConfig(
        protocols=Protocols(grpc=GrpcConfig(endpoint="127.0.0.1:0")), retry_after=0.2
    )
    running = start_config(config, RefusesFirst(2))
    exporter = OTLPSpanExporter(endpoint=running.grpc_target, insecure=True, timeout=10)
    assert _sdk_send(exporter)
    assert [s.name for s in running.sink.spans] == ["throttled"]
    assert running.counter("spans_refused") == 2


def _post(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/traces", b"{}", {"Content-Type": "application/json"})
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_burst_of_clients_is_queued_not_reset(start_config: StartConfig) -> None:
    """128 clients connecting at once all get an answer (the backlog was 5: resets)."""
    running = start_config(_http())
    port = running.receiver.http_port
    assert port is not None
    assert LISTEN_BACKLOG >= 1024
    with ThreadPoolExecutor(128) as pool:
        statuses = list(pool.map(lambda _: _post(port), range(128)))
    assert statuses == [200] * 128


def _stall(port: int) -> socket.socket:
    """A connection that sends headers announcing 1000 bytes and then only 10 of them."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"resource'
    )
    return sock


def _answer(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def test_stalled_uploads_get_408_and_release_their_threads(start_config: StartConfig) -> None:
    """50 uploads that stall mid-body are answered 408 after read_timeout and closed; the
    handler threads they held end, and the server still serves."""
    running = start_config(_http(read_timeout=0.5))
    port = running.receiver.http_port
    assert port is not None
    baseline = threading.active_count()
    socks = [_stall(port) for _ in range(50)]
    try:
        answers = [_answer(s) for s in socks]
    finally:
        for s in socks:
            s.close()
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers[0]
    assert b"did not arrive within 0.5 s" in answers[0]
    assert running.counter("requests_timed_out") == 50
    wait_until(lambda: threading.active_count() <= baseline, 10, "the handler threads to end")
    assert _post(port) == 200


def test_idle_keep_alive_connection_is_closed(start_config: StartConfig) -> None:
    """A kept-alive connection with no next request is closed after idle_timeout."""
    running = start_config(_http(idle_timeout=0.3))
    port = running.receiver.http_port
    assert port is not None
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        assert _answer(sock) == b""  # closed by the server without a word


def test_timeouts_must_be_positive() -> None:
    """validate names the key of a zero or negative timeout."""
    config = _http(read_timeout=0, idle_timeout=-1)
    assert config.validate() == [
        "protocols.http.read_timeout: must be positive",
        "protocols.http.idle_timeout: must be positive",
    ]
