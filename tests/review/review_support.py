"""A small run directory written directly (graph.json and sem.jsonl), for fast review tests.

The spans are encoded by the OTLP/JSON codec and the graph by the graph document's own writer,
so the review reads exactly the formats ``observe`` writes; only the OS plane is stated instead
of observed (the scripted-session tests observe it for real).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from otel_bridge.graph.document import Graph, GraphEdge, GraphNode, dump
from otel_bridge.graph.summary import summarize
from otel_bridge.model import (
    FileFacts,
    ProcessFacts,
    Resource,
    Scope,
    Span,
    SpanKind,
    ToolCallFacts,
)
from otel_bridge.otlp import json_codec

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


@dataclass
class RunBuilder:
    """Collects spans, graph nodes and edges; writes the run directory."""

    spans: list[Span] = field(default_factory=list)
    nodes: dict[str, GraphNode] = field(default_factory=dict)
    edges: list[GraphEdge] = field(default_factory=list)
    clock: int = 1_000_000_000

    def tick(self) -> int:
        self.clock += 1_000_000
        return self.clock

    def span(self, trace: str, n: int, name: str, attrs: dict[str, Any], parent: int = 0) -> Span:
        start = self.tick()
        span = Span(
            resource=RESOURCE,
            scope=SCOPE,
            trace_id=bytes.fromhex(trace),
            span_id=n.to_bytes(8, "big"),
            parent_span_id=parent.to_bytes(8, "big") if parent else b"",
            name=name,
            kind=SpanKind.INTERNAL,
            start_time_unix_nano=start,
            end_time_unix_nano=self.tick(),
            attributes=attrs,
        )
        self.spans.append(span)
        return span

    def edge(self, source: str, relation: str, target: str, at: int = 0, **kw: Any) -> None:
        t = at or self.tick()
        self.edges.append(
            GraphEdge(
                id=f"e-{len(self.edges):016x}",
                source=source,
                target=target,
                relation=relation,
                first_seen=t,
                last_seen=t,
                support=(f"linux:{len(self.edges)}#0",),
                **kw,
            )
        )

    def file(self, path: str) -> str:
        fid = f"file:{path}"
        self.nodes[fid] = GraphNode(id=fid, kind="file", label=path, facts=FileFacts(path=path))
        return fid

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
            self._chat(s.trace, root + 1 + 2 * i, history, output, root)
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
        self._chat(s.trace, root + 100, history, [_msg("assistant", s.answer)], root)

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

    def _chat(self, trace: str, n: int, inputs: Any, outputs: Any, parent: int) -> None:
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m",
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
        }
        self.span(trace, n, "chat m", attrs, parent)

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
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "run_command",
            "gen_ai.tool.call.id": call,
            "gen_ai.tool.call.arguments": json.dumps({"command": " ".join(argv)}),
            "gen_ai.tool.call.result": f"exit code {code}",
        }
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
            self.edge(
                tool,
                "correlated_with_process",
                pid,
                causal=False,
                inferred=False,
                identity_exact=True,
                attribution=("exact_identity",),
                method="traceparent",
                grade="C",
            )
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
        lines = [orjson.dumps(json_codec.encode_traces([s])).decode() for s in self.spans]
        if extra_line:
            lines.append(extra_line)
        (run_dir / "sem.jsonl").write_text("\n".join(lines) + "\n")
        counts = (
            {"collection.file.available": 1, "collection.process.available": 1} if coverage else {}
        )
        nodes = tuple(sorted(self.nodes.values(), key=lambda n: n.id))
        edges = tuple(sorted(self.edges, key=lambda e: (e.source, e.relation, e.target)))
        summary = summarize(
            [n.to_dict() for n in nodes],
            [e.to_dict() for e in edges],
            counts,
            {"os": sum(counts.values())} if counts else {},
            len(edges),
        )
        dump(
            Graph(run={"id": "synthetic"}, nodes=nodes, edges=edges, summary=summary),
            run_dir / "graph.json",
        )
        return run_dir
