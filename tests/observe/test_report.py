"""``report.md`` from a graph: rows per tool call, how each process is linked, what is not."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from otel_bridge.graph.document import Graph, GraphEdge, GraphNode
from otel_bridge.model import CommandFacts, EndpointFacts, ProcessFacts, ToolCallFacts
from otel_bridge.report import build, render
from otel_bridge.stamping import EARLIEST_TIME

H = "h1"


def _proc(pid: int, argv: list[str], exit_code: int | None, parent: int) -> GraphNode:
    facts = ProcessFacts(
        host_id=H,
        pid=pid,
        start_time_ms=pid,
        parent_pid=parent,
        argv=tuple(argv),
        exit_code=exit_code,
        executable_name=argv[0],
    )
    return GraphNode(id=f"process:{H}:{pid}:{pid}", kind="process", label=argv[0], facts=facts)


def _edge(source: str, relation: str, target: str, **kw: Any) -> GraphEdge:
    return GraphEdge(
        id=f"e-{source}-{relation}-{target}", source=source, target=target, relation=relation, **kw
    )


def _graph() -> Graph:
    agent = _proc(10, ["python", "agent.py"], 0, 1)
    shell = _proc(11, ["sh", "-c", "make | tee log"], 2, 10)
    make = _proc(12, ["make"], 2, 11)
    stray = _proc(13, ["curl", "http://example.test"], None, 10)
    call1 = GraphNode(
        id="tool_call:t:a",
        kind="tool_call",
        label="shell",
        facts=ToolCallFacts(tool="shell", call_id="c1", agent="bot", trace_id="t", span_id="a"),
        first_seen=100,
        last_seen=200,
    )
    call2 = GraphNode(
        id="tool_call:t:b",
        kind="tool_call",
        label="notes",
        facts=ToolCallFacts(tool="notes", call_id="c2", agent="bot", trace_id="t", span_id="b"),
        first_seen=300,
        last_seen=400,
    )
    cmd = GraphNode(
        id="command:t:a", kind="command", facts=CommandFacts(command="make | tee log", tool="shell")
    )
    out = GraphNode(id="file:/w/build.out", kind="file", label="/w/build.out")
    notes = GraphNode(id="file:/w/notes.md", kind="file", label="/w/notes.md")
    ep = GraphNode(id="endpoint:tcp:10.0.0.5:443", kind="endpoint", label="10.0.0.5:443")
    bot = GraphNode(id="agent:svc:bot", kind="agent", label="bot")
    edges = (
        _edge(bot.id, "correlated_with_process", agent.id, method="resource_pid", grade="C"),
        _edge(call1.id, "declared_command", cmd.id),
        _edge(
            cmd.id,
            "correlated_with_process",
            shell.id,
            method="singleton",
            inferred=True,
            grade="D",
        ),
        _edge(agent.id, "spawned", shell.id, grade="A"),
        _edge(shell.id, "spawned", make.id, grade="A"),
        _edge(agent.id, "spawned", stray.id, grade="A"),
        _edge(make.id, "wrote", out.id, grade="A"),
        _edge(make.id, "created", out.id, grade="A"),
        _edge(make.id, "connected_to", ep.id, grade="B"),
        _edge(agent.id, "wrote", notes.id, grade="A", first_seen=350),
    )
    nodes = (agent, shell, make, stray, call1, call2, cmd, out, notes, ep, bot)
    return Graph(nodes=nodes, edges=edges)


def test_rows_say_what_each_call_ran_and_how_it_is_linked() -> None:
    """A heuristic link is called a likely match; a descendant names its linked parent; the
    descendant's writes and connections are on its row; pipes in argv do not break the table."""
    text = render(build(_graph()), title="run", planes={"network": "degraded: scans"})
    row = next(line for line in text.splitlines() if "pid 11" in line)
    assert row.startswith("| shell (c1): `make \\| tee log` |")
    assert (
        "`sh -c make \\| tee log` | 2 | inferred (singleton): a likely match, not proof | D |"
        in row
    )
    child = next(line for line in text.splitlines() if "pid 12" in line)
    assert "its parent pid 11 is linked (fork record) | A |" in child
    assert "/w/build.out (created, wrote)" in child
    assert "10.0.0.5:443" in child
    assert "Agent process: pid 10 `python agent.py`" in text


