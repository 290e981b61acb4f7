"""Which session a process belongs to when the graph says which trace it carried, which pids
the agent's spans state, or that a tool call ran it: the evidence decides, not a time window of
another session, and nothing is dropped (each case failed before its fix)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from review_support import HOST, RunBuilder

from otel_bridge.graph.document import GraphNode
from otel_bridge.model import EndpointFacts, ProcessFacts, Resource, Span, SpanKind, ToolCallFacts
from otel_bridge.review import build_review, validate_review

T1 = "11" * 16
T2 = "22" * 16
MS = 1_000_000
BASE = 1_000_000_000


def _span(
    b: RunBuilder,
    trace: str,
    n: int,
    name: str,
    attrs: dict[str, Any],
    *,
    parent: int,
    window: tuple[int, int],
    resource: Resource | None = None,
) -> Span:
    span = Span(
        resource=resource or b.resource,
        scope=b.scope,
        trace_id=bytes.fromhex(trace),
        span_id=n.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        kind=SpanKind.INTERNAL,
        start_time_unix_nano=BASE + window[0] * MS,
        end_time_unix_nano=BASE + window[1] * MS,
        attributes=attrs,
    )
    b.spans.append(span)
    return span


def _session(
    b: RunBuilder,
    trace: str,
    agent: str,
    window: tuple[int, int],
    tools: list[tuple[int, int, list[str]]],
    *,
    resource: Resource | None = None,
) -> list[str]:
    """An agent span over ``window`` (ms) with a tool call span per ``tools`` entry, each
    invoked by ``agent``; the tool call node ids."""
    _span(
        b,
        trace,
        1,
        "invoke_agent a",
        {"gen_ai.operation.name": "invoke_agent"},
        parent=0,
        window=window,
        resource=resource,
    )
    b.nodes.setdefault(agent, GraphNode(id=agent, kind="agent", label=agent))
    out = []
    for i, (start, end, argv) in enumerate(tools):
        call = f"c{trace[:2]}_{i}"
        attrs = b.command_attrs(call, argv, "ok")
        span = _span(
            b,
            trace,
            2 + i,
            "execute_tool run_command",
            attrs,
            parent=1,
            window=(start, end),
            resource=resource,
        )
        tool = f"tool_call:{trace}:{span.span_id.hex()}"
        facts = ToolCallFacts(tool="run_command", call_id=call, trace_id=trace)
        b.nodes[tool] = GraphNode(id=tool, kind="tool_call", label="run_command", facts=facts)
        b.edge(agent, "invoked", tool, attribution=("reported",), grade="U")
        out.append(tool)
    return out


def _process(b: RunBuilder, n: int, argv: list[str], window: tuple[int, int]) -> str:
    pid = f"process:{HOST}:{n}:{n}"
    facts = ProcessFacts(host_id=HOST, pid=n, argv=tuple(argv), exit_code=0, cwd="/w")
    b.nodes[pid] = GraphNode(
        id=pid,
        kind="process",
        label=argv[0],
        facts=facts,
        first_seen=BASE + window[0] * MS,
        last_seen=BASE + window[1] * MS,
    )
    return pid


def _review(b: RunBuilder, path: Path) -> dict[str, Any]:
    doc, _ = build_review(str(b.write(path)))
    validate_review(doc)
    return doc


def _procs(doc: dict[str, Any], label: str) -> list[tuple[str, str, str | None]]:
    return sorted(
        (n["session"][-8:], n["role"], n.get("rule"))
        for n in doc["evidence"]
        if n["type"] == "process_run" and n["label"] == label
    )


def test_the_observe_root_spans_pid_does_not_hide_the_agent_process(tmp_path: Path) -> None:
    """The agent's spans state no pid; ``otel-bridge observe``'s root span in the same trace
    does: the agent process (found by the connection its spans came over) stays the agent's,
    and so do its writes."""
    b = RunBuilder()
    root = Resource(attributes={"service.name": "otel-bridge", "process.pid": 555, "host.id": HOST})
    _span(b, T1, 99, "otel-bridge observe", {}, parent=0, window=(10, 900), resource=root)
    agent = "agent:agent-svc:a"
    _session(b, T1, agent, (100, 500), [(200, 300, ["true"])])
    proc = _process(b, 1, ["python", "agent.py"], (50, 600))
    b.link(agent, proc, "transport_peer")
    b.edge(proc, "wrote", b.file("/w/notes.txt"), at=BASE + 450 * MS, causal=True, grade="A")
    doc = _review(b, tmp_path / "run")
    assert _procs(doc, "python") == [("11111111", "agent", None)]
    assert "/w/notes.txt" in {n.get("path") for n in doc["evidence"] if n["type"] == "artifact"}


def test_a_pid_stated_as_text_narrows_like_a_number(tmp_path: Path) -> None:
    b = RunBuilder()
    agent = "agent:agent-svc:a"
    stated = Resource(attributes={"service.name": "agent-svc", "process.pid": "2", "host.id": HOST})
    _session(b, T1, agent, (100, 500), [(200, 300, ["true"])], resource=stated)
    for n in (1, 2):
        b.link(agent, _process(b, n, ["python", f"agent{n}.py"], (50, 600)), "resource_pid")
    doc = _review(b, tmp_path / "run")
    assert [n["argv"] for n in doc["evidence"] if n.get("role") == "agent"] == [
        ["python", "agent2.py"]
    ]


def test_a_context_names_its_session_even_one_that_lists_no_agent(tmp_path: Path) -> None:
    """T2 is a chat-only turn of the agent (no tool call, so no agent is listed for it); a
    process that carried T2's context is T2's, not dropped."""
    b = RunBuilder()
    agent = "agent:agent-svc:a"
    _session(b, T1, agent, (100, 300), [(150, 200, ["true"])])
    chat = b.chat_attrs([], [{"role": "assistant", "parts": [{"type": "text", "content": "Ok."}]}])
    _span(
        b,
        T2,
        1,
        "invoke_agent a",
        {"gen_ai.operation.name": "invoke_agent"},
        parent=0,
        window=(400, 600),
    )
    _span(b, T2, 2, "chat m", chat, parent=1, window=(410, 500))
    b.link(agent, _process(b, 1, ["python", "agent.py"], (50, 700)), "resource_pid")
    make = _process(b, 900, ["make", "build"], (450, 480))
    b.link(agent, make, "traceparent", T2)
    doc = _review(b, tmp_path / "run")
    assert _procs(doc, "make") == [("22222222", "undeclared", "agent_context")]


def test_a_context_wins_over_another_sessions_window(tmp_path: Path) -> None:
    """One agent process serves T1 and T2 at once; ``git push``, which it spawned while a T2
    tool call ran, carried T1's context: T1's (outside T1's calls: undeclared), not T2's call."""
    b = RunBuilder()
    agent = "agent:agent-svc:server"
    _session(b, T1, agent, (100, 400), [(110, 120, ["true"])])
    _session(b, T2, agent, (150, 450), [(190, 260, ["sleep", "1"])])
    server = _process(b, 1, ["python", "server.py"], (50, 500))
    b.link(agent, server, "resource_pid")
    git = _process(b, 900, ["git", "push"], (200, 210))
    b.edge(server, "spawned", git, at=BASE + 200 * MS, causal=True, grade="A")
    b.link(agent, git, "traceparent", T1)
    doc = _review(b, tmp_path / "run")
    assert _procs(doc, "git") == [("11111111", "undeclared", "agent_child")]


def test_a_sub_agent_process_a_tool_call_ran_stays_the_calls(tmp_path: Path) -> None:
    """A sub-agent (its own process, its agent span a child of the orchestrator's tool call,
    joined to the session by that ``child_of``) is that call's process, linked exactly: its
    write and connection stay the call's, not become the agent process's."""
    b = RunBuilder()
    orchestrator, coder = "agent:svc-a:orchestrator", "agent:svc-b:coder"
    (tool,) = _session(b, T1, orchestrator, (100, 600), [(110, 500, ["coder", "--task", "fix"])])
    sub = Resource(attributes={"service.name": "svc-b", "process.pid": 77, "host.id": HOST})
    _span(
        b,
        T1,
        50,
        "invoke_agent coder",
        {"gen_ai.operation.name": "invoke_agent"},
        parent=2,
        window=(130, 480),
        resource=sub,
    )
    b.nodes[coder] = GraphNode(id=coder, kind="agent", label=coder)
    b.edge(coder, "child_of", tool, grade="U")
    parent = _process(b, 1, ["python", "orchestrator.py"], (50, 700))
    b.link(orchestrator, parent, "resource_pid")
    worker = _process(b, 77, ["coder", "--task", "fix"], (120, 490))
    b.edge(parent, "spawned", worker, at=BASE + 120 * MS, causal=True, grade="A")
    b.link(tool, worker, "traceparent", T1)
    b.link(coder, worker, "resource_pid")
    b.edge(worker, "wrote", b.file("/w/src.py"), at=BASE + 300 * MS, causal=True, grade="A")
    endpoint = "endpoint:tcp:93.184.216.34:443"
    facts = EndpointFacts(address="93.184.216.34", port=443, transport="tcp")
    b.nodes[endpoint] = GraphNode(
        id=endpoint, kind="endpoint", label="93.184.216.34:443", facts=facts
    )
    b.edge(worker, "connected_to", endpoint, at=BASE + 310 * MS, causal=True, grade="A")
    doc = _review(b, tmp_path / "run")
    assert _procs(doc, "coder") == [("11111111", "tool", None)]
    produces = [e for e in doc["edges"] if e["relation"] == "produces"]
    assert [(e["target"], e["method"]) for e in produces] == [("file:/w/src.py", "observed")]
    assert "93.184.216.34:443" in {n["label"] for n in doc["evidence"] if n["type"] == "artifact"}


def test_the_plain_json_reader_keeps_the_context_trace(tmp_path: Path) -> None:
    """A graph whose edges keep no support (``retain_support: false``) is read by the plain
    JSON reader: it must give the same placement as the typed reader."""
    b = RunBuilder()
    agent = "agent:agent-svc:a"
    _session(b, T1, agent, (100, 300), [(150, 200, ["true"])])
    _session(b, T2, agent, (400, 600), [(450, 500, ["true"])])
    uname = _process(b, 900, ["uname", "-p"], (700, 710))
    b.link(agent, uname, "traceparent", T2)
    typed = _review(b, tmp_path / "typed")
    graph = tmp_path / "typed" / "graph.json"
    doc = orjson.loads(graph.read_bytes())
    for edge in doc["edges"]:
        edge["support"] = None
    graph.write_bytes(orjson.dumps(doc))
    plain, _ = build_review(str(tmp_path / "typed"))
    assert (
        _procs(plain, "uname")
        == _procs(typed, "uname")
        == [("22222222", "undeclared", "agent_context")]
    )


def _shared_server(b: RunBuilder) -> tuple[str, str]:
    """T1 and T2 of one agent node, one agent process serving both; (agent, that process)."""
    agent = "agent:agent-svc:server"
    _session(b, T1, agent, (100, 400), [(110, 120, ["true"])])
    _session(b, T2, agent, (500, 800), [(510, 520, ["true"])])
    server = _process(b, 1, ["python", "server.py"], (50, 900))
    b.link(agent, server, "resource_pid")
    return agent, server


def test_a_grandchild_that_carried_another_trace_is_that_sessions_only(tmp_path: Path) -> None:
    """T1's helper (no context) starts ``gchild``, which carried T2's context: ``gchild`` is
    T2's, not also T1's with its helper's subtree."""
    b = RunBuilder()
    agent, server = _shared_server(b)
    helper = _process(b, 900, ["helper"], (200, 210))
    b.edge(server, "spawned", helper, at=BASE + 200 * MS, causal=True, grade="A")
    gchild = _process(b, 901, ["gchild"], (205, 206))
    b.edge(helper, "spawned", gchild, at=BASE + 205 * MS, causal=True, grade="A")
    b.link(agent, gchild, "traceparent", T2)
    doc = _review(b, tmp_path / "run")
    assert _procs(doc, "helper") == [("11111111", "undeclared", "session_window")]
    assert _procs(doc, "gchild") == [("22222222", "undeclared", "agent_context")]


def test_a_context_of_no_session_falls_back_to_the_windows(tmp_path: Path) -> None:
    """A link naming a trace the review has no session for (its spans were lost) says nothing
    about the session: the child is placed by the windows, not dropped."""
    b = RunBuilder()
    agent, server = _shared_server(b)
    lost = _process(b, 900, ["lost"], (450, 460))
    b.edge(server, "spawned", lost, at=BASE + 450 * MS, causal=True, grade="A")
    b.link(agent, lost, "traceparent", "33" * 16)
    doc = _review(b, tmp_path / "run")
    assert [(s, role) for s, role, _ in _procs(doc, "lost")] == [
        ("11111111", "ambiguous"),
        ("22222222", "ambiguous"),
    ]


def test_the_contexts_of_two_sessions_make_a_process_neither(tmp_path: Path) -> None:
    b = RunBuilder()
    agent, _ = _shared_server(b)
    both = _process(b, 900, ["both"], (300, 310))
    b.link(agent, both, "traceparent", T1)
    b.link(agent, both, "traceparent", T2)
    doc = _review(b, tmp_path / "run")
    assert _procs(doc, "both") == [
        ("11111111", "ambiguous", "agent_context_ambiguous"),
        ("22222222", "ambiguous", "agent_context_ambiguous"),
    ]


def test_a_session_whose_pid_was_not_seen_does_not_take_another_instances(
    tmp_path: Path,
) -> None:
    """T1's spans state pid 1, never observed; T2's state pid 2: T1's agent processes are the
    node's processes no other session states (pid 3), not T2's."""
    b = RunBuilder()
    agent = "agent:agent-svc:a"
    for trace, pid, window in ((T1, 1, (100, 400)), (T2, 2, (500, 800))):
        stated = Resource(attributes={"service.name": "agent-svc", "process.pid": pid})
        _session(
            b, trace, agent, window, [(window[0] + 10, window[0] + 20, ["true"])], resource=stated
        )
    for n in (2, 3):
        b.link(agent, _process(b, n, ["python", f"agent{n}.py"], (50, 900)), "resource_pid")
    doc = _review(b, tmp_path / "run")
    agents = sorted(
        (n["session"][-8:], n["argv"][1]) for n in doc["evidence"] if n.get("role") == "agent"
    )
    assert agents == [("11111111", "agent3.py"), ("22222222", "agent2.py")]
