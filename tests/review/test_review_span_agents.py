"""A session's agent found through the graph's ``child_of`` edges when no ``invoked`` edge names
it: LangGraph's OpenInference spans put a tool call under a ``tools`` chain, beside the ``agent``
step, so the agent never invokes it. Without the agent, the review knew no agent process: the
agent's in-process writes were missing and the session said "agent unknown"."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from review_support import RunBuilder, Session

from otel_bridge.graph.document import GraphNode
from otel_bridge.review import build_review, validate_review

T1 = "11" * 16


def _langgraph_shaped(tmp_path: Path, *, joined: bool) -> dict[str, Any]:
    """One session whose tool call is a child of a chain node; the agent is a child of the
    same chain when ``joined`` (as LangGraph's graph run holds both), else unconnected."""
    session = Session(
        trace=T1,
        task="Write notes.txt.",
        answer="I wrote notes.txt.",
        commands=[(["true"], 0, [], [])],
        in_process={0: ["/w/notes.txt"]},
    )
    builder = RunBuilder()
    builder.add(session, first_span=1000)
    agent = f"agent:agent-svc:{T1[:4]}"
    builder.agent_process(agent)
    tool = next(n for n in builder.nodes if n.startswith("tool_call:"))
    root = next(s for s in builder.spans if s.name.startswith("invoke_agent"))
    chain = f"chain:{T1}:{root.span_id.hex()}"
    builder.nodes[chain] = GraphNode(id=chain, kind="chain", label="LangGraph")
    builder.edges = [
        dataclasses.replace(e, relation="child_of", source=tool, target=chain)
        if e.relation == "invoked"
        else e
        for e in builder.edges
    ]
    if joined:
        builder.edge(agent, "child_of", chain, grade="U")
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    validate_review(doc)
    return doc


def test_the_agent_beside_the_tool_calls_is_the_sessions(tmp_path: Path) -> None:
    doc = _langgraph_shaped(tmp_path, joined=True)
    (session,) = doc["sessions"]
    assert session["agents"] == [f"agent:agent-svc:{T1[:4]}"]
    roles = {n["label"]: n["role"] for n in doc["evidence"] if n["type"] == "process_run"}
    assert roles["agent"] == "agent"
    # the agent process's write inside the call's window is the call's, by time (grade D)
    produces = [e for e in doc["edges"] if e["relation"] == "produces"]
    assert {(e["method"], e["grade"]) for e in produces} >= {("rule:tool_window", "D")}


def test_an_agent_the_graph_does_not_join_stays_unknown(tmp_path: Path) -> None:
    """No edge between the agent and the session's span nodes: no agent is guessed."""
    doc = _langgraph_shaped(tmp_path, joined=False)
    (session,) = doc["sessions"]
    assert session["agents"] == []
    assert not [n for n in doc["evidence"] if n["type"] == "process_run" and n["role"] == "agent"]