def test_what_is_not_linked_is_said_plainly() -> None:
    """The call without a process, the agent's own write during it (as a time overlap only),
    the process no call is linked to, and the degraded plane are all listed."""
    report = build(_graph())
    # the agent's own changes are on its line (they are also said as an overlap below)
    assert report.agent_processes == ["pid 10 `python agent.py`; it changed /w/notes.md (wrote)"]
    text = render(report, title="run", planes={"network": "degraded: scans", "file": "available"})
    notes = text.split("## Not linked, and why", 1)[1]
    assert "notes (c2) declared no command; no process was linked to it" in notes
    assert "changed /w/notes.md (wrote) (same time only: not a link)" in notes
    assert "pid 13 `curl http://example.test` (exit not observed) ran, but no tool call" in notes
    assert "the network plane was degraded: scans; what it did not see is unknown" in notes
    assert "file plane" not in notes
    assert "pid 12" not in notes  # a descendant of a linked process is linked


def test_repeated_unlinked_processes_share_one_line() -> None:
    """125 unlinked ``true`` children with the same exit share one line with their count and
    first pids; a different exit code or argv keeps its own line, in time order."""
    base = _graph()
    trues = [replace(_proc(100 + i, ["true"], 0, 10), first_seen=1000 + i) for i in range(125)]
    failed = replace(_proc(400, ["true"], 1, 10), first_seen=2000)
    other = replace(_proc(401, ["false"], 1, 10), first_seen=2001)
    graph = Graph(nodes=(*base.nodes, *trues, failed, other), edges=base.edges)
    notes = build(graph).unlinked_processes
    assert notes == [
        "pid 13 `curl http://example.test` (exit not observed) ran, but no tool call is linked "
        "to it",
        "125 processes `true` (exit 0; pids 100, 101, 102 and 122 more) ran, but no tool call "
        "is linked to any of them",
        "pid 400 `true` (exit 1) ran, but no tool call is linked to it",
        "pid 401 `false` (exit 1) ran, but no tool call is linked to it",
    ]
    text = render(build(graph), title="run")
    assert text.count("ran, but no tool call") == 4


def test_an_overlap_without_stated_earliest_times_allows_the_pacing_period() -> None:
    """A record of a backend that stamps file events when it reads them (``linux``) that states
    no earliest time was read within its 20 ms pacing period (``otel_bridge/stamping.py``): a
    change stamped up to 20 ms after the call's end counts, and the sentence says 20 ms; later,
    or from a backend that stamps the event itself (``strace``), it does not count."""
    base = _graph()
    agent = "process:h1:10:10"
    late = [
        GraphNode(id=f"file:/w/{name}", kind="file", label=f"/w/{name}")
        for name in ("in.md", "out.md", "traced.md")
    ]
    edges = (
        *(e for e in base.edges if e.target != "file:/w/notes.md"),
        _edge(
            agent, "wrote", late[0].id, grade="A", first_seen=400 + 19_000_000, backends=("linux",)
        ),
        _edge(
            agent, "wrote", late[1].id, grade="A", first_seen=400 + 21_000_000, backends=("linux",)
        ),
        _edge(agent, "wrote", late[2].id, grade="A", first_seen=401, backends=("strace",)),
    )
    notes = build(Graph(nodes=(*base.nodes, *late), edges=edges)).unlinked_calls
    assert notes == [
        "notes (c2) declared no command; no process was linked to it: with no command there is "
        "nothing to match a process against, and no process carried its trace context: it ran "
        "inside the agent's own process, or its processes did not carry it. While it ran or "
        "within 19 ms after it ended (the file plane stamps a change when it reads it, here up "
        "to 20 ms after the change), the agent's process changed /w/in.md (wrote) (same time "
        "only: not a link)"
    ]


