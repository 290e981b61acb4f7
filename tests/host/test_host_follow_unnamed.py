"""A standing collector and an agent whose resource states no ``process.pid``.

The OpenTelemetry Python SDK puts no ``process.pid`` on its resource unless its process detector
is enabled, so a standing collector (``configs/local.yaml``) cannot follow such an agent. That
must be said: a ``lineage`` ``unavailable`` coverage record in graph.json and a warning, while an
agent that states its pid is followed (``lineage`` ``degraded``). Real collector, real SDK
clients over OTLP/HTTP.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import start_run, wait_until

from otel_bridge.graph import load
from otel_bridge.testing import free_port

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

LOCAL = Path(__file__).resolve().parent.parent.parent / "otel_bridge" / "configs" / "local.yaml"

AGENT = """
import sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": sys.argv[1]}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
with provider.get_tracer("t").start_as_current_span("execute_tool run") as span:
    span.set_attribute("gen_ai.operation.name", "execute_tool")
provider.shutdown()
"""


def _agent(name: str, http: str, detectors: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://{http}"
    if detectors is not None:
        env["OTEL_EXPERIMENTAL_RESOURCE_DETECTORS"] = detectors
    subprocess.run([sys.executable, "-c", AGENT, name], env=env, check=True, timeout=60)


def test_a_sender_without_process_pid_is_recorded_as_unknown(tmp_path: Path) -> None:
    """No pid stated: a warning and ``collection.lineage.unavailable`` naming the service, once;
    an agent that states its pid gets no such record."""
    http = f"127.0.0.1:{free_port()}"
    env = {
        "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{free_port()}",
        "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": http,
        "OTEL_BRIDGE_LOG_LEVEL": "warning",
    }
    proc, err = start_run(LOCAL, env, cwd=tmp_path)
    try:
        _agent("nopid-agent", http, None)
        err.wait_for(r"service nopid-agent \(service.instance.id [^)]+\) sent spans without", 20)
        _agent("pid-agent", http, "process,host")
        records = tmp_path / "otel-bridge-records.jsonl"
        wait_until(lambda: b"pid-agent" in records.read_bytes(), 20, "the second agent's spans")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, err.rest()
    graph = load(tmp_path / "otel-bridge-graph.json")
    coverage = graph.summary["coverage"]
    assert coverage.get("collection.lineage.unavailable", 0) >= 1, coverage
    unnamed = [
        line
        for line in records.read_text().splitlines()
        if "collection.lineage.unavailable" in line and "without process.pid" in line
    ]
    assert len(unnamed) == 1, unnamed
    assert "nopid-agent" in unnamed[0]
    assert "activity is unknown" in unnamed[0]
    # the agent exited right after sending: the advice is to follow it from its start, not
    # to state a pid (which would come as late)
    (warned,) = [w for w in err.log().splitlines() if "nopid-agent" in w and "without" in w]
    assert "held the connection it came over any more" in warned, warned
    assert "follow it from its start with a host receiver selector" in warned, warned
    assert "RESOURCE_DETECTORS" not in warned, warned
