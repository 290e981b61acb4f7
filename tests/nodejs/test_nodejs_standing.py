"""A Node.js agent against a standing collector (``otel-bridge run -c configs/local.yaml``).

The agent (``agent/agent.js``, the OpenTelemetry JS SDK configured from the environment) is
started separately from the collector, as a user's service is. Its first span names its pid
(the SDK's process detector: ``process.pid`` as an OTLP int, ``host.id`` from the host
detector); the collector follows it from then on and records what it does next: the file it
writes and the ``cp`` it runs inside the tool call, with the file ``cp`` writes. The agent is
linked to its process by ``process.pid`` and the tool call to ``cp`` by ``TRACEPARENT``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from nodejs_support import installed_agent
from standing_support import REPO, RunningCollector, subprocess_env

pytestmark = pytest.mark.slow


def _run_agent(collector: RunningCollector, tmp_path: Path, protocol: str) -> int:
    """Start the agent (``--wait``), let it act once the collector follows it; its pid."""
    port = collector.grpc_port if protocol == "grpc" else collector.http_port
    env = subprocess_env(
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_SERVICE_NAME="js-agent",
    )
    agent = subprocess.Popen(
        ["node", str(installed_agent()), str(tmp_path), "--wait"],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        assert agent.stdin is not None
        line = agent.stdout.readline()
        assert line == "reported\n", line + (agent.stderr.read() if agent.stderr else "")
        collector.stderr.wait_for(rf"following pid {agent.pid} from now")
        out, err = agent.communicate("go\n", timeout=60)
        assert (agent.returncode, out) == (0, "done\n"), err
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.communicate()
    return agent.pid


@pytest.mark.parametrize("protocol", ["grpc", "http/json"])
def test_local_yaml_records_the_os_plane_of_a_node_agent(tmp_path: Path, protocol: str) -> None:
    graph_path = tmp_path / "graph.json"
    env = {
        "OTEL_BRIDGE_GRAPH": str(graph_path),
        "OTEL_BRIDGE_RECORDS": str(tmp_path / "records.jsonl"),
    }
    collector = RunningCollector(REPO / "configs" / "local.yaml", tmp_path, env)
    try:
        pid = _run_agent(collector, tmp_path, protocol)
    finally:
        code = collector.stop()
    assert code == 0, collector.output
    graph: dict[str, Any] = json.loads(graph_path.read_text())
    nodes = {n["id"]: n for n in graph["nodes"]}
    (node,) = [n for n in nodes.values() if n["kind"] == "process" and n["facts"]["pid"] == pid]
    assert "os" in node["channels"]
    (cp,) = [
        n
        for n in nodes.values()
        if n["kind"] == "process" and n["facts"]["argv"] == ["cp", "notes.txt", "notes.bak"]
    ]

    def edges(source: str, relation: str) -> set[str]:
        return {
            e["target"]
            for e in graph["edges"]
            if (e["source"], e["relation"]) == (source, relation)
        }

    assert f"file:{tmp_path}/notes.txt" in edges(node["id"], "wrote")
    assert f"file:{tmp_path}/notes.bak" in edges(cp["id"], "wrote")
    assert edges("agent:js-agent:js-agent-1", "correlated_with_process") == {node["id"]}
    (call,) = [n["id"] for n in nodes.values() if n["kind"] == "tool_call"]
    (link,) = [
        e
        for e in graph["edges"]
        if (e["source"], e["relation"]) == (call, "correlated_with_process")
    ]
    assert (link["target"], link["method"], link["grade"]) == (cp["id"], "traceparent", "C")
    # followed from its first span: what came before is recorded as unknown
    assert graph["summary"]["coverage"].get("collection.lineage.degraded") == 1