def test_an_overlap_uses_each_records_stated_earliest_time() -> None:
    """A ``linux`` record stamped 64 ms after the call's end whose earliest time is before the
    end counts: the sentence says how long after the end it was stamped and the widest
    lateness its records state (rounded up); one whose earliest time is after the end does not,
    however close its stamp."""
    base = _graph()
    agent = "process:h1:10:10"
    files = [
        GraphNode(id=f"file:/w/{name}", kind="file", label=f"/w/{name}")
        for name in ("late.md", "after.md")
    ]
    edges = (
        *(e for e in base.edges if e.target != "file:/w/notes.md"),
        _edge(
            agent,
            "wrote",
            files[0].id,
            grade="A",
            first_seen=400 + 64_000_000,
            backends=("linux",),
            attrs={EARLIEST_TIME: 400 - 1_234_567},
        ),
        _edge(
            agent,
            "wrote",
            files[1].id,
            grade="A",
            first_seen=400 + 2_000_000,
            backends=("linux",),
            attrs={EARLIEST_TIME: 401},
        ),
    )
    notes = build(Graph(nodes=(*base.nodes, *files), edges=edges)).unlinked_calls
    assert notes == [
        "notes (c2) declared no command; no process was linked to it: with no command there is "
        "nothing to match a process against, and no process carried its trace context: it ran "
        "inside the agent's own process, or its processes did not carry it. While it ran or "
        "within 64 ms after it ended (the file plane stamps a change when it reads it, here up "
        "to 65.3 ms after the change), the agent's process changed /w/late.md (wrote) (same "
        "time only: not a link)"
    ]


def _wrapped(shell_argv: list[str], *links: tuple[str, str, bool]) -> str:
    """report.md of a call declaring ``sleep 0.3`` whose shell (pid 21, ``shell_argv``) forked
    ``sleep 0.3`` (pid 22); ``links``: (process id, method, inferred) from the call."""
    shell = _proc(21, shell_argv, 0, 10)
    sleep = _proc(22, ["sleep", "0.3"], 0, 21)
    call = GraphNode(
        id="tool_call:t:c",
        kind="tool_call",
        label="run",
        facts=ToolCallFacts(tool="run", call_id="c3", agent="bot", trace_id="t", span_id="c"),
    )
    cmd = GraphNode(id="command:t:c", kind="command", facts=CommandFacts(command="sleep 0.3"))
    edges = [
        _edge(call.id, "declared_command", cmd.id),
        _edge(shell.id, "spawned", sleep.id, grade="A"),
        *(
            _edge(
                call.id,
                "correlated_with_process",
                target,
                method=method,
                inferred=inferred,
                grade="D" if inferred else "C",
            )
            for target, method, inferred in links
        ),
    ]
    return render(build(Graph(nodes=(shell, sleep, call, cmd), edges=tuple(edges))), title="r")


def test_a_shell_linked_itself_is_said_by_its_own_link_and_its_child_is_listed_once() -> None:
    """Both exactly linked (TRACEPARENT, C): the shell's row is its own link, not one through
    its child; its child is shown once, by its own link."""
    sleep_first = [
        ("process:h1:22:22", "traceparent", False),
        ("process:h1:21:21", "traceparent", False),
    ]
    for links in (sleep_first, sleep_first[::-1]):
        text = _wrapped(["/bin/sh", "-c", "sleep 0.3"], *links)
        rows = [r for r in text.splitlines() if r.startswith("| ") and "pid 2" in r]
        assert len(rows) == 2, text
        shell = next(r for r in rows if "pid 21" in r)
        assert "it inherited the call's trace context (TRACEPARENT) | C |" in shell, text
        assert "fork record" not in shell


