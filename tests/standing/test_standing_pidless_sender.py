"""A standing collector follows an agent whose spans name no pid, by the connection they came over.

``opentelemetry-instrumentation-openai-v2``'s examples use the SDK's default resource, which
states no ``process.pid``: a standing collector (``configs/local.yaml``), which follows the
processes that send it spans, had no pid to follow, so the agent's process, its connections
and the ``transport_peer`` link of its model calls were all missing (a ``lineage``
``unavailable`` record said so). The host receiver now finds the process holding the sender's
end of that loopback connection in the socket tables and follows it; its connection (opened
before it was followed) is found by the socket scans, and the model calls join it. The SDK's
default ``BatchSpanProcessor`` and OTLP exporters, gRPC and HTTP, the real ``openai`` client
against a fake OpenAI server, the agent started separately from the collector.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_openai import fake_openai, with_openai_v2
from standing_support import REPO, RunningCollector, run_gated_agent

pytest.importorskip("openai", reason="needs the openai client (the examples extra)")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the dev extra")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")

AGENT = """
import sys
from openai import OpenAI
from opentelemetry import trace
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

port, protocol = sys.argv[1], sys.argv[2]
if protocol == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
OpenAIInstrumentor().instrument()
client = OpenAI(base_url="http://127.0.0.1:" + port + "/v1", api_key="test")

def chat():
    client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": "hi"}])

chat()
provider.force_flush()
print("reported", flush=True)
sys.stdin.readline()  # the collector follows this process now
chat()
chat()
provider.shutdown()
"""


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_pidless_agent_is_followed_and_linked_by_its_connection(
    tmp_path: Path, protocol: str
) -> None:
    (tmp_path / "agent.py").write_text(with_openai_v2(AGENT), encoding="utf-8")
    graph_path = tmp_path / "graph.json"
    env = {
        "OTEL_BRIDGE_GRAPH": str(graph_path),
        "OTEL_BRIDGE_RECORDS": str(tmp_path / "records.jsonl"),
    }
    # the connection is what is tested: not the environment's follow (``follow_exporters``),
    # which would follow the agent from its start, before its first span
    off = ("--set", "receivers.host.follow_exporters=false")
    collector = RunningCollector(REPO / "configs" / "local.yaml", tmp_path, env, args=off)
    with fake_openai() as model_port:
        pid, _ = run_gated_agent(
            collector,
            tmp_path,
            ["agent.py", str(model_port), protocol],
            "reported",
            protocol=protocol,
            follow="it held the conn",
        )
    graph: dict[str, Any] = json.loads(graph_path.read_text())
    nodes = {n["id"]: n for n in graph["nodes"]}
    [link] = [e for e in graph["edges"] if e["relation"] == "requested"]
    assert nodes[link["source"]]["facts"]["pid"] == pid
    assert nodes[link["target"]]["label"] == "gpt-test"
    assert (link["method"], link["grade"], link["inferred"]) == ("transport_peer", "C", False)
    # Its connection to the model's server, opened before it was followed, was found.
    reached = {
        nodes[e["target"]]["facts"]["port"]
        for e in graph["edges"]
        if e["relation"] == "connected_to" and e["source"] == link["source"]
    }
    assert model_port in reached, reached
    assert "stated no process.pid: not followed" not in collector.output, collector.output
