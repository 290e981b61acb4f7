"""A plain user's standing collector links an agent whose spans name no pid (strace backend).

A standing collector (``configs/local.yaml``) run by an unprivileged user gets the ``strace``
backend (fanotify and eBPF are refused). An agent using the OpenTelemetry SDK's default
resource states no ``process.pid``; the collector follows the process holding the sender's end
of the loopback connection its spans came over, and the correlator's ``transport_peer`` rule
links the agent to the process seen holding it. strace attaches *after* that connection
exists, so it never traced its ``connect``: the graph only said ``correlate.sender:
no_connection`` and nothing was printed. The connections a process holds when strace attaches
are now read from ``/proc`` and recorded as found at the attach
(``network.observed_at=attach``), and a pidless sender that still cannot be linked is named,
with the reason, on the collector's stderr and in its last lines.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from standing_support import (
    IS_ROOT,
    REPO,
    RunningCollector,
    end_process,
    need,
    run_agent,
    start_agent,
    unprivileged_prefix,
)

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the dev extra")

AGENT_NODE = "agent:standing-agent:scout"


def _collector(tmp_path: Path, prefix: list[str]) -> RunningCollector:
    os.chmod(tmp_path, 0o777)  # the plain user writes its graph here
    env = {
        "OTEL_BRIDGE_GRAPH": str(tmp_path / "graph.json"),
        "OTEL_BRIDGE_RECORDS": str(tmp_path / "records.jsonl"),
    }
    return RunningCollector(REPO / "configs" / "local.yaml", tmp_path, env, prefix)


@pytest.mark.slow  # ~15 s each: a collector and an agent under strace
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_pidless_agent_is_linked_by_the_connection_found_at_attach(
    tmp_path: Path, protocol: str
) -> None:
    need("strace")
    prefix = unprivileged_prefix()
    collector = _collector(tmp_path, prefix)
    agent, _, _ = run_agent(collector, tmp_path, protocol, prefix, name="scout", pidless=True)
    assert "receiver host: strace" in collector.output, collector.output
    graph: dict[str, Any] = json.loads((tmp_path / "graph.json").read_text())
    nodes = {n["id"]: n for n in graph["nodes"]}
    (proc,) = [
        i for i, n in nodes.items() if n["kind"] == "process" and n["facts"]["pid"] == agent.pid
    ]
    links = [
        e
        for e in graph["edges"]
        if e["source"] == AGENT_NODE and e["relation"] == "correlated_with_process"
    ]
    assert [(e["target"], e["method"], e["inferred"]) for e in links] == [
        (proc, "transport_peer", False)
    ], (links, collector.output)
    # Its connection to the collector, opened before strace attached, found at the attach.
    port = collector.grpc_port if protocol == "grpc" else collector.http_port
    found = [
        e
        for e in graph["edges"]
        if e["source"] == proc
        and e["relation"] == "connected_to"
        and nodes[e["target"]]["facts"]["port"] == port
    ]
    assert found, [e for e in graph["edges"] if e["source"] == proc]
    assert found[0]["attrs"]["network.observed_at"] == "attach", found[0]
    attrs = found[0]["attrs"]
    assert attrs["network.found_by"] == "procfs", found[0]
    assert attrs["network.local.port"] > 0, found[0]  # the sender's end, which transport_peer joins
    # found, not traced: no syscall, no causal claim, the time it was seen (not when opened)
    assert (found[0]["attribution"], found[0]["causal"]) == (["sampled_process"], None), found[0]
    assert "could not be linked" not in collector.output, collector.output


def _pidless_report(port: int) -> str:
    """An SDK agent (default resource: no process.pid) that reports one span over OTLP/HTTP."""
    return (
        "from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "p = TracerProvider()\n"
        f"p.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter("
        f"endpoint='http://127.0.0.1:{port}/v1/traces')))\n"
        "attrs = {'gen_ai.operation.name': 'invoke_agent', 'gen_ai.agent.name': 'scout'}\n"
        "with p.get_tracer('t').start_as_current_span('invoke_agent scout', attributes=attrs):\n"
        "    pass\n"
        "print('reported', flush=True)\n"
        "import sys; sys.stdin.readline()\n"
        "p.shutdown()\n"
    )


@pytest.mark.slow
def test_a_pidless_sender_it_may_not_inspect_is_named_with_the_reason(tmp_path: Path) -> None:
    """The collector runs as a plain user, the agent as another user (root): the collector may
    not read the agent's descriptors, so it cannot tell which process holds the connection.
    Its stderr says so once, in plain words, and its last lines name the unlinked sender."""
    if not IS_ROOT:
        pytest.skip("an agent of another user needs root to start")
    prefix = unprivileged_prefix()
    collector = _collector(tmp_path, prefix)
    agent = start_agent(
        collector,
        ["-c", _pidless_report(collector.http_port)],
        "reported",
        OTEL_SERVICE_NAME="standing-agent",
    )
    try:
        assert agent.stdin is not None
        line = collector.stderr.wait_for(r"sent spans without process\.pid.*")[0]
        assert "another user" in line, line
        agent.stdin.close()
        assert agent.wait(timeout=60) == 0
    finally:
        end_process(agent)
        assert collector.stop() == 0, collector.output
    out = collector.output
    assert out.count("sent spans without process.pid") == 1, out  # once per sender
    assert out.count("WARNING otel_bridge.correlate: agent scout") == 1, out
    last = out[out.rindex("otel-bridge: up ") :]
    assert "could not be linked" in last, last
    assert AGENT_NODE.rsplit(":", maxsplit=1)[-1] in last, last
