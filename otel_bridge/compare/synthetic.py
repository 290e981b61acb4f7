"""Synthetic runs for tests and benchmarks: graph documents shaped as ``observe`` writes them.

:func:`graph_document` builds the nodes and edges ``compare`` reads (tool-call nodes with typed
facts and stable keys, one process per call linked by ``correlated_with_process``, files it
``opened``/``wrote`` with times) for a list of :class:`Step`; :func:`synthetic_run` turns it into a
:class:`~otel_bridge.compare.inputs.RunData` through the same :func:`extract_run` real runs use.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .inputs import RunData, ToolIO, extract_run

AGENT = "synthetic-agent"
STEP_NS = 1_000_000
"""Each step starts 1 ms after the previous one; reads happen early in a step, writes late."""


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call: its tool, arguments and result, and the files its process reads/writes."""

    tool: str
    arguments: Any = None
    result: Any = None
    reads: Sequence[str] = ()
    writes: Sequence[str] = ()


def _file_node(path: str) -> dict[str, Any]:
    return {
        "id": f"file:{path}",
        "kind": "file",
        "key": f"file:{path}",
        "facts": {"type": "file", "path": path},
    }


def _edge(source: str, relation: str, target: str, time: int) -> dict[str, Any]:
    return {
        "source": source,
        "relation": relation,
        "target": target,
        "first_seen": time,
        "last_seen": time,
    }


def graph_document(
    run_id: str, steps: Sequence[Step]
) -> tuple[dict[str, Any], dict[tuple[str, str], ToolIO]]:
    """The graph document and the span data (arguments, results) of a synthetic run."""
    trace = hashlib.blake2b(run_id.encode(), digest_size=16).hexdigest()
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []
    io: dict[tuple[str, str], ToolIO] = {}
    for i, step in enumerate(steps):
        start = (i + 1) * STEP_NS
        span = f"{i + 1:016x}"
        call = f"tool_call:{trace}:{span}"
        process = f"process:synthetic:{i + 1}:{start // 1_000_000}"
        nodes[call] = {
            "id": call,
            "kind": "tool_call",
            "key": f"tool_call:{AGENT}:{step.tool}",
            "first_seen": start,
            "last_seen": start + STEP_NS // 2,
            "facts": {
                "type": "tool_call",
                "tool": step.tool,
                "call_id": f"call_{i + 1}",
                "agent": AGENT,
                "trace_id": trace,
                "span_id": span,
            },
        }
        nodes[process] = {
            "id": process,
            "kind": "process",
            "key": f"process:/usr/bin/{step.tool}:{step.tool}",
            "facts": None,
        }
        edges.append(_edge(call, "correlated_with_process", process, start))
        for path in step.reads:
            nodes.setdefault(f"file:{path}", _file_node(path))
            edges.append(_edge(process, "opened", f"file:{path}", start + 100))
        for path in step.writes:
            nodes.setdefault(f"file:{path}", _file_node(path))
            edges.append(_edge(process, "wrote", f"file:{path}", start + 400))
        io[(trace, span)] = ToolIO(arguments=step.arguments, result=step.result)
    return {"nodes": list(nodes.values()), "edges": edges}, io


def synthetic_run(run_id: str, steps: Sequence[Step], score: float | None = None) -> RunData:
    """A :class:`RunData` for ``steps``, with ``score`` as its outcome score."""
    graph, io = graph_document(run_id, steps)
    metrics = {
        "score": score,
        "score_source": "attribute" if score is not None else None,
        "tokens": {"input": None, "output": None},
        "cost": None,
        "review_findings": None,
    }
    return extract_run(run_id, f"synthetic/{run_id}", graph, io, metrics)
