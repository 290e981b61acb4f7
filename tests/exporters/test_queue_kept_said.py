"""A collector stopped while its backend is down says where the undelivered spans wait.

With a persistent ``sending_queue`` the spans are neither delivered nor lost at shutdown: they
stay on disk for the next start. The final summary line counted them nowhere (delivered 0, not
delivered 0, dropped 0); a warning now names how many and where, and the summary line counts
them as queued ("delivered 0, queued 1 (persistent queue), failed 0, dropped 0"). Real
``otel-bridge run``, a real OTLP/HTTP request, a backend port nobody listens on.
"""

from __future__ import annotations

import http.client
import json
import signal
from pathlib import Path

from waiting import start_run

from otel_bridge.testing import free_port

COLLECTOR = """
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:${env:A_PORT}
exporters:
  otlp/down:
    endpoint: 127.0.0.1:${env:B_PORT}
    retry_on_failure: {initial_interval: 0.1, max_interval: 0.2, max_elapsed_time: 0}
    sending_queue: {storage: "${env:QUEUE}"}
    shutdown_timeout: 0.5
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp/down]
"""


SPAN = {
    "resourceSpans": [
        {
            "scopeSpans": [
                {
                    "spans": [
                        {
                            "traceId": "5b8efff798038103d269b633813fc60c",
                            "spanId": "eee19b7ec3c1b174",
                            "name": "kept",
                            "startTimeUnixNano": "1544712660000000000",
                            "endTimeUnixNano": "1544712661000000000",
                        }
                    ]
                }
            ]
        }
    ]
}


def post_json_span(port: int) -> int:
    """POST one span as OTLP/JSON; the HTTP status."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps(SPAN).encode()
        conn.request("POST", "/v1/traces", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_spans_kept_in_the_queue_at_shutdown_are_said(tmp_path: Path) -> None:
    """One span accepted, the backend down, SIGTERM: a warning says 1 record is kept in the
    queue's directory, the last summary line counts it as queued, and the exit is clean."""
    (tmp_path / "a.yaml").write_text(COLLECTOR)
    port = free_port()
    env = {"A_PORT": str(port), "B_PORT": str(free_port()), "QUEUE": str(tmp_path / "queue")}
    proc, err = start_run(tmp_path / "a.yaml", env, timeout=30)
    try:
        assert post_json_span(port) == 200
        err.wait_for("cannot send traces", 20)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, err.rest()
    line = err.wait_for(r"otlp/down: (\d+) record\(s\) not delivered yet are kept in [^\n]*", 10)
    assert line.group(1) == "1"
    assert str(tmp_path / "queue") in line.group(0)
    summary = err.wait_for(r"\| otlp/down: [^\n]*", 10)
    assert summary.group(0).endswith(
        "| otlp/down: delivered 0 spans, 0 log records, queued 1 (persistent queue), failed 0, "
        "dropped 0"
    ), summary.group(0)
