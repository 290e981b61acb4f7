"""Issue 13, reproduction 3 (graph part): kill -9 no longer loses acknowledged spans from
graph.json. The graph is never flushed before the kill (flush_interval: 1h); after a restart,
graph.json is rebuilt from the journal at once and holds every acknowledged span."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from chaos_harness import Client, Collector, graph_names
from waiting import wait_until

from otel_bridge.configs import __file__ as configs_init
from otel_bridge.testing import free_port

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the OTLP gRPC exporter")

CONFIG = """
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:${env:A_PORT}
processors:
  normalize:
exporters:
  graph:
    output: ${env:WORK}/graph.json
    flush_interval: 1h
    journal: {path: "${env:WORK}/graph.journal"}
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [normalize]
      exporters: [graph]
"""


@pytest.mark.slow
def test_graph_json_rebuilt_after_kill_9_holds_every_acknowledged_span(tmp_path: Path) -> None:
    """30+ spans acknowledged, SIGKILL before any graph.json write, restart: all are there."""
    env = {"A_PORT": str(free_port()), "WORK": str(tmp_path)}
    (tmp_path / "a.yaml").write_text(CONFIG)
    collector = Collector(tmp_path / "a.yaml", env)
    collector.start()
    client = Client(int(env["A_PORT"]), pace=0.0)
    client.start()
    try:
        wait_until(lambda: len(client.acked) >= 30, 60, "30 acknowledged spans")
    finally:
        client.stop()
    assert collector.stop(signal.SIGKILL) == -signal.SIGKILL
    assert not (tmp_path / "graph.json").exists()
    acked = set(client.acked)

    collector.start()  # replays the journal and writes graph.json before it reports running
    try:
        assert acked <= graph_names(tmp_path / "graph.json")
    finally:
        assert collector.stop() == 0
    assert "rebuilt the graph from" in collector.logs[-1]
    assert acked <= graph_names(tmp_path / "graph.json")


@pytest.mark.slow
def test_bundled_local_yaml_is_durable_by_default(tmp_path: Path) -> None:
    """Issue 13: the bundled default (``run -c configs/local.yaml``, nothing added) journals its
    graph next to it (``./otel-bridge-graph.journal``, 0600): after kill -9 and a restart from
    the same directory, graph.json holds every acknowledged span."""
    local_yaml = Path(configs_init).parent / "local.yaml"
    port = free_port()
    env = {
        "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": f"127.0.0.1:{port}",
        "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
        "OTEL_BRIDGE_LOG_LEVEL": "info",
    }
    collector = Collector(local_yaml, env, cwd=tmp_path)
    collector.start()
    client = Client(port, pace=0.0)
    client.start()
    try:
        wait_until(lambda: len(client.acked) >= 30, 60, "30 acknowledged spans")
    finally:
        client.stop()
    assert collector.stop(signal.SIGKILL) == -signal.SIGKILL
    acked = set(client.acked)
    journal = tmp_path / "otel-bridge-graph.journal"
    assert journal.stat().st_mode & 0o777 == 0o600
    graph = tmp_path / "otel-bridge-graph.json"

    collector.start()  # replays the journal and rewrites graph.json before it reports running
    try:
        assert acked <= graph_names(graph)
    finally:
        assert collector.stop() == 0
    assert "rebuilt the graph from" in collector.logs[-1]
    assert acked <= graph_names(graph)
