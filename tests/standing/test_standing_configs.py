"""Issue 11, reproductions 2 and 3: a standing collector from each shipped config sees the OS.

Each test starts ``otel-bridge run -c configs/<file>`` as a real process (its downstream, for
Phoenix and Jaeger, is a local OTLP receiver at the endpoint the config reads), then an agent
instrumented with nothing but the OpenTelemetry SDK as a separate plain subprocess. The
collector learns the agent's pid from its first span, follows it, and records what the agent
does next: its process, a file it writes and a connection it makes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from standing_support import REPO, Downstream, RunningCollector, run_agent

from otel_bridge.model import Span

CONFIGS = REPO / "configs"

# the agent exports with the SDK's own OTLP exporters (the dev extra)
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the dev extra")


def test_every_shipped_config_is_tested_here() -> None:
    """Adding a config file means adding it to the standing tests below (agent.yaml and
    gateway.yaml run as standing collectors in tests/fleet/, gateway-postgres.yaml in
    tests/fleet/test_fleet_store.py)."""
    assert sorted(p.name for p in CONFIGS.glob("*.yaml")) == [
        "agent.yaml",
        "gateway-postgres.yaml",
        "gateway.yaml",
        "jaeger.yaml",
        "local.yaml",
        "phoenix.yaml",
    ]


def test_local_yaml_records_the_os_plane_of_a_separately_started_agent(tmp_path: Path) -> None:
    """configs/local.yaml: the graph holds the agent's process, its file and its connection."""
    graph_path = tmp_path / "graph.json"
    env = {
        "OTEL_BRIDGE_GRAPH": str(graph_path),
        "OTEL_BRIDGE_RECORDS": str(tmp_path / "records.jsonl"),
    }
    collector = RunningCollector(CONFIGS / "local.yaml", tmp_path, env)
    agent, out, port = run_agent(collector, tmp_path, "http/protobuf")
    graph: dict[str, Any] = json.loads(graph_path.read_text())
    nodes = {n["id"]: n for n in graph["nodes"]}
    (proc,) = [
        n for n in nodes.values() if n["kind"] == "process" and n["facts"]["pid"] == agent.pid
    ]
    assert "os" in proc["channels"]
    targets = {e["target"] for e in graph["edges"] if e["source"] == proc["id"]}
    files = [nodes[t] for t in targets if nodes[t]["kind"] == "file"]
    assert str(out) in {f["facts"]["path"] for f in files}, targets
    endpoints = [nodes[t]["facts"] for t in targets if nodes[t]["kind"] == "endpoint"]
    assert port in {e["port"] for e in endpoints}, targets
    # followed from its first span: what came before is recorded as unknown
    assert graph["summary"]["coverage"].get("collection.lineage.degraded") == 1


def readme_configuration() -> str:
    """The YAML block under README.md's "## Configuration" heading, as a user copies it."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Configuration\n", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_readme_configuration_records_the_os_plane_of_a_separately_started_agent(
    tmp_path: Path,
) -> None:
    """Reproduction 2: README.md's own configuration snippet exited 2 under ``run`` ("receiver
    host: no root_pid to observe") while ``validate`` said OK. Copied as it stands (only its
    fixed ports moved to free ones with ``--set``), it records a separately started SDK agent's
    process, the file it wrote and the connection it made."""
    config = tmp_path / "otel-bridge.yaml"
    config.write_text(readme_configuration(), encoding="utf-8")
    assert "host:" in config.read_text(encoding="utf-8")
    ports = tuple(
        f"--set=receivers.otlp.protocols.{p}.endpoint=127.0.0.1:0" for p in ("grpc", "http")
    )
    collector = RunningCollector(config, tmp_path, {}, args=ports)
    agent, out, port = run_agent(collector, tmp_path, "grpc")
    graph: dict[str, Any] = json.loads((tmp_path / "otel-bridge-graph.json").read_text())
    nodes = {n["id"]: n for n in graph["nodes"]}
    (proc,) = [
        n for n in nodes.values() if n["kind"] == "process" and n["facts"]["pid"] == agent.pid
    ]
    assert "os" in proc["channels"]
    targets = {e["target"] for e in graph["edges"] if e["source"] == proc["id"]}
    files = {nodes[t]["facts"]["path"] for t in targets if nodes[t]["kind"] == "file"}
    assert str(out) in files, targets
    endpoints = {nodes[t]["facts"]["port"] for t in targets if nodes[t]["kind"] == "endpoint"}
    assert port in endpoints, targets


def os_spans_of(spans: list[Span], pid: int) -> list[Span]:
    """The enrich processor's OS-plane spans of process ``pid``: its process span first, then
    any late-events spans (observations that reached enrich after the process span was sent)
    and more-events spans (its events past the process span's 128)."""
    found = [
        s
        for s in spans
        if s.resource.attributes.get("service.name") == "otel-bridge-host"
        and s.attributes.get("process.pid") == pid
    ]

    def child(s: Span) -> bool:
        return any(s.attributes.get(f"otel_bridge.os_plane.{k}") is True for k in ("late", "more"))

    found.sort(key=child)
    assert found, "no OS-plane span of the agent"
    assert not child(found[0]), found
    for late in found[1:]:
        assert child(late)
        assert late.parent_span_id == found[0].span_id
    return found


@pytest.mark.slow  # 10-20 s each: enrich holds spans for its window before the drain
@pytest.mark.parametrize(
    ("config", "protocol"), [("phoenix.yaml", "http/protobuf"), ("jaeger.yaml", "grpc")]
)
def test_backend_config_records_the_os_plane_of_a_separately_started_agent(
    tmp_path: Path, config: str, protocol: str
) -> None:
    """configs/phoenix.yaml and jaeger.yaml: the downstream gets the agent's OS-plane span,
    with the file it wrote and the connection it made as span events."""
    downstream = Downstream()
    try:
        env = {
            "PHOENIX_COLLECTOR_ENDPOINT": downstream.http_url,
            "JAEGER_ENDPOINT": downstream.grpc_endpoint,
        }
        collector = RunningCollector(CONFIGS / config, tmp_path, env)
        agent, out, port = run_agent(collector, tmp_path, protocol)
        spans = downstream.spans()
    finally:
        downstream.stop()
    names = {s.name for s in spans if s.resource.attributes.get("service.name") == "standing-agent"}
    assert names == {"agent.hello", "agent.act"}
    agent_spans = os_spans_of(spans, agent.pid)
    events = [e for span in agent_spans for e in span.events]
    # only what it did once followed: its start-up before its first span is not its events
    # (held, they once filled the span's 128 events and crowded the connection out)
    dropped = sum(s.dropped_events_count for s in agent_spans)
    assert dropped == 0, (dropped, len(events))
    assert len(events) < 64, [e.attributes for e in events]
    targets = {str(e.attributes.get("otel_bridge.target")) for e in events}
    assert any(str(out) in t for t in targets), targets
    # on failure, the collector's own account of its network plane and of the agent's pid
    said = [line for line in collector.output.splitlines() if "network" in line or "pid" in line]
    assert any(t.endswith(f":{port}") for t in targets), (targets, said[-12:])
