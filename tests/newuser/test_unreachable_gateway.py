"""An agent whose gateway cannot be reached says so, instead of retrying in silence.

``configs/agent.yaml`` retries forever (``max_elapsed_time: 0s``) into a persistent queue, so a
wrong ``OTEL_BRIDGE_GATEWAY_ENDPOINT`` never ends in a "could not send": before this test the
collector printed nothing at all. A real ``otel-bridge run`` with the same exporter settings, a
real HTTP/JSON client and a gateway port nobody listens on.
"""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from pathlib import Path

from waiting import start_run

from otel_bridge.testing import free_port


def _span() -> bytes:
    now = time.time_ns()
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "execute_tool",
        "kind": 1,
        "startTimeUnixNano": str(now),
        "endTimeUnixNano": str(now + 1_000_000),
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "nu-agent"}}]}
    doc = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(doc).encode()


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        status: int = response.status
    return status


def test_unreachable_gateway_is_reported_once(tmp_path: Path) -> None:
    grpc_port, http_port, gateway_port = free_port(), free_port(), free_port()
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"""
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: 127.0.0.1:{grpc_port}}}
      http: {{endpoint: 127.0.0.1:{http_port}}}
exporters:
  otlp/gateway:
    endpoint: 127.0.0.1:{gateway_port}
    retry_on_failure: {{initial_interval: 50ms, max_interval: 100ms, max_elapsed_time: 0s}}
    sending_queue: {{storage: {tmp_path / "queue"}}}
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp/gateway]
""",
        encoding="utf-8",
    )
    proc, stderr = start_run(config, {})
    try:
        url = f"http://127.0.0.1:{http_port}/v1/traces"
        assert _post(url, _span()) == 200
        match = stderr.wait_for(r"otlp/gateway: cannot send traces to (\S+) yet, retrying")
        assert str(gateway_port) in match.group(1)
        _post(url, _span())  # a second batch, still unreachable: no second warning
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert stderr.log().count("cannot send traces") == 1
