"""A process that carried the agent's trace context, not a tool call's, is not the agent's own
process: the graph links it to the agent (``traceparent``) because it inherited the context of
the agent's span (a runtime helper such as Python's ``platform`` running ``uname -p`` while the
agent span was current). The review places it as a process run on the agent's behalf, and
report.md does not name it as the agent's process."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from review_support import HOST, RunBuilder, Session

from otel_bridge.graph.document import Graph, GraphNode
from otel_bridge.model import ProcessFacts, Resource
from otel_bridge.report import build, render
from otel_bridge.review import build_review, validate_review

T1 = "11" * 16
T2 = "22" * 16
PLANES = {"file": "available", "process": "available", "network": "available"}


def _session(trace: str = T1) -> Session:
    return Session(trace=trace, task="Run it.", answer="Done.", commands=[(["true"], 0, [], [])])


def _context_process(
    builder: RunBuilder, agent: str, *, spawned: bool, n: int = 900, trace: str | None = None
) -> str:
    """A process ``uname -p`` linked to ``agent`` only because it carried the agent span's
    context (of ``trace``, when the link says); spawned by the agent's process when
    ``spawned``."""
    pid = f"process:{HOST}:{n}:{n}"
    facts = ProcessFacts(host_id=HOST, pid=n, argv=("uname", "-p"), exit_code=0, cwd="/w")
    start = builder.tick()
    builder.nodes[pid] = GraphNode(
        id=pid, kind="process", label="uname", facts=facts, first_seen=start, last_seen=start
    )
    builder.link(agent, pid, "traceparent", trace)
    if spawned:
        builder.edge(builder.agent_process(agent), "spawned", pid, causal=True, grade="A")
    return pid


def _processes(doc: dict[str, Any], pid: str) -> list[dict[str, Any]]:
    return [n for n in doc["evidence"] if n["id"] == pid]


def _side_effects(doc: dict[str, Any]) -> list[str]:
    return [f["message"] for f in doc["findings"] if f["kind"] == "unreported_side_effect"]


def test_a_child_that_carried_the_agent_context_is_an_undeclared_child(tmp_path: Path) -> None:
    """Spawned by the agent process outside every tool call: ``undeclared`` (``agent_child``),
    an unreported side effect, and not a second agent process."""
    builder = RunBuilder()
    builder.add(_session(), first_span=1000)
    agent = f"agent:agent-svc:{T1[:4]}"
    pid = _context_process(builder, agent, spawned=True)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    validate_review(doc)
    (proc,) = _processes(doc, pid)
    assert (proc["role"], proc["rule"]) == ("undeclared", "agent_child")
    roles = [n["role"] for n in doc["evidence"] if n["type"] == "process_run"]
    assert roles.count("agent") == 1  # the agent's own process only
    assert _side_effects(doc) == ["the agent process ran 'uname -p' outside every tool call"]


def test_a_process_no_agent_process_spawned_is_undeclared_by_context(tmp_path: Path) -> None:
    """Not spawned by an observed agent process (its fork was not seen, or another process
    started it): the context still makes it this session's, ``undeclared`` (``agent_context``)."""
    builder = RunBuilder()
    builder.add(_session(), first_span=1000)
    agent = f"agent:agent-svc:{T1[:4]}"
    builder.agent_process(agent)
    pid = _context_process(builder, agent, spawned=False)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    validate_review(doc)
    (proc,) = _processes(doc, pid)
    assert (proc["role"], proc["rule"]) == ("undeclared", "agent_context")
    assert _side_effects(doc) == [
        "'uname -p' ran with the agent's trace context, not a tool call's"
    ]


@pytest.mark.parametrize("trace", [None, T2])
def test_the_context_of_an_agent_two_sessions_share(tmp_path: Path, trace: str | None) -> None:
    """Two sessions of one agent node (the same service and name): a link that names the trace
    the process carried makes it that session's; one that names none says which agent, not
    which session's span: ``ambiguous`` in both, no finding in either."""
    builder = RunBuilder()
    builder.add(_session(T1), first_span=1000)
    builder.add(_session(T2), first_span=2000)
    agent = f"agent:agent-svc:{T1[:4]}"
    other = f"agent:agent-svc:{T2[:4]}"
    pid = _context_process(builder, agent, spawned=False, trace=trace)
    # the second session's agent is the same node: its invocations name the first's agent id
    builder.edges = [
        dataclasses.replace(e, source=agent) if e.source == other else e for e in builder.edges
    ]
    del builder.nodes[other]
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    validate_review(doc)
    found = _processes(doc, pid)
    if trace is not None:
        assert [(p["session"], p["role"], p["rule"]) for p in found] == [
            (f"session:{T2}", "undeclared", "agent_context")
        ]
        return
    assert sorted((p["session"], p["role"], p["rule"]) for p in found) == [
        (f"session:{T1}", "ambiguous", "agent_context_ambiguous"),
        (f"session:{T2}", "ambiguous", "agent_context_ambiguous"),
    ]
    assert _side_effects(doc) == []


