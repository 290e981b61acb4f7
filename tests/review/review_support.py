"""A small run directory written directly (graph.json and sem.jsonl), for fast review tests.

Built on :class:`otel_bridge.testing.SyntheticRun` (shared with ``benchmarks/review_scale.py``):
the review reads exactly the formats ``observe`` writes; only the OS plane is stated instead of
observed (the scripted-session tests observe it for real).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_bridge.graph.document import GraphNode
from otel_bridge.model import ProcessFacts, Resource, Scope, Span, SpanKind, ToolCallFacts
from otel_bridge.testing import SyntheticRun

HOST = "h1"
RESOURCE = Resource(attributes={"service.name": "agent-svc"})
SCOPE = Scope(name="test")


def _msg(role: str, text: str = "", calls: tuple[str, ...] = ()) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
    parts += [{"type": "tool_call", "id": c, "name": "run_command", "arguments": {}} for c in calls]
    return {"role": role, "parts": parts}


@dataclass
class Session:
    """One trace: a user task, tool calls running commands, a final answer."""

    trace: str
    task: str
    answer: str
    commands: list[tuple[list[str], int, list[str], list[str]]] = field(default_factory=list)
    """(argv, exit code, files read, files written) per tool call, in order."""
    unlinked: set[int] = field(default_factory=set)
    """Tool calls (by index) whose process the graph does not link: only its parent is known."""
    stray: list[list[str]] = field(default_factory=list)
    in_process: dict[int, list[str]] = field(default_factory=dict)
    """Files the agent's own process writes during a tool call (by index): an in-process tool."""
    """argv of processes the agent process runs after its tool calls, outside any of them."""


class RunBuilder(SyntheticRun):
    """Collects spans, graph nodes and edges; writes the run directory."""

    def __init__(self) -> None:
        super().__init__(resource=RESOURCE, scope=SCOPE, clock=1_000_000_000)

    def span(self, trace: str, n: int, name: str, attrs: dict[str, Any], parent: int = 0) -> Span:
        return self.add_span(trace, n, name, attrs, parent, SpanKind.INTERNAL)

    def edge(self, source: str, relation: str, target: str, at: int = 0, **kw: Any) -> None:
        t = at or self.tick()
        self.add_edge(source, relation, target, at=t, record=f"linux:{len(self.edges)}", **kw)

    def link(self, source: str, process: str, method: str, trace: str | None = None) -> None:
        """An exact ``correlated_with_process`` link from ``source`` (an agent or tool call) to
        ``process`` by ``method``; a ``traceparent`` link names the ``trace`` carried, if given."""
        self.edge(
            source,
            "correlated_with_process",
            process,
            causal=False,
            inferred=False,
            identity_exact=True,
            attribution=("exact_identity",),
            method=method,
            grade="C",
            attrs={"trace_id": trace, "span_id": "00" * 8} if trace else {},
        )

    def add(self, s: Session, first_span: int) -> None:
        """Spans and graph entries of one session."""
        agent = "agent:agent-svc:" + s.trace[:4]
        self.nodes[agent] = GraphNode(id=agent, kind="agent", label=agent)
        root = first_span
        self.span(s.trace, root, "invoke_agent a", {"gen_ai.operation.name": "invoke_agent"})
        history = [_msg("user", s.task)]
        for i, (argv, code, reads, writes) in enumerate(s.commands):
            call = f"call_{i}"
            output = [_msg("assistant", calls=(call,))]
            self.span(s.trace, root + 1 + 2 * i, "chat m", self.chat_attrs(history, output), root)
            history += output
            self._tool(
                s,
                n=root + 2 + 2 * i,
                call=call,
                command=(argv, code, reads, writes),
                command_index=i,
                agent=agent,
                parent=root,
            )
        for k, argv in enumerate(s.stray):
            start = self.tick()
            pid = f"process:{HOST}:{root + 50 + k}:{root + 50 + k}"
            facts = ProcessFacts(host_id=HOST, pid=root + 50 + k, argv=tuple(argv), cwd="/w")
            self.nodes[pid] = GraphNode(
                id=pid, kind="process", label=argv[0], facts=facts, first_seen=start
            )
            self.edge(self.agent_process(agent), "spawned", pid, causal=True, grade="A")
        final = [_msg("assistant", s.answer)]
        self.span(s.trace, root + 100, "chat m", self.chat_attrs(history, final), root)

    def agent_process(self, agent: str) -> str:
        """The agent's own process node, linked to the agent (created once)."""
        pid = f"process:{HOST}:1:1"
        if pid not in self.nodes:
            facts = ProcessFacts(host_id=HOST, pid=1, argv=("python", "agent.py"), cwd="/w")
            self.nodes[pid] = GraphNode(id=pid, kind="process", label="agent", facts=facts)
            self.edge(
                agent,
                "correlated_with_process",
                pid,
                causal=False,
                inferred=False,
                attribution=("exact_identity",),
                grade="C",
            )
        return pid

    def _tool(
        self,
        s: Session,
        *,
        n: int,
        call: str,
        command: tuple[list[str], int, list[str], list[str]],
        command_index: int,
        agent: str,
        parent: int,
    ) -> None:
        argv, code, reads, writes = command
        attrs = self.command_attrs(call, argv, f"exit code {code}")
        span = self.span(s.trace, n, "execute_tool run_command", attrs, parent)
        tool = f"tool_call:{s.trace}:{span.span_id.hex()}"
        facts = ToolCallFacts(tool="run_command", call_id=call, trace_id=s.trace)
        self.nodes[tool] = GraphNode(id=tool, kind="tool_call", label="run_command", facts=facts)
        pid = f"process:{HOST}:{n}:{n}"
        self.nodes[pid] = GraphNode(
            id=pid,
            kind="process",
            label=argv[0],
            facts=ProcessFacts(host_id=HOST, pid=n, argv=tuple(argv), exit_code=code, cwd="/w"),
            first_seen=span.start_time_unix_nano,
            last_seen=span.end_time_unix_nano,
        )
        self.edge(agent, "invoked", tool, attribution=("reported",), grade="U")
        if command_index in s.unlinked:  # the OS plane saw the fork, not the context
            self.edge(self.agent_process(agent), "spawned", pid, causal=True, grade="A")
        else:
            self.link(tool, pid, "traceparent")
        for path in s.in_process.get(command_index, ()):
            at = span.start_time_unix_nano + 1
            self.edge(self.agent_process(agent), "wrote", self.file(path), at=at, causal=True)
        for path in reads:
            self.edge(
                pid, "opened", self.file(path), causal=True, attribution=("syscall",), grade="A"
            )
        for path in writes:
            self.edge(
                pid, "wrote", self.file(path), causal=True, attribution=("syscall",), grade="A"
            )

    def write(self, run_dir: Path, *, coverage: bool = True, extra_line: str = "") -> Path:
        """Write ``sem.jsonl`` and ``graph.json`` (and an unreadable line, if given)."""
        run_dir.mkdir(parents=True, exist_ok=True)
        lines = [line.decode() for line in self.span_lines()]
        if extra_line:
            lines.append(extra_line)
        (run_dir / "sem.jsonl").write_text("\n".join(lines) + "\n")
        counts = (
            {"collection.file.available": 1, "collection.process.available": 1} if coverage else {}
        )
        self.write_graph(run_dir / "graph.json", "synthetic", counts)
        return run_dir
