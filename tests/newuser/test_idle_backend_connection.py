"""A backend that closes an idle kept-alive connection is not reported as failing.

Met with a standing ``otel-bridge run -c configs/phoenix.yaml`` and a real Phoenix server: Phoenix
(uvicorn) closes a kept-alive connection after 5 s idle, so the first batch after a pause failed
with ``[Errno 32] Broken pipe`` and the collector warned ``cannot send traces to ... yet,
retrying``. That warning is said once per run, so the false alarm also used up the one warning a
real outage later would have given. A real ``otel-bridge run``, a real HTTP/1.1 server that
closes connections idle for 0.2 s (as uvicorn does after 5 s), real HTTP/JSON clients.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from waiting import start_run, wait_until

from otel_bridge.testing import free_port


class _Backend(ThreadingHTTPServer):
    daemon_threads = True
    requests = 0
    closed = 0


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as an OTLP backend
    timeout = 0.2  # an idle kept-alive connection is closed, as uvicorn does after 5 s
    server: _Backend

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.requests += 1
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def finish(self) -> None:
        super().finish()
        self.server.closed += 1

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _backend() -> Iterator[_Backend]:
    server = _Backend(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _post_span(url: str, n: int) -> None:
    now = time.time_ns()
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": f"{n:016x}",
        "name": "execute_tool",
        "kind": 1,
        "startTimeUnixNano": str(now),
        "endTimeUnixNano": str(now + 1_000_000),
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "nu-agent"}}]}
    body = json.dumps(
        {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    )
    request = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_a_connection_the_backend_closed_while_idle_is_replaced_silently(tmp_path: Path) -> None:
    grpc_port, http_port = free_port(), free_port()
    with _backend() as backend:
        config = tmp_path / "collector.yaml"
        config.write_text(
            f"""
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:{grpc_port}}}
      http: {{endpoint: 127.0.0.1:{http_port}}}
exporters:
  otlphttp/backend:
    endpoint: http://127.0.0.1:{backend.server_address[1]}
    signals: [traces]
    retry_on_failure: {{initial_interval: 50ms, max_interval: 100ms}}
    sending_queue: {{num_consumers: 1}}  # one sender: the second batch takes its connection
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlphttp/backend]
""",
            encoding="utf-8",
        )
        proc, stderr = start_run(config, {})
        try:
            url = f"http://127.0.0.1:{http_port}/v1/traces"
            _post_span(url, 1)
            wait_until(lambda: backend.requests == 1, 30, "the first batch at the backend")
            # The backend closes the exporter's idle connection.
            wait_until(lambda: backend.closed >= 1, 30, "the backend closing the idle connection")
            _post_span(url, 2)
            wait_until(lambda: backend.requests == 2, 30, "the second batch at the backend")
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        log = stderr.log()
    assert "cannot send" not in log, log
    assert "| exporter errors 0 |" in log, log
    assert "| otlphttp/backend: delivered 2 spans, 0 log records, failed 0, dropped 0" in log, log
