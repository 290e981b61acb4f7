"""A user's own OTLP destination for the forwarding tests: a real gRPC server and a real HTTP
server on loopback that take traces, metrics and logs export requests, answer success as a
Collector does, and keep each request's body with how it arrived."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc

_SERVICES = {
    "traces": "opentelemetry.proto.collector.trace.v1.TraceService",
    "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService",
    "logs": "opentelemetry.proto.collector.logs.v1.LogsService",
}


@dataclass(frozen=True, slots=True)
class Received:
    """One export request as the destination got it."""

    signal: str
    protocol: str
    """``grpc``, ``http/protobuf`` or ``http/json``."""
    body: bytes
    path: str = ""
    headers: dict[str, str] = field(default_factory=dict)


class Sink:
    """Both servers; :attr:`received` lists every request in arrival order."""

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._grpc = grpc.server(ThreadPoolExecutor(max_workers=4))
        self._grpc.add_generic_rpc_handlers(
            tuple(
                grpc.method_handlers_generic_handler(
                    service,
                    {"Export": grpc.unary_unary_rpc_method_handler(self._grpc_export(signal))},
                )
                for signal, service in _SERVICES.items()
            )
        )
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                json_body = self.headers.get("Content-Type", "").startswith("application/json")
                signal = self.path.rstrip("/").rpartition("/")[2]
                sink._add(
                    Received(
                        signal,
                        "http/json" if json_body else "http/protobuf",
                        body,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                    )
                )
                answer = b"{}" if json_body else b""
                self.send_response(200)
                self.send_header("Content-Type", self.headers.get("Content-Type", ""))
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http_port = self._http.server_address[1]
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def _grpc_export(self, signal: str) -> Any:
        def export(raw: bytes, context: grpc.ServicerContext) -> bytes:
            metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
            self._add(Received(signal, "grpc", raw, "", metadata))
            return b""

        return export

    def _add(self, received: Received) -> None:
        with self._lock:
            self.received.append(received)

    def of(self, signal: str) -> list[Received]:
        """The requests of ``signal`` received so far."""
        with self._lock:
            return [r for r in self.received if r.signal == signal]

    def close(self) -> None:
        """Stop both servers."""
        self._http.shutdown()
        self._http.server_close()
        self._grpc.stop(0)


def sink() -> Iterator[Sink]:
    """A started sink, stopped after the test (wrap with ``pytest.fixture``)."""
    started = Sink()
    try:
        yield started
    finally:
        started.close()
