"""End to end: real OTLP clients -> otlp receiver -> normalize -> graph exporter -> graph.json,
and the graph is independent of how spans are split into batches."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "normalize"))

from otel_span_helpers import model_span

from otel_bridge.graph import GraphAccumulator, load
from otel_bridge.model import Batch, Span
from otel_bridge.processors.normalize import Normalizer

OPS: list[dict[str, Any]] = [
    {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
    {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "b"},
    {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "shell",
        "gen_ai.tool.call.arguments": '{"command": "ls"}',
    },
    {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.provider.name": "p"},
    {"openinference.span.kind": "CHAIN"},
]


@st.composite
def traces(draw: st.DrawFn) -> list[Span]:
    """A span tree (every parent present), listed in a random order."""
    n = draw(st.integers(1, 14))
    spans = [model_span("s1", 1, attrs=draw(st.sampled_from(OPS)))]
    for i in range(2, n + 1):
        parent = draw(st.integers(1, i - 1))
        spans.append(model_span(f"s{i}", i, parent=parent, attrs=draw(st.sampled_from(OPS))))
    return list(draw(st.permutations(spans)))


def _structure(batches: list[list[Span]]) -> dict[str, Any]:
    normalizer = Normalizer()
    acc = GraphAccumulator()
    for chunk in batches:
        out = normalizer(Batch(spans=tuple(chunk)))
        acc.apply_many(out.observations)
        acc.apply_coverage(out.coverage)
    acc.apply_coverage(normalizer.drain())
    doc = acc.to_dict()
    # First-available values (attrs, labels) legitimately depend on order; the rest must not.
    for element in doc["nodes"] + doc["edges"]:
        element.pop("attrs")
        element.pop("label", None)
    return doc


@settings(max_examples=60, deadline=None)
@given(traces(), st.lists(st.integers(0, 14), max_size=4))
def test_graph_does_not_depend_on_batching_or_order(spans: list[Span], cuts: list[int]) -> None:
    """Any order and split of a complete trace gives the same graph and no coverage."""
    bounds = sorted({0, len(spans), *(min(c, len(spans)) for c in cuts)})
    chunks = [spans[a:b] for a, b in itertools.pairwise(bounds)]
    reference = _structure([sorted(spans, key=lambda s: s.span_id)])
    split = _structure(chunks)
    assert split == reference
    assert split["summary"]["coverage"] == {}


def test_real_otlp_grpc_and_http_into_graph(tmp_path: Path) -> None:
    """Spans from the real OTel SDK over OTLP/gRPC and OTLP/HTTP become graph.json edges."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otel_bridge.config import parse_config
    from otel_bridge.pipeline import Collector

    out = tmp_path / "graph.json"
    config = parse_config(
        {
            "receivers": {
                "otlp": {
                    "protocols": {
                        "grpc": {"endpoint": "127.0.0.1:0"},
                        "http": {"endpoint": "127.0.0.1:0"},
                    }
                }
            },
            "processors": {"normalize": {}},
            "exporters": {"graph": {"output": str(out), "flush_interval": 0}},
            "service": {
                "pipelines": {
                    "evidence": {
                        "receivers": ["otlp"],
                        "processors": ["normalize"],
                        "exporters": ["graph"],
                    }
                }
            },
        }
    )
    collector = Collector(config)
    collector.start()
    try:
        receiver: Any = collector.component("otlp")
        for name, exporter in (
            ("grpc-agent", GrpcExporter(endpoint=f"127.0.0.1:{receiver.grpc_port}", insecure=True)),
            (
                "http-agent",
                HttpExporter(endpoint=f"http://127.0.0.1:{receiver.http_port}/v1/traces"),
            ),
        ):
            provider = TracerProvider(resource=Resource.create({"service.name": name}))
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            tracer = provider.get_tracer("e2e")
            with (
                tracer.start_as_current_span(
                    "invoke_agent planner",
                    attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "p"},
                ),
                tracer.start_as_current_span(
                    "execute_tool bash",
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "bash",
                        "gen_ai.tool.call.arguments": json.dumps({"command": "echo hi"}),
                    },
                ),
            ):
                pass
            provider.shutdown()
    finally:
        collector.shutdown()
    graph = load(out)
    invoked = {e.source for e in graph.edges if e.relation == "invoked"}
    assert invoked == {"agent:grpc-agent:p", "agent:http-agent:p"}
    commands = [n.attrs["command.line"] for n in graph.nodes if n.kind == "command"]
    assert commands == ["echo hi", "echo hi"]
