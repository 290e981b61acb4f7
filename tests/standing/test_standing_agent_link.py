"""A standing collector links a GenAI agent to the process its spans name.

A standing collector (``configs/local.yaml``) follows an agent from its first span, so it
first observes the agent's process *after* that span, which names the pid
(``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process``). The correlator asked whether the process was
alive at the span's time from when it was first observed, found none, and never linked the
agent to its process (``correlated_with_process``, method ``resource_pid``): the agent's node
stood apart from the OS plane it was followed for. A process's start is its kernel start time
when its observation states it. The agent is the OpenTelemetry SDK with its own OTLP
exporters, gRPC and HTTP, started separately from the collector.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from standing_support import REPO, RunningCollector, run_agent

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the dev extra")


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_agent_is_linked_to_the_process_its_spans_name(tmp_path: Path, protocol: str) -> None:
    graph_path = tmp_path / "graph.json"
    env = {
        "OTEL_BRIDGE_GRAPH": str(graph_path),
        "OTEL_BRIDGE_RECORDS": str(tmp_path / "records.jsonl"),
    }
    collector = RunningCollector(REPO / "configs" / "local.yaml", tmp_path, env)
    agent, _, _ = run_agent(collector, tmp_path, protocol, name="scout")
    graph: dict[str, Any] = json.loads(graph_path.read_text())
    (proc,) = [
        n["id"] for n in graph["nodes"] if n["kind"] == "process" and n["facts"]["pid"] == agent.pid
    ]
    links = [
        e
        for e in graph["edges"]
        if e["source"] == "agent:standing-agent:scout"
        and e["relation"] == "correlated_with_process"
    ]
    assert [(e["target"], e["method"], e["inferred"]) for e in links] == [
        (proc, "resource_pid", False)
    ], links
