"""A fixed end-to-end scenario (spans + OS events + a derived bridge) for golden and CLI tests."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "normalize"))

from otel_span_helpers import HOST, OS_RESOURCE, model_span, os_record

from otel_bridge.graph import GraphAccumulator
from otel_bridge.identity import process_id, process_key, tool_call_key
from otel_bridge.model import (
    Attribution,
    Batch,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    Observation,
    ProcessFacts,
    RelationKind,
    Resource,
    Source,
    ToolCallFacts,
)
from otel_bridge.processors.normalize import Normalizer

SEM = Resource(
    attributes={
        "service.name": "agents",
        "process.pid": 100,
        "host.id": HOST,
        "process.creation.time": "2026-01-01T00:00:00.000Z",
    }
)
GW = Resource(attributes={"service.name": "litellm-proxy"})
MS = 1_000_000
T0 = 1_767_225_600_000 * MS


def scenario_batches() -> list[Batch]:
    """Two batches; the tool span arrives before its agent span."""
    tool = model_span(
        "execute_tool shell",
        3,
        parent=1,
        resource=SEM,
        start=T0 + 10 * MS,
        end=T0 + 60 * MS,
        attrs={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "shell",
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": json.dumps({"command": "python3 -c pass"}),
        },
    )
    agent = model_span(
        "invoke_agent planner",
        1,
        resource=SEM,
        start=T0,
        end=T0 + 100 * MS,
        attrs={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"},
    )
    chat = model_span(
        "chat qwen",
        2,
        parent=1,
        resource=SEM,
        start=T0 + 2 * MS,
        end=T0 + 8 * MS,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "ollama",
            "gen_ai.request.model": "qwen2.5:0.5b",
            "gen_ai.response.id": "req-1",
        },
    )
    gw_chat = model_span(
        "chat qwen",
        9,
        parent=2,
        resource=GW,
        start=T0 + 3 * MS,
        end=T0 + 7 * MS,
        attrs={
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "ollama",
            "gen_ai.request.model": "qwen2.5:0.5b",
            "gen_ai.response.id": "req-1",
        },
    )
    logs = (
        os_record(
            "process.start",
            "linux:1",
            time=T0 + 20 * MS,
            process__pid=200,
            process__parent_pid=100,
            process__parent__creation__time="2026-01-01T00:00:00.000Z",
            process__executable__path="/usr/bin/python3",
            process__executable__name="python3",
            process__command_args=["python3", "-c", "pass"],
            evidence__causal=True,
        ),
        *(
            os_record(
                "file.open",
                f"linux:{i}",
                time=T0 + (20 + i) * MS,
                process__pid=200,
                file__path="/tmp/data.txt",
                file__access="read",
                evidence__causal=True,
            )
            for i in range(2, 5)
        ),
        os_record(
            "network.connect",
            "linux:5",
            time=T0 + 30 * MS,
            process__pid=100,
            network__transport="tcp",
            network__peer__address="127.0.0.1",
            network__peer__port=11434,
            evidence__attribution="sampled_process",
            evidence__causal=True,
        ),
        os_record(
            "file.change",
            "portable:6",
            time=T0 + 40 * MS,
            process__pid=None,
            file__path="/tmp/out.txt",
            file__change__type="created",
            evidence__attribution="session_observation",
        ),
        os_record(
            "collection.state",
            "linux:7",
            collection__name="network",
            collection__state="degraded",
            collection__reason="sampling",
        ),
    )
    return [Batch(spans=(tool, gw_chat)), Batch(spans=(agent, chat), logs=logs)]


def bridge() -> Observation:
    """A derived singleton bridge tool call -> process, as the correlator emits it: its entities
    carry typed facts and stable keys (the graph merges them into the nodes' ``facts``/``key``)."""
    trace, span = f"{1:032x}", f"{3:016x}"
    tool = Entity(
        kind=EntityKind.TOOL_CALL,
        id=f"tool_call:{trace}:{span}",
        facts=ToolCallFacts(
            tool="shell", call_id="call_1", agent="planner", trace_id=trace, span_id=span
        ),
        key=tool_call_key("planner", "shell") or "",
    )
    proc = Entity(
        kind=EntityKind.PROCESS,
        id=process_id(HOST, 200, 1_767_225_600_000),
        facts=ProcessFacts(
            host_id=HOST,
            pid=200,
            start_time_ms=1_767_225_600_000,
            executable_path="/usr/bin/python3",
            argv=("python3", "-c", "pass"),
        ),
        key=process_key("/usr/bin/python3", ("python3", "-c", "pass")) or "",
    )
    return Observation(
        id="correlate:1",
        time_unix_nano=T0 + 20 * MS,
        source=Source(channel=Channel.SEM, backend="correlate", record_id="correlate:1"),
        subject=tool,
        relation=RelationKind.CORRELATED_WITH_PROCESS,
        object=proc,
        evidence=Evidence(
            attribution=Attribution.HEURISTIC,
            inferred=True,
            causal=False,
            method="command_head",
            score=0.9,
            support=(f"{3:016x}#2", "linux:1#0"),
        ),
        occurrence="correlate:1",
        attrs={"time_delta_ms": 10},
    )


def scenario_graph(*, retain_support: bool = True) -> dict[str, Any]:
    """graph.json of the scenario."""
    normalizer = Normalizer()
    acc = GraphAccumulator(retain_support=retain_support, run={"id": "golden-run"})
    for batch in scenario_batches():
        out = normalizer(batch)
        acc.apply_many(out.observations)
        acc.apply_coverage(out.coverage)
    acc.apply_coverage(normalizer.drain())
    acc.apply(bridge())
    _ = OS_RESOURCE
    return acc.to_dict()
