"""Per-signal routing: a backend that takes traces only is told once, not once per batch.

Real servers: a stdlib HTTP server answering 405 on ``/v1/logs`` (as Phoenix does) and a gRPC
server that implements the trace service but not the logs service (as Jaeger does).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import pytest

from otel_bridge.component import CreateSettings, Host
from otel_bridge.config import parse_config
from otel_bridge.exporters.otlp import OtlpExporter, grpc_factory, http_factory
from otel_bridge.exporters.otlp.config import (
    GrpcExporterConfig,
    HttpExporterConfig,
    QueueConfig,
    RetryConfig,
)
from otel_bridge.model import Batch
from otel_bridge.registry import default_registry
from otel_bridge.testing import list_receiver_factory, make_log, make_span

FAST_RETRY = RetryConfig(initial_interval=0.05, max_interval=0.1, max_elapsed_time=5)
BATCHES = 5


class TracesOnly(BaseHTTPRequestHandler):
    """200 on /v1/traces, 405 Method Not Allowed on anything else; records each path."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""

    def do_POST(self) -> None:
        """Answer by path."""
        server: Any = self.server
        self.rfile.read(int(self.headers["Content-Length"]))
        with server.lock:
            server.paths.append(self.path)
        status = 200 if self.path == "/v1/traces" else 405
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def traces_only_http() -> Iterator[Any]:
    """The traces-only HTTP server on a free port."""
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), TracesOnly)
    server.paths = []
    server.lock = threading.Lock()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def traces_only_grpc() -> Iterator[tuple[str, list[bytes]]]:
    """A gRPC server implementing only ``TraceService/Export``; its target and received requests."""
    received: list[bytes] = []

    def export(request: bytes, context: grpc.ServicerContext) -> bytes:
        received.append(request)
        return b""

    handler = grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {"Export": grpc.unary_unary_rpc_method_handler(export)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", received
    server.stop(None)


def batch(i: int) -> Batch:
    """Two spans and three log records."""
    spans = (make_span(10 * i), make_span(10 * i + 1))
    return Batch(spans=spans, logs=tuple(make_log(10 * i + k) for k in range(3)))


def export_batches(factory: Any, config: Any, queue: bool) -> dict[str, int]:
    """Send :data:`BATCHES` batches through a started exporter, shut it down; its counters."""
    config.retry_on_failure = FAST_RETRY
    config.sending_queue = QueueConfig(enabled=queue, num_consumers=1)
    exporter = factory.create(CreateSettings(id="out"), config, None)
    assert isinstance(exporter, OtlpExporter)
    host = Host()
    exporter.start(host)
    for i in range(BATCHES):
        exporter.consume(batch(i))
    exporter.shutdown()
    return host.telemetry.counters()


def warnings_about(caplog: pytest.LogCaptureFixture, word: str) -> list[str]:
    """Warning messages mentioning ``word``."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and word in r.getMessage()
    ]


@pytest.mark.parametrize("queue", [True, False])
def test_http_405_on_logs_is_reported_once_and_logs_stop(
    traces_only_http: Any, caplog: pytest.LogCaptureFixture, queue: bool
) -> None:
    """A 405 on /v1/logs: one warning naming logs and the URL, then no more log requests."""
    url = f"http://127.0.0.1:{traces_only_http.server_port}"
    with caplog.at_level(logging.WARNING):
        counters = export_batches(http_factory, HttpExporterConfig(endpoint=url), queue)
    paths = traces_only_http.paths
    assert paths.count("/v1/logs") == 1
    assert paths.count("/v1/traces") == BATCHES
    assert counters["exporter.out.sent_spans"] == 2 * BATCHES
    assert counters["exporter.out.signals_disabled"] == 1
    assert counters["exporter.out.unsupported_log_records"] == 3 * BATCHES
    assert "exporter.out.failed_log_records" not in counters
    (warning,) = warnings_about(caplog, "does not accept")
    assert f"{url}/v1/logs" in warning
    assert "does not accept logs" in warning
    assert "HTTP 405" in warning


def test_grpc_unimplemented_logs_service_is_reported_once(
    traces_only_grpc: tuple[str, list[bytes]], caplog: pytest.LogCaptureFixture
) -> None:
    """A gRPC backend without the logs service: UNIMPLEMENTED once, then logs are not sent."""
    target, received = traces_only_grpc
    with caplog.at_level(logging.WARNING):
        counters = export_batches(grpc_factory, GrpcExporterConfig(endpoint=target), True)
    assert len(received) == BATCHES
    assert counters["exporter.out.sent_spans"] == 2 * BATCHES
    assert counters["exporter.out.signals_disabled"] == 1
    assert counters["exporter.out.unsupported_log_records"] == 3 * BATCHES
    (warning,) = warnings_about(caplog, "does not accept")
    assert "UNIMPLEMENTED" in warning
    assert f"{target}/opentelemetry.proto.collector.logs.v1.LogsService/Export" in warning


def test_signals_traces_only_never_sends_logs(
    traces_only_http: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``signals: [traces]``: no log request at all, no warning, nothing counted as lost."""
    url = f"http://127.0.0.1:{traces_only_http.server_port}"
    config = HttpExporterConfig(endpoint=url, signals=["traces"])
    with caplog.at_level(logging.WARNING):
        counters = export_batches(http_factory, config, True)
    assert set(traces_only_http.paths) == {"/v1/traces"}
    assert counters == {"exporter.out.sent_spans": 2 * BATCHES}
    assert warnings_about(caplog, "out") == []


@pytest.mark.parametrize(
    ("signals", "problem"),
    [([], "choose at least one"), (["traces", "traces"], "twice"), (["metrics"], "signals")],
)
def test_signals_are_validated(signals: list[str], problem: str) -> None:
    """An empty, repeated or unknown signal is a config error naming ``signals``."""
    registry = default_registry()
    registry.add(list_receiver_factory("list"))
    doc = {
        "receivers": {"list": None},
        "exporters": {"otlphttp": {"signals": signals}},
        "service": {"pipelines": {"traces": {"receivers": ["list"], "exporters": ["otlphttp"]}}},
    }
    with pytest.raises(Exception, match=problem):
        parse_config(doc, env={}, registry=registry)
