"""A plain SDK agent that sends its spans only at exit is observed by a standing collector.

Met as a new user with ``otel-bridge run -c configs/local.yaml`` and the most common SDK set-up
(``BatchSpanProcessor``: spans leave every 5 s or at exit): the collector followed the agent from
its first span, which came at its exit, so its tool call's process and the file it wrote were
never observed, and the warning's advice (state ``process.pid``) would not have helped. The host
receiver now follows a process whose environment sends its telemetry to this collector
(``follow_exporters``) from the selector scan that first sees it. A real ``otel-bridge run`` of
the embedded default, a real SDK agent started on its own, its spans sent only at exit.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from standing_support import REPO, RunningCollector, run_gated_agent

from otel_bridge.graph import load

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the linux backend)")

AGENT = """
import json, subprocess, sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

SCRIPT = "echo hi > out.txt; sleep 0.2"
COMMAND = "sh -c 'echo hi > out.txt; sleep 0.2'"
provider = TracerProvider(resource=Resource.create())
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
print("started", flush=True)
sys.stdin.readline()  # the test's go-ahead: the collector says it follows this process
attrs = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "run_command",
    "gen_ai.tool.call.id": "call_1",
    "gen_ai.tool.call.arguments": json.dumps({"command": COMMAND}),
}
tracer = provider.get_tracer("batch")
with tracer.start_as_current_span("execute_tool run_command", attributes=attrs):
    subprocess.run(["sh", "-c", SCRIPT], check=True)
provider.shutdown()  # the only export: at exit
"""


@pytest.mark.parametrize("detectors", ["otel", "process,host"], ids=["no pid", "pid"])
def test_an_agent_set_to_send_here_is_followed_before_its_first_span(
    tmp_path: Path, detectors: str
) -> None:
    """With or without ``process.pid`` on its resource (the SDK's default states none). A
    pidless agent's spans arrive over a connection closed by the time it is looked for (sent
    at exit): it is not then said to be unfollowed, since it was followed by its environment."""
    (tmp_path / "agent.py").write_text(AGENT)
    collector = RunningCollector(REPO / "configs" / "local.yaml", tmp_path, {})
    _, followed = run_gated_agent(
        collector,
        tmp_path,
        ["agent.py"],
        "started",
        OTEL_SERVICE_NAME="batch-agent",
        OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=detectors,
    )
    assert "exporter=OTEL_EXPORTER_OTLP_ENDPOINT" in followed, followed
    assert "not followed" not in collector.output, collector.output
    graph = load(tmp_path / "otel-bridge-graph.json")
    nodes = {n.id: n for n in graph.nodes}
    out = str(tmp_path / "out.txt")
    (file_id,) = [n.id for n in graph.nodes if n.kind == "file" and n.label == out]
    writers = {e.source for e in graph.edges if e.target == file_id}
    assert writers, "no process wrote out.txt"
    (call,) = [n.id for n in graph.nodes if n.kind == "tool_call"]
    linked = {
        e.target
        for e in graph.edges
        if e.source == call and e.relation == "correlated_with_process"
    }
    assert linked, [e for e in graph.edges if e.source == call]
    # the call's process (sh) is the one that wrote the file, or its parent
    parents = {e.source for e in graph.edges if e.relation == "spawned" and e.target in writers}
    assert linked & (writers | parents), (linked, writers, [nodes[w].label for w in writers])