def test_only_the_shell_running_exactly_the_declared_command_is_shown_with_the_call() -> None:
    """``sh -c 'sleep 0.3; true'`` ran more than the call declared: it stays unlinked."""
    inferred = ("process:h1:22:22", "singleton", True)
    text = _wrapped(["sh", "-c", "sleep 0.3; true"], inferred)
    assert "ran, but no tool call is linked to it" in text.split("## Not linked", 1)[1]
    text = _wrapped(["bash", "-c", "sleep 0.3"], inferred)
    shell = next(r for r in text.splitlines() if "pid 21" in r)
    assert "its argv is `bash -c` with the call's declared command, and it is the parent " in shell
    assert "whose link is inferred: a likely match, not proof | D |" in shell


def _pidless_model_graph(local_port: bool) -> Graph:
    """An openai-v2 style run: one model, no agent node, no sender found for its spans; the
    agent's process attempted its connections (strace's pending connect), with or without
    their local end."""
    agent = _proc(10, ["python", "agent.py"], 0, 1)
    model = GraphNode(
        id="model:openai:m",
        kind="model",
        label="m",
        attrs={"correlate.sender": "no_connection"},
    )
    otlp = GraphNode(id="endpoint:tcp:127.0.0.1:4317", kind="endpoint", label="127.0.0.1:4317")
    attrs = {"network.local.address": "127.0.0.1", "network.local.port": 5} if local_port else {}
    edge = _edge(agent.id, "attempted_connect", otlp.id, grade="A", attrs=attrs)
    return Graph(nodes=(agent, model, otlp), edges=(edge,))


def test_a_model_without_a_sender_says_why() -> None:
    """No agent span (an instrumented client's chat spans only) and no sender: the model's
    calls are said to be linked to no process, with the host plane's reason when its
    connection records lack the sender's end."""
    text = render(build(_pidless_model_graph(local_port=False)), title="t")
    assert "- the model calls to `m` are linked to no process" in text, text
    assert "recorded connections without the sender's end (its local port)" in text, text
    text = render(build(_pidless_model_graph(local_port=True)), title="t")
    assert "- the model calls to `m` are linked to no process" in text, text
    assert "saw no followed process hold the connection the spans came over" in text, text


def _sender_listening_on(transport: str) -> str:
    """The report of an agent linked only as the sender of its spans, whose process was bound
    to port 4318 over ``transport``."""
    sender = _proc(20, ["python", "agent.py"], 0, 1)
    bot = GraphNode(id="agent:svc:bot", kind="agent", label="bot")
    port = GraphNode(
        id=f"endpoint:{transport}:127.0.0.1:4318",
        kind="endpoint",
        label="127.0.0.1:4318",
        facts=EndpointFacts(transport=transport, address="127.0.0.1", port=4318),
    )
    edges = (
        _edge(bot.id, "correlated_with_process", sender.id, method="transport_peer", grade="C"),
        _edge(sender.id, "listened_on", port.id, grade="B"),
    )
    return render(build(Graph(nodes=(sender, bot, port), edges=edges)), title="r")


def test_only_a_tcp_listener_makes_a_sender_a_possible_relay() -> None:
    """A relay (a local OpenTelemetry Collector) receives spans over TCP; a UDP port the sender
    was bound to (found held at a strace attach) is no sign of one."""
    assert "it may be a relay" in _sender_listening_on("tcp")
    assert "it may be a relay" not in _sender_listening_on("udp")


def test_a_run_with_no_tool_call_spans_points_to_the_review() -> None:
    """No tool call spans is not "the agent reported no tool calls": a coding agent that exports
    only log events (Claude Code, Codex) reported its calls there, and the review reads them."""
    text = render(build(Graph(nodes=(), edges=())), title="t", planes={})
    assert "No tool call spans arrived" in text
    assert "are read by the review" in text
    assert "reported no tool calls" not in text