def test_report_does_not_call_a_context_process_the_agents(tmp_path: Path) -> None:
    """report.md's agent line names the agent's own process only; the context process is
    listed as linked to no tool call, with why."""
    builder = RunBuilder()
    builder.add(_session(), first_span=1000)
    agent = f"agent:agent-svc:{T1[:4]}"
    _context_process(builder, agent, spawned=True)
    run = builder.write(tmp_path / "run")
    graph = Graph.from_dict(json.loads((run / "graph.json").read_text()))
    text = render(build(graph), title="t", planes=PLANES)
    agent_line = next(line for line in text.splitlines() if line.startswith("Agent process"))
    assert "uname" not in agent_line
    assert (
        "pid 900 `uname -p` (exit 0) ran, but no tool call is linked to it: it carried the "
        "agent's trace context (TRACEPARENT), not a tool call's"
    ) in text


def _two_instances(tmp_path: Path, *, state_pids: bool) -> dict[str, Any]:
    """Two sessions of one agent node (the same service and name) run by two processes; each
    session's spans state their process's pid when ``state_pids``."""
    builder = RunBuilder()
    agent = f"agent:agent-svc:{T1[:4]}"
    other = f"agent:agent-svc:{T2[:4]}"
    for trace, pid, first in ((T1, 101, 1000), (T2, 202, 2000)):
        attrs: dict[str, Any] = {"service.name": "agent-svc"}
        if state_pids:
            attrs |= {"process.pid": pid, "host.id": HOST}
        builder.resource = Resource(attributes=attrs)
        builder.add(_session(trace), first_span=first)
        node = f"process:{HOST}:{pid}:{pid}"
        facts = ProcessFacts(host_id=HOST, pid=pid, argv=("agent", str(pid)), cwd="/w")
        builder.nodes[node] = GraphNode(id=node, kind="process", label=f"agent {pid}", facts=facts)
        builder.link(agent, node, "resource_pid")
    builder.edges = [
        dataclasses.replace(e, source=agent) if e.source == other else e for e in builder.edges
    ]
    del builder.nodes[other]
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    validate_review(doc)
    return doc


def _agent_processes(doc: dict[str, Any]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for n in doc["evidence"]:
        if n["type"] == "process_run" and n["role"] == "agent":
            found.setdefault(n["session"], []).append(n["label"])
    return found


def test_two_instances_of_one_agent_each_keep_their_own_process(tmp_path: Path) -> None:
    """Each session's spans name the pid that emitted them: a session's agent process is its
    own instance's, not every process the shared agent node is linked to."""
    doc = _two_instances(tmp_path, state_pids=True)
    assert _agent_processes(doc) == {
        f"session:{T1}": ["agent 101"],
        f"session:{T2}": ["agent 202"],
    }


def test_instances_the_spans_do_not_name_stay_the_agents(tmp_path: Path) -> None:
    """Spans that state no pid cannot say which instance sent them: every linked process stays
    the session's agent process (shared, so their effects follow the sharing rules)."""
    doc = _two_instances(tmp_path, state_pids=False)
    assert {s: sorted(p) for s, p in _agent_processes(doc).items()} == {
        f"session:{T1}": ["agent 101", "agent 202"],
        f"session:{T2}": ["agent 101", "agent 202"],
    }


def test_report_says_an_agent_linked_only_by_context_has_no_process(tmp_path: Path) -> None:
    """An agent whose only link is a process that carried its context: its own process is
    unknown, and report.md says so."""
    builder = RunBuilder()
    builder.add(_session(), first_span=1000)
    _context_process(builder, f"agent:agent-svc:{T1[:4]}", spawned=False)
    run = builder.write(tmp_path / "run")
    graph = Graph.from_dict(json.loads((run / "graph.json").read_text()))
    text = render(build(graph), title="t", planes=PLANES)
    assert f"agent `agent:agent-svc:{T1[:4]}` is linked to no process" in text
    assert "Agent process" not in text
