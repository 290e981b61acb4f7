"""Sessions and Evidence Nodes, built by rule from the trace records and the evidence graph.

A **session** is one trace (a trace id) holding at least one GenAI or OpenInference span (agent,
model or tool). Its evidence nodes:

* messages from the ``chat`` and agent spans in every convention that records them
  (:mod:`otel_bridge.review.messages`: GenAI, OpenInference, OpenLLMetry, GenAI events),
  deduplicated across requests;
* ``tool_call``: each ``execute_tool`` span, id = the graph's ``tool_call`` node id, with the
  processes the graph links to it (``correlated_with_process``) and their ``spawned`` descendants;
* ``process_run``: every such process, the agent's own process, and processes the agent process
  spawned outside any tool call (undeclared);
* ``model_call``: each ``chat`` span;
* ``artifact``: files the session's processes wrote (or opened for writing, where the file plane
  sees opens, not writes), and files tool processes read under a working directory of the
  session; endpoints the non-agent processes connected (or began to connect) to. What counts as
  a write or a connection is ``otel_bridge.graph.reading``'s rule, shared with report and
  compare; each artifact says how it was observed.

Process and file facts come from the graph's typed ``facts``; nothing is parsed back out of
attribute strings.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from otel_bridge.graph import reading
from otel_bridge.graph.document import GraphNode
from otel_bridge.model import (
    OPERATION_KINDS,
    EndpointFacts,
    EntityKind,
    FileContent,
    FileFacts,
    ProcessFacts,
    Span,
    StatusCode,
)
from otel_bridge.processors.normalize.conventions import (
    CLAUDE_CODE_SPANS,
    KIND_KEYS,
    claude_code_tool,
)
from otel_bridge.review import rules
from otel_bridge.review.messages import Message, span_messages
from otel_bridge.review.records import Records
from otel_bridge.review.types import EvidenceNode

READ_RELATIONS = frozenset({"opened", "read"})
CONNECT_RELATIONS = frozenset({"connected_to", "attempted_connect"})
"""Relations of a connect begun (the importers find an OTLP sender by either)."""
GENAI_OPERATIONS = frozenset(
    {"invoke_agent", "create_agent", "chat", "text_completion", "generate_content", "execute_tool"}
)
SPAN_KINDS = {"LLM": "chat", "TOOL": "execute_tool", "AGENT": "invoke_agent"}
"""OpenInference / OpenLLMetry span kinds (upper case) and the operation each stands for."""
REQUEST_TYPES = frozenset({"chat", "completion"})
"""OpenLLMetry ``llm.request.type`` values of a model call that states no operation."""


class EdgeDetail(msgspec.Struct, frozen=True, gc=False):
    """The edge attributes the review reads: the two :mod:`otel_bridge.graph.reading` reads and
    a connection's local end (the others are skipped when decoding)."""

    access: Any = msgspec.field(default=None, name="file.access")
    result: Any = msgspec.field(default=None, name="network.connect.result")
    local_address: Any = msgspec.field(default=None, name="network.local.address")
    local_port: Any = msgspec.field(default=None, name="network.local.port")
    trace_id: Any = None
    """The trace a ``traceparent`` link's process carried (``correlate``)."""


class GEdge(msgspec.Struct, frozen=True, gc=False):
    """The fields of a ``graph.json`` edge the review reads (a light record decoded straight from
    the document: 200,000 of them are read for a one-hour session)."""

    id: str
    source: str
    target: str
    relation: str
    causal: Any = None
    inferred: Any = None
    method: Any = None
    grade: str = "U"
    support: tuple[str, ...] = ()
    first_seen: int | None = None
    last_seen: int | None = None
    attrs: EdgeDetail | None = None

    @property
    def write(self) -> str | None:
        """``written``, ``opened_for_writing`` or None (:func:`reading.write_kind`)."""
        return reading.write_kind(self.relation, None if self.attrs is None else self.attrs.access)

    @property
    def reach(self) -> str | None:
        """``connected``, ``attempted`` or None (:func:`reading.reach_kind`)."""
        return reading.reach_kind(self.relation, None if self.attrs is None else self.attrs.result)

    @staticmethod
    def of(d: Mapping[str, Any]) -> GEdge:
        """From the edge's JSON object (null grade: ``U``, null support: none)."""
        attrs = d.get("attrs") or {}
        return GEdge(
            d["id"],
            d["source"],
            d["target"],
            d["relation"],
            d.get("causal"),
            d.get("inferred"),
            d.get("method"),
            d.get("grade") or "U",
            tuple(d.get("support") or ()),
            d.get("first_seen"),
            d.get("last_seen"),
            EdgeDetail(
                attrs.get("file.access"),
                attrs.get("network.connect.result"),
                attrs.get("network.local.address"),
                attrs.get("network.local.port"),
                attrs.get("trace_id"),
            ),
        )


@dataclass(slots=True)
class GraphIndex:
    """The graph's nodes by id and edges by end."""

    nodes: dict[str, GraphNode]
    out: dict[str, list[GEdge]]
    into: dict[str, list[GEdge]]

    @staticmethod
    def of(nodes: Iterable[GraphNode], edges: Iterable[GEdge]) -> GraphIndex:
        """Index the graph's nodes and edges."""
        out: dict[str, list[GEdge]] = defaultdict(list)
        into: dict[str, list[GEdge]] = defaultdict(list)
        for e in edges:
            out[e.source].append(e)
            into[e.target].append(e)
        return GraphIndex({n.id: n for n in nodes}, out, into)

    def out_edges(self, node: str, relations: Iterable[str]) -> list[GEdge]:
        """Edges leaving ``node`` with one of ``relations``."""
        wanted = set(relations)
        return [e for e in self.out.get(node, ()) if e.relation in wanted]

    def process_facts(self, node: str) -> ProcessFacts | None:
        """The merged process facts of ``node``, when it is a process with facts."""
        n = self.nodes.get(node)
        return n.facts if n is not None and isinstance(n.facts, ProcessFacts) else None


@dataclass(slots=True)
class Session:
    """One agent session (trace) and what the review built for it."""

    id: str
    trace_id: str
    spans: list[tuple[str, Span]]
    start: int | None = None
    end: int | None = None
    agents: list[str] = field(default_factory=list)
    agent_processes: list[str] = field(default_factory=list)
    nodes: dict[str, EvidenceNode] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)
    """process id -> the evidence node (tool call or process run) that owns its effects."""
    cwds: set[str] = field(default_factory=set)
    window_owned: set[str] = field(default_factory=set)
    """processes attributed to a tool call by time window (rule ``tool_window``), not by link."""
    write_from: dict[str, int] = field(default_factory=dict)
    """tool call id -> from when the agent's own writes count as the call's, for a call whose
    window opens before its stated start (a Gemini CLI call whose start is known only to lie
    after the model response that asked for it): the agent's own writes between are its own."""
    window_edges: set[str] = field(default_factory=set)
    """graph edges of the agent process attributed to a tool call by time (rule ``tool_window``)."""
    links: dict[str, list[GEdge]] = field(default_factory=dict)
    """tool call id -> the graph edges linking it to its processes."""
    contested_processes: dict[str, list[str]] = field(default_factory=dict)
    """Processes the shared agent process spawned while several sessions ran (``ambiguous``
    across sessions) -> those sessions: their effects are no one session's."""
    contested: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Paths the shared agent process wrote while this session and others ran, outside any
    single tool call -> the sessions: no one session's write (``add_artifacts``)."""
    capture: set[str] = field(default_factory=set)
    """Paths the session was read from (an imported transcript): not artifacts (rule
    ``capture_source``)."""

    def add(self, node: EvidenceNode) -> EvidenceNode:
        """Add ``node`` (or return the one with its id)."""
        return self.nodes.setdefault(node.id, node)

    def of_type(self, *types: str) -> list[EvidenceNode]:
        """Nodes of ``types`` in time order."""
        found = [n for n in self.nodes.values() if n.type in types]
        return sorted(found, key=lambda n: (n.time or 0, n.id))


def runs_of(session: Session) -> list[EvidenceNode]:
    """The session's process runs that can back its claims, checks and findings: every
    ``process_run`` but those no one session's (``contested_processes``: started while several
    sessions of one agent process ran), in time order."""
    return [p for p in session.of_type("process_run") if p.id not in session.contested_processes]


def attr(span: Span, key: str) -> str | None:
    """A string attribute of ``span``."""
    value = span.attributes.get(key)
    return value if isinstance(value, str) else None


def is_genai(span: Span) -> bool:
    """True for agent, model and tool spans (GenAI conventions, OpenInference or OpenLLMetry)."""
    return attr(span, "gen_ai.operation.name") in GENAI_OPERATIONS or operation(span) != ""


def operation(span: Span) -> str:
    """``chat``, ``execute_tool``, ``invoke_agent`` or ``""``: the GenAI operation name, else the
    OpenInference / OpenLLMetry span kind, else what a Claude Code span stands for, else
    OpenLLMetry's ``llm.request.type`` (the order ``normalize`` reads them in)."""
    op = attr(span, "gen_ai.operation.name")
    if op in ("chat", "text_completion", "generate_content"):
        return "chat"
    if op in ("execute_tool", "invoke_agent"):
        return op
    for key in KIND_KEYS:
        kind = SPAN_KINDS.get((attr(span, key) or "").upper())
        if kind is not None:
            return kind
    claude = CLAUDE_CODE_SPANS.get(span.name)
    if claude is not None:
        return claude
    return "chat" if attr(span, "llm.request.type") in REQUEST_TYPES else ""


def find_sessions(records: Records) -> list[Session]:
    """One session per trace holding a GenAI span, in order of first span start."""
    by_trace: dict[str, list[tuple[str, Span]]] = defaultdict(list)
    for rid, span in records.spans:
        by_trace[span.trace_id.hex()].append((rid, span))
    sessions = []
    for trace_id, spans in by_trace.items():
        genai = [s for _, s in spans if is_genai(s)]
        if not genai:
            continue
        spans.sort(key=lambda rs: (rs[1].start_time_unix_nano, rs[0]))
        session = Session(id=f"session:{trace_id}", trace_id=trace_id, spans=spans)
        session.start = min(s.start_time_unix_nano for s in genai)
        session.end = max(s.end_time_unix_nano for s in genai)
        sessions.append(session)
    sessions.sort(key=lambda s: (s.start or 0, s.id))
    return sessions


BOOT_TIME_TRUNCATION_NS = 1_000_000_000
"""How early a ``/proc`` start time can be: it counts from the boot time in whole seconds."""


def process_start(first_seen: int | None, facts: ProcessFacts | None) -> int | None:
    """When a process started, as the review places it in time (ns since the epoch).

    The stated start (``process.creation.time``, the identity's ms) is computed as ``ps`` and
    psutil compute it, from ``/proc/stat``'s ``btime``, which is the boot time truncated to a
    whole second: it is early by the boot's fraction of a second, the same for every process of
    the machine (0.76 s on the machine this was written on). The process's first observation
    (its start event, for an event-driven backend, or the first sighting) cannot precede the
    start. So the start lies in ``[stated, min(first_seen, stated + 1 s))``, and the upper end is
    the one on the clock that span and event times use: with an observed start event it is that
    event's time."""
    if facts is None or facts.start_time_ms is None:
        return first_seen
    stated = facts.start_time_ms * 1_000_000
    if first_seen is None:
        return stated
    return max(stated, min(first_seen, stated + BOOT_TIME_TRUNCATION_NS))


def process_node(session: Session, index: GraphIndex, pid: str, records: Records) -> EvidenceNode:
    """The ``process_run`` node of graph process ``pid``."""
    g = index.nodes[pid]
    facts = index.process_facts(pid)
    support = [
        o for e in index.out.get(pid, ()) if e.relation == "executed" for o in e.support or ()
    ]
    support += [
        o for e in index.into.get(pid, ()) if e.relation == "spawned" for o in e.support or ()
    ]
    start = process_start(g.first_seen, facts)
    if facts is not None and facts.cwd:
        session.cwds.add(facts.cwd)
    argv = None if facts is None or facts.argv is None else list(facts.argv)
    check = rules.match_check(argv)
    return session.add(
        EvidenceNode(
            id=pid,
            type="process_run",
            session=session.id,
            label=g.label,
            time=start,
            end=g.last_seen,
            records=records.for_observations(support),
            data={
                "key": g.key,
                "argv": argv,
                "executable": None if facts is None else facts.executable_path,
                "cwd": None if facts is None else facts.cwd,
                "exit_code": None if facts is None else facts.exit_code,
                "check": None
                if check is None
                else {"name": check.name, "category": check.category},
                "tool_call": None,
                "role": "tool",
            },
        )
    )


def descendants(
    index: GraphIndex, roots: Iterable[str], stop: Callable[[str], bool] | None = None
) -> list[str]:
    """``roots`` and every process they (transitively) spawned, in discovery order; a
    descendant for which ``stop`` says so is left out, with its own descendants."""
    seen: list[str] = []
    first = set(roots)
    stack = list(first)
    while stack:
        pid = stack.pop()
        if pid in seen or pid not in index.nodes:
            continue
        if stop is not None and pid not in first and stop(pid):
            continue
        seen.append(pid)
        stack.extend(e.target for e in index.out_edges(pid, ("spawned",)))
    return seen


def tool_links(index: GraphIndex, tool_id: str) -> list[GEdge]:
    """The graph's ``correlated_with_process`` edges of a tool call (and its declared command)."""
    links = index.out_edges(tool_id, ("correlated_with_process",))
    for declared in index.out_edges(tool_id, ("declared_command",)):
        links += index.out_edges(declared.target, ("correlated_with_process",))
    return links


def tool_call_node(session: Session, rid: str, span: Span, index: GraphIndex) -> EvidenceNode:
    """The ``tool_call`` node of an ``execute_tool`` span."""
    trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
    node_id = f"tool_call:{trace_id}:{span_id}"
    g = index.nodes.get(node_id)
    status = {StatusCode.OK: "ok", StatusCode.ERROR: "error"}.get(span.status.code, "unset")
    tool = (
        attr(span, "gen_ai.tool.name")
        or attr(span, "tool.name")
        or claude_code_tool(span.name, span.attributes)
    )
    return session.add(
        EvidenceNode(
            id=node_id,
            type="tool_call",
            session=session.id,
            label=g.label if g is not None else (tool or span.name),
            time=span.start_time_unix_nano,
            end=span.end_time_unix_nano,
            records=[rid],
            data={
                "tool": tool,
                "call_id": attr(span, "gen_ai.tool.call.id")
                or attr(span, "tool_call.id")
                or attr(span, "tool_use_id"),
                "arguments": attr(span, "gen_ai.tool.call.arguments") or attr(span, "input.value"),
                "result": attr(span, "gen_ai.tool.call.result") or attr(span, "output.value"),
                "status": status,
                "in_graph": g is not None,
                "processes": [],
                "links": [],
            },
        )
    )


Window = tuple[int, int, "Session"]
"""A traced prompt: the start and end of its Claude Code spans, and the session they make."""


def traced_prompts(sessions: Iterable[Session]) -> dict[str, list[Window]]:
    """The prompts Claude Code's own spans told: ``session.id`` (stated on a span or its
    resource) -> per trace (one per prompt), the time its ``claude_code.*`` spans cover and the
    session it is. Every span of the trace counts: the ``claude_code.interaction`` root, which
    ends last, is the span most likely lost at exit while its tool spans arrived."""
    out: dict[str, list[Window]] = defaultdict(list)
    for session in sessions:
        spans = [span for _, span in session.spans if span.name.startswith("claude_code.")]
        stated = next(
            (
                value
                for span in spans
                for value in (
                    span.attributes.get("session.id"),
                    span.resource.attributes.get("session.id"),
                )
                if isinstance(value, str) and value
            ),
            None,
        )
        if stated is not None:
            start = min(span.start_time_unix_nano for span in spans)
            end = max(span.end_time_unix_nano for span in spans)
            out[stated].append((start, end, session))
    return dict(out)


def untraced_part(session: Session, windows: list[Window]) -> Session | None:
    """A Claude Code session from its log events less what its spans already told.

    A node (model or tool call) whose time lies inside a traced prompt's window is the span
    session's (with exact process links) and is dropped here; a message there (the prompt's
    text, which the spans do not carry) is moved into that span session. None when no event of
    the session is left. Claude Code runs one prompt at a time, so a prompt's window holds only
    its events. The session's window is that of what is left (its agent's ``process_run`` does
    not count: it spans the process's life)."""
    for nid, node in list(session.nodes.items()):
        if node.type == "process_run" or node.time is None:
            continue
        window = next((w for w in windows if w[0] <= node.time <= w[1]), None)
        if window is None:
            continue
        del session.nodes[nid]
        if node.type in MESSAGE_NODE_TYPES:  # the prompt's text, which spans do not carry
            window[2].add(dataclasses.replace(node, session=window[2].id))
        elif node.type == "tool_call":
            _fill_from_log(window[2], node)
    if all(node.type == "process_run" for node in session.nodes.values()):
        return None  # only the agent's process was left: everything was traced
    times = [
        t
        for n in session.nodes.values()
        if n.type != "process_run"
        for t in (n.time, n.end)
        if t is not None
    ]
    session.start, session.end = (min(times), max(times)) if times else (None, None)
    return session


LOGGED_FIELDS = ("arguments", "decision", "result")
"""What a Claude Code tool call's log events say that its spans do not (``tool_parameters``
unless ``OTEL_LOG_TOOL_DETAILS`` puts them on the span too, the permission decision, output)."""


def _fill_from_log(traced: Session, logged: EvidenceNode) -> None:
    """Give a span session's tool call what the same call's log events said and its span did
    not (:data:`LOGGED_FIELDS`, and the log records). The same call: the one with the log
    call's ``tool_use_id``, else the only call of the same tool whose span holds the log call's
    time; none when several do (no guess: the fields stay unknown)."""
    calls = traced.of_type("tool_call")
    call_id = logged.data.get("call_id")
    found = [c for c in calls if call_id and c.data.get("call_id") == call_id]
    if not found:
        found = [
            c
            for c in calls
            if c.data.get("tool") == logged.data.get("tool") and _within(logged.time, c.time, c.end)
        ]
    if len(found) != 1:
        return
    (call,) = found
    for key in LOGGED_FIELDS:
        if call.data.get(key) is None and logged.data.get(key) is not None:
            call.data[key] = logged.data[key]
    call.records.extend(r for r in logged.records if r not in call.records)


CLAUDE_CODE_RUN = "claude_code.tool.execution"
"""The child of a Claude Code tool span that ran the tool: it says whether the run succeeded."""


def run_status(run: Span) -> str:
    """``ok``/``error`` from a Claude Code run span (its status, else ``success``), else
    ``unset``."""
    if run.status.code is StatusCode.ERROR:
        return "error"
    success = run.attributes.get("success")
    if success is True or success == "true":
        return "ok"
    if success is False or success == "false":
        return "error"
    return "ok" if run.status.code is StatusCode.OK else "unset"


def add_tool_calls(session: Session, index: GraphIndex, records: Records) -> None:
    """Tool calls, their linked processes and those processes' descendants."""
    runs = {s.parent_span_id: s for _, s in session.spans if s.name == CLAUDE_CODE_RUN}
    for rid, span in session.spans:
        if operation(span) != "execute_tool":
            continue
        tool = tool_call_node(session, rid, span, index)
        run = runs.get(span.span_id)
        if run is not None and tool.data["status"] == "unset":
            tool.data["status"] = run_status(run)
        for agent_edge in index.into.get(tool.id, ()):
            if agent_edge.relation == "invoked" and agent_edge.source not in session.agents:
                session.agents.append(agent_edge.source)
        links = tool_links(index, tool.id)
        session.links[tool.id] = links
        tool.data["links"] = [
            {"edge": e.id, "method": e.method, "grade": e.grade, "inferred": e.inferred}
            for e in links
        ]
        for pid in descendants(index, [e.target for e in links]):
            if pid in session.owner:
                continue
            proc = process_node(session, index, pid, records)
            proc.data["tool_call"] = tool.id
            session.owner[pid] = tool.id
            tool.data["processes"].append(pid)


def in_agent_context(link: GEdge) -> bool:
    """Whether an agent's ``correlated_with_process`` link says only that the process carried the
    agent's trace context (``traceparent``), not a tool call's: a process started on the agent's
    behalf (its runtime's helpers, a command no tool call declared), not the agent's own one."""
    method = link.method
    return method == "traceparent" or (
        isinstance(method, list | tuple) and set(method) == {"traceparent"}
    )


def context_trace(link: GEdge) -> str | None:
    """The trace a ``traceparent`` link's process carried, when the link states it."""
    trace = None if link.attrs is None else link.attrs.trace_id
    return trace if isinstance(trace, str) and trace else None


_SPAN_NODE_KINDS = tuple(
    sorted(str(k) for k in (*OPERATION_KINDS, EntityKind.SPAN, EntityKind.TOOL_CALL))
)
"""The kinds of graph node normalize makes one of per span: ``<kind>:<trace>:<span>``."""


def add_span_agents(session: Session, index: GraphIndex) -> None:
    """The agents the session's spans are joined to in the graph: an agent node at the other
    end of a ``child_of`` edge of a node made from one of the session's spans. Tool calls whose
    span is not an agent span's child (LangGraph's tools run under a ``tools`` chain, beside the
    ``agent`` step, not inside it) leave no ``invoked`` edge to find their agent by."""
    for _, span in session.spans:
        trace, sid = span.trace_id.hex(), span.span_id.hex()
        for kind in _SPAN_NODE_KINDS:
            node = f"{kind}:{trace}:{sid}"
            if node not in index.nodes:
                continue
            ends = [e.target for e in index.out.get(node, ()) if e.relation == "child_of"]
            ends += [e.source for e in index.into.get(node, ()) if e.relation == "child_of"]
            for end in ends:
                found = index.nodes.get(end)
                if found is not None and found.kind == "agent" and end not in session.agents:
                    session.agents.append(end)


def stated_pids(session: Session) -> set[tuple[str | None, int]]:
    """The (host id, pid) pairs the resources of the session's GenAI spans state
    (``process.pid``, a number or its digits, and ``host.id`` when present): the processes that
    emitted the agent's spans. Other spans of the trace (``otel-bridge observe``'s root span, a
    plain service's) do not count."""
    out: set[tuple[str | None, int]] = set()
    for _, span in session.spans:
        if not is_genai(span):
            continue
        attrs = span.resource.attributes
        pid = attrs.get("process.pid")
        if isinstance(pid, str) and pid.isdigit():
            pid = int(pid)
        if isinstance(pid, int) and not isinstance(pid, bool):
            host = attrs.get("host.id")
            out.add((host if isinstance(host, str) else None, pid))
    return out


def _stated_by(index: GraphIndex, process: str, stated: set[tuple[str | None, int]]) -> bool:
    """Whether graph process ``process`` is one of the ``stated`` (host, pid) pairs (any host
    when a pair names none)."""
    facts = index.process_facts(process)
    if facts is None:
        return False
    return (facts.host_id, facts.pid) in stated or (None, facts.pid) in stated


def link_agent_processes(
    session: Session, index: GraphIndex, records: Records, *, rivals: Iterable[Session] = ()
) -> None:
    """The agent's own process (``role: agent``), from the agent's ``correlated_with_process``
    links. Done for every session before :func:`add_agent_processes`, which needs to know
    which sessions share an agent process.

    One agent node can stand for several processes: two instances of one agent (the same
    service and name) in one run are one node with a link to each. When the session's GenAI
    spans state the pid that emitted them (:func:`stated_pids`) and some of the agent's linked
    processes are among those, only those are this session's; otherwise every linked process
    that no other session of the agent (``rivals``) states is (its sender is not known per
    session), and every linked process when all are: never none. A process one of the
    session's tool calls owns (a sub-agent a tool call ran) stays the call's."""
    stated = stated_pids(session)
    others = [r for r in rivals if r is not session]
    for agent in session.agents:
        links = [
            link
            for link in index.out_edges(agent, ("correlated_with_process",))
            if link.target in index.nodes
            and not in_agent_context(link)  # a process on the agent's behalf, not its own
            and session.owner.get(link.target, link.target) == link.target  # not a call's
        ]
        own = [link for link in links if _stated_by(index, link.target, stated)]
        if not own and len(links) > 1:  # not another instance's that another session states
            theirs = {p for r in others if agent in r.agents for p in stated_pids(r)}
            own = [link for link in links if not _stated_by(index, link.target, theirs)]
        for link in own or links:  # another instance's process is not this session's emitter
            if link.target in session.agent_processes:
                continue
            session.agent_processes.append(link.target)
            proc = process_node(session, index, link.target, records)
            proc.data["role"] = "agent"
            session.owner.setdefault(link.target, link.target)


def add_agent_processes(
    session: Session,
    index: GraphIndex,
    records: Records,
    claimed: set[str],
    *,
    rivals: Iterable[Session] = (),
    context: list[GEdge] | None = None,
) -> None:
    """Processes the agent process spawned that no tool call's link claims.

    ``claimed`` holds every process some session's tool call owns; ``rivals`` are every
    session (who shares an agent process is read from them: :func:`link_agent_processes` has
    run for every one of them first).
    A child of an agent process no other session shares is this session's: a tool call's when
    exactly one call's window holds its start (rule ``tool_window``), ``ambiguous`` when several
    do (``tool_window_ambiguous``), else ``undeclared`` (``agent_child``). When other sessions
    share the process, only the sessions whose windows hold the start are considered: exactly
    one of their calls holding it, that call's; several calls of one session, that session's
    (ambiguous between them); calls of several sessions, or no call while several sessions ran
    (``session_window_ambiguous``), or no session's window at all
    (``outside_session_windows``): ``ambiguous`` in each of them, its effects contested; one
    session and no call: ``undeclared`` (``session_window``). No guess in any case.
    """
    others = [r for r in rivals if r is not session]
    if context is None:
        context = context_links(index)
    carried = _carried(context, [session, *others])
    for parent in list(session.agent_processes):
        sharing = [r for r in others if parent in r.agent_processes]
        for spawn in index.out_edges(parent, ("spawned",)):
            child = spawn.target
            if child in claimed or child in session.owner or child not in index.nodes:
                continue
            start = process_start(index.nodes[child].first_seen, index.process_facts(child))
            traces = carried.get(child)
            if traces:  # its trace context names the session: the windows of no other count
                if session.id not in traces:
                    continue
                found = _placed(session, [session], start, False) if len(traces) == 1 else None
                if found is None:  # the contexts of several sessions: no one session's
                    named = sorted(traces)
                    found = "ambiguous", "agent_context_ambiguous", named, named
            else:
                holders = _holders(session, sharing, start)
                if holders is None:
                    continue  # another session's window holds it, not this one's
                found = _placed(session, holders, start, bool(sharing))
            if found is None:
                continue  # another session's
            _claim(session, index, records, claimed, root=child, found=found, carried=carried)
    add_context_processes(
        session, index, records, claimed, others=others, context=context, carried=carried
    )


def context_links(index: GraphIndex) -> list[GEdge]:
    """Every agent's link to a process that carried the agent's trace context, not a tool
    call's (:func:`in_agent_context`)."""
    return [
        e
        for nid, node in index.nodes.items()
        if node.kind == "agent"
        for e in index.out.get(nid, ())
        if e.relation == "correlated_with_process" and in_agent_context(e)
    ]


def _carried(context: list[GEdge], sessions: list[Session]) -> dict[str, dict[str, str]]:
    """Process -> the sessions (id -> trace) whose trace context it carried, by the links of
    ``context`` that name a trace; a trace that is no session's is left out (its process is
    placed as if the link named none)."""
    by_trace = {s.trace_id: s.id for s in sessions}
    carried: dict[str, dict[str, str]] = defaultdict(dict)
    for link in context:
        trace = context_trace(link)
        if trace is not None and trace in by_trace:
            carried[link.target][by_trace[trace]] = trace
    return carried


Placement = tuple[str, str, list[str], list[str]]
"""Where a process belongs: ``(role, rule, candidates, sessions)`` (:func:`_placed`)."""


def _claim(
    session: Session,
    index: GraphIndex,
    records: Records,
    claimed: set[str],
    *,
    root: str,
    found: Placement,
    carried: Mapping[str, Mapping[str, str]],
) -> None:
    """Make ``root`` and its subtree (:func:`_subtree`; not those already owned) this session's
    process runs, placed as ``found`` says: a ``tool`` role gives them to that call (by time, an
    inference: rule ``tool_window``); ``ambiguous`` names its candidates; a placement of several
    sessions contests their effects."""
    role, rule, candidates, sessions = found
    for pid in _subtree(index, root, session, carried):
        if pid in claimed or pid in session.owner:
            continue
        proc = process_node(session, index, pid, records)
        proc.data["role"], proc.data["rule"] = role, rule
        if role != "tool":
            if role == "ambiguous":  # not one call's or session's, and not undeclared
                proc.data["candidates"] = candidates
            if len(sessions) > 1:  # its effects are no one session's either
                session.contested_processes[pid] = sessions
            session.owner[pid] = root
            continue
        # started inside a tool call but not linked to it (its context was not seen):
        # attributed to the call by time, an inference (rule tool_window)
        tool = session.nodes[candidates[0]]
        proc.data["tool_call"] = tool.id
        tool.data["processes"].append(pid)
        session.owner[pid] = tool.id
        session.window_owned.add(pid)


def _subtree(
    index: GraphIndex, root: str, session: Session, carried: Mapping[str, Mapping[str, str]]
) -> list[str]:
    """``root`` and its descendants, less the subtrees of processes that carried another
    session's trace context and not this one's (those are that session's)."""

    def elsewhere(pid: str) -> bool:
        traces = carried.get(pid)
        return traces is not None and bool(traces) and session.id not in traces

    return descendants(index, [root], elsewhere)


def add_context_processes(
    session: Session,
    index: GraphIndex,
    records: Records,
    claimed: set[str],
    *,
    others: list[Session],
    context: list[GEdge],
    carried: Mapping[str, Mapping[str, str]],
) -> None:
    """Processes that carried the trace context of an agent, not a tool call's
    (:func:`in_agent_context`), that :func:`add_agent_processes` did not place (by the windows of
    this session's agent process that spawned them): ``undeclared`` (rule ``agent_context``),
    with their descendants, in the session of the trace a link names (``carried``), whatever
    agents that session lists; ``ambiguous`` (``agent_context_ambiguous``) in each session when
    the process carried the contexts of several. A process whose links name no session's trace:
    only one no agent process spawned, in the session of the agent; when another session has the
    same agent (one agent node: the same service and name), the context does not say which
    session's: ``ambiguous`` in each, its effects contested."""
    agent_processes = {p for s in [session, *others] for p in s.agent_processes}
    for link in context:
        root = link.target
        if root in claimed or root in session.owner or root not in index.nodes:
            continue
        traces = carried.get(root)
        if traces:
            if session.id not in traces:
                continue  # the context of another session's trace
            sharing = sorted(traces) if len(traces) > 1 else []
        elif _spawned_by(index, root, agent_processes):
            continue  # placed by the windows of the agent process that spawned it
        elif link.source in session.agents:
            rivals = [r.id for r in others if link.source in r.agents]
            sharing = sorted([session.id, *rivals]) if rivals else []
        else:
            continue
        found: Placement = (
            ("ambiguous", "agent_context_ambiguous", sharing, sharing)
            if sharing
            else ("undeclared", "agent_context", [], [session.id])
        )
        _claim(session, index, records, claimed, root=root, found=found, carried=carried)


def _spawned_by(index: GraphIndex, pid: str, parents: set[str]) -> bool:
    """Whether one of ``parents`` spawned ``pid``, directly or through other processes."""
    seen: set[str] = set()
    stack = [pid]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for e in index.into.get(node, ()):
            if e.relation == "spawned":
                if e.source in parents:
                    return True
                stack.append(e.source)
    return False


def _holders(session: Session, sharing: list[Session], t: int | None) -> list[Session] | None:
    """The sessions an effect of an agent process at ``t`` may be from, seen from ``session``
    (``sharing``: the other sessions of that process): ``[session]`` when none shares it; those
    whose windows hold ``t``; all of them when none does (then no one session's); None when
    only other sessions' windows hold it."""
    if not sharing:
        return [session]
    everyone = [session, *sharing]
    holders = [s for s in everyone if _within(t, s.start, s.end)]
    if not holders:
        return everyone
    return holders if session in holders else None


def _placed(
    session: Session,
    holders: list[Session],
    start: int | None,
    shared: bool,
    *,
    write: bool = False,
) -> Placement | None:
    """Where a child of the agent process that started at ``start`` belongs, seen from
    ``session``: ``(role, rule, candidates, sessions)``, or None when it is another session's.

    ``holders`` are the sessions of the agent process whose windows hold ``start``. Exactly one
    tool call of theirs holding it: that call's (``tool_window``). Several calls of one session:
    that session's, no one call's (``ambiguous``, ``tool_window_ambiguous``, the calls as
    candidates). Calls of several sessions, or no call while several sessions ran: no one
    session's (``ambiguous``; ``sessions`` lists them, so its effects are contested). No call and
    one session: ``undeclared``. A ``write`` of the agent process's own is placed by the calls'
    write windows (:func:`tools_at`)."""
    calls = sorted(
        (c for h in holders for c in tools_at(h, start, write=write)),
        key=lambda c: (c.time or 0, c.id),
    )
    owners = sorted({c.session for c in calls})
    if calls and session.id not in owners:
        return None
    if len(calls) == 1:
        return "tool", "tool_window", [calls[0].id], owners
    if calls:
        return "ambiguous", "tool_window_ambiguous", [c.id for c in calls], owners
    if len(holders) > 1:
        named = sorted(h.id for h in holders)
        inside = any(_within(start, h.start, h.end) for h in holders)
        rule = "session_window_ambiguous" if inside else "outside_session_windows"
        return "ambiguous", rule, named, named
    return "undeclared", "session_window" if shared else "agent_child", [], [session.id]


def _touches(
    session: Session, index: GraphIndex, run_dir: str, others: list[Session]
) -> dict[str, list[tuple[str, GEdge]]]:
    """The session's processes' kept effects: artifact id -> [(owner node id, graph edge)];
    writes that are no one session's go to ``session.contested`` instead."""
    touches: dict[str, list[tuple[str, GEdge]]] = defaultdict(list)
    inside: dict[str, bool] = {}  # path -> under a working directory of the session (memo)
    for pid, owner in session.owner.items():
        agent = pid in session.agent_processes
        sharing = [r for r in others if pid in r.agent_processes] if agent else []
        contested_by = session.contested_processes.get(pid)  # a process no one session's
        for e in index.out.get(pid, ()):
            target = index.nodes.get(e.target)
            if target is None:
                continue
            facts = target.facts
            kept = (
                isinstance(facts, FileFacts)
                and _file_kept(e, facts, session, agent, run_dir, inside=inside)
            ) or (isinstance(facts, EndpointFacts) and e.reach is not None and not agent)
            if not kept:
                continue
            sharers = contested_by
            if sharers is None and sharing:
                holders = _holders(session, sharing, e.first_seen)
                placed = (
                    None
                    if holders is None
                    else _placed(session, holders, e.first_seen, True, write=True)
                )
                if placed is None:
                    continue  # another session's
                # whose it is: as a child started then would be placed (several: no one's)
                sharers = placed[3] if len(placed[3]) > 1 else None
            if sharers:  # several sessions': no one session's
                if e.write is not None and isinstance(facts, FileFacts):
                    session.contested[facts.path] = {"by": pid, "sessions": sharers}
                continue
            touches[target.id].append((_holder(session, owner, e, agent), e))
    return touches


def _within(t: int | None, start: int | None, end: int | None) -> bool:
    return t is not None and start is not None and end is not None and start <= t <= end


def add_artifacts(
    session: Session,
    index: GraphIndex,
    records: Records,
    run_dir: str,
    *,
    rivals: Iterable[Session] = (),
) -> dict[str, list[tuple[str, GEdge]]]:
    """File and endpoint artifacts; returns artifact id -> [(owner node id, graph edge)].

    A write of an agent process that several sessions share (``rivals``: the other sessions)
    is this session's only when this session's span window is the only one that holds it, or
    when exactly one tool call's window of those sessions holds it and the call is this
    session's. A write inside several sessions' windows and no single call's is no session's:
    its path is kept in ``session.contested`` so a claim to have written it is not contradicted.
    """
    touches = _touches(session, index, run_dir, [r for r in rivals if r is not session])
    parents = _parents(touches)
    for aid in [a for a in touches if a in parents or _transient(a, touches, index)]:
        del touches[aid]
    for aid, uses in touches.items():
        g = index.nodes[aid]
        writes = [e for _, e in uses if e.write is not None]
        support = [o for _, e in uses for o in e.support or ()]
        data: dict[str, Any] = {"kind": "file" if isinstance(g.facts, FileFacts) else "endpoint"}
        if isinstance(g.facts, FileFacts):
            data |= {
                "path": g.facts.path,
                "key": g.key,
                "written": bool(writes),
                "write_observed": reading.strongest(e.write for e in writes if e.write),
                "last_write": max((e.last_seen or 0 for e in writes), default=None),
                **content_data(g.facts.content),
            }
        elif isinstance(g.facts, EndpointFacts):
            data |= {
                "address": g.facts.address,
                "port": g.facts.port,
                "key": g.key,
                "reach_observed": reading.strongest(e.reach for _, e in uses if e.reach),
            }
        session.add(
            EvidenceNode(
                id=aid,
                type="artifact",
                session=session.id,
                label=g.label,
                time=min((e.first_seen or 0 for _, e in uses), default=None),
                end=max((e.last_seen or 0 for _, e in uses), default=None),
                records=records.for_observations(support),
                data=data,
            )
        )
    return touches


def content_data(content: FileContent | None) -> dict[str, Any]:
    """An artifact's ``size``, ``sha256`` and how its content was read (all None: not captured,
    content capture is off by default; ``docs/host.md``)."""
    if content is None:
        return {
            "size": None,
            "sha256": None,
            "content_state": None,
            "content_read_at": None,
            "content_read_time": None,
            "content_detail": None,
        }
    return {
        "size": content.size,
        "sha256": content.sha256 if content.state == "hashed" else None,
        "content_state": content.state,
        "content_read_at": content.read_at,
        "content_read_time": content.time_unix_nano,
        "content_detail": content.detail,
    }


def tools_at(session: Session, t: int | None, *, write: bool = False) -> list[EvidenceNode]:
    """The tool calls whose spans hold time ``t`` (more than one when calls ran in parallel).
    For a ``write`` of the agent process's own, a call's window opens at its stated start
    (``Session.write_from``) when the window its processes use opens earlier."""
    return [
        c
        for c in session.of_type("tool_call")
        if _within(t, session.write_from.get(c.id, c.time) if write else c.time, c.end)
    ]


def tool_at(session: Session, t: int | None, *, write: bool = False) -> EvidenceNode | None:
    """The one tool call whose span holds time ``t``; None when none does or several do (calls
    that ran in parallel: time alone cannot say which, and the review does not guess)."""
    found = tools_at(session, t, write=write)
    return found[0] if len(found) == 1 else None


def _holder(session: Session, owner: str, e: GEdge, agent: bool) -> str:
    """Who an effect belongs to: its process's owner, except that a write by the agent's own
    process inside a tool call's span is that call's (an in-process tool), by rule
    ``tool_window``."""
    if not agent or e.write is None:
        return owner
    tool = tool_at(session, e.first_seen, write=True)
    if tool is None:
        return owner
    session.window_edges.add(e.id)
    return tool.id


def _transient(aid: str, touches: Mapping[str, list[tuple[str, GEdge]]], index: GraphIndex) -> bool:
    """A temporary: unlinked while open, created and then deleted or renamed away, or inside a
    directory renamed away after its last write (the name no longer exists)."""
    if aid.endswith(" (deleted)") or f"{aid} (deleted)" in index.nodes:
        return True
    edges = [e for _, e in touches[aid]]
    last_write = max(
        (e.last_seen or 0 for e in edges if e.relation in ("created", "wrote")), default=0
    )
    created = [e.first_seen or 0 for e in edges if e.relation == "created"]
    gone = [e.last_seen or 0 for e in edges if e.relation in ("deleted", "renamed")]
    written = [e.last_seen or 0 for e in edges if e.relation == "wrote"]
    # events of one instant can arrive out of order: created, then gone, and no write after it
    if created and gone and max(gone) >= min(created) and max(written, default=0) <= max(gone):
        return True
    parts = aid.split("/")
    for n in range(2, len(parts)):  # a parent directory renamed away after the last write
        parent = touches.get("/".join(parts[:n]), ())
        moved = [e.last_seen or 0 for _, e in parent if e.relation == "renamed"]
        if moved and max(moved) >= last_write:
            return True
    return False


def _parents(touches: Mapping[str, list[tuple[str, GEdge]]]) -> set[str]:
    """Ids that are the parent directory of another touched path (the children stand for it)."""
    out: set[str] = set()
    for aid in touches:
        parts = aid.split("/")
        out.update("/".join(parts[:n]) for n in range(2, len(parts)))
    return out


def _file_kept(
    e: GEdge,
    facts: FileFacts,
    session: Session,
    agent: bool,
    run_dir: str,
    *,
    inside: dict[str, bool],
) -> bool:
    if e.write is None:
        if agent or e.relation not in READ_RELATIONS or not _inside(facts.path, session, inside):
            return False
    elif not _inside(facts.path, session, inside) and rules.scratch(facts.path):
        return False
    return not rules.incidental(facts.path, run_dir) and facts.path not in session.capture


def _inside(path: str, session: Session, memo: dict[str, bool]) -> bool:
    found = memo.get(path)
    if found is None:
        found = memo[path] = any(path.startswith(cwd.rstrip("/") + "/") for cwd in session.cwds)
    return found


MESSAGE_TYPES = {"user": "user_message", "assistant": "assistant_message", "system": "control"}
MESSAGE_NODE_TYPES = frozenset(MESSAGE_TYPES.values())
"""The evidence node types of messages."""


def add_messages(session: Session, records: Records) -> None:
    """Messages from the session's chat and agent spans in every convention
    (:mod:`otel_bridge.review.messages`), and a model call per chat span.

    Each model call's output is a message of its own: two calls that answered the same text
    are two messages, each at its call's end. Any other sighting (the history a later request
    sends again, an agent span repeating the last answer, an input seen in several requests)
    is the same message as the latest earlier sighting of that role, text and tool calls
    (the earliest, when none is earlier), and otherwise a new one at its earliest time."""
    calls_by_id = {
        str(t.data["call_id"]): t for t in session.of_type("tool_call") if t.data.get("call_id")
    }
    outputs: list[_Sighting] = []
    others: list[_Sighting] = []
    for rid, span in session.spans:
        op = operation(span)
        if op not in ("chat", "invoke_agent"):
            continue
        trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
        if op == "chat":
            model = attr(span, "gen_ai.request.model") or attr(span, "llm.model_name") or ""
            session.add(
                EvidenceNode(
                    id=f"model_call:{trace_id}:{span_id}",
                    type="model_call",
                    session=session.id,
                    label=span.name,
                    time=span.start_time_unix_nano,
                    end=span.end_time_unix_nano,
                    records=[rid],
                    data={"model": model, "response_id": attr(span, "gen_ai.response.id")},
                )
            )
        logs = records.genai_events.get(span_id, ())
        for message in span_messages(span, rid, logs):
            if message.role == "tool":  # a tool's result: given to its tool call
                tool = calls_by_id.get(message.response_id)
                if tool is not None and not tool.data.get("result"):
                    tool.data["result"] = message.text or None
                continue
            if message.role not in MESSAGE_TYPES:
                continue
            time = span.end_time_unix_nano if message.output else span.start_time_unix_nano
            call = span_id if op == "chat" else ""
            sighting = _Sighting(message, time, rid, call, len(outputs) + len(others))
            (outputs if message.output and call else others).append(sighting)
    messages = _Messages()
    for sighting in outputs:
        messages.output(sighting)
    repeats = Counter((x.rid, messages.content(x)) for x in others)
    place: Counter[tuple[str, str]] = Counter()
    for sighting in sorted(others, key=lambda x: (x.time, x.order)):
        key = (sighting.rid, messages.content(sighting))
        messages.repeat(sighting, place[key], repeats[key])
        place[key] += 1
    messages.add_to(session)


@dataclass(frozen=True)
class _Sighting:
    message: Message
    time: int
    rid: str
    call: str
    """The span id of the model call whose output it is ("" for any other sighting)."""
    order: int
    """Its place among the session's sightings in record order."""


@dataclass
class _Group:
    """The sightings of one message."""

    message: Message
    time: int
    order: int
    records: list[str] = field(default_factory=list)


class _Messages:
    """The session's messages, grouped by model call output and by content."""

    def __init__(self) -> None:
        self.by_output: dict[str, _Group] = {}
        self.by_content: dict[str, list[_Group]] = {}

    def output(self, sighting: _Sighting) -> None:
        """A model call's output: one message per call and content (copies of a span merge)."""
        content = self.content(sighting)
        key = json.dumps([sighting.call, content])
        group = self.by_output.get(key)
        if group is None:
            group = self.by_output[key] = _Group(sighting.message, sighting.time, sighting.order)
            self.by_content.setdefault(content, []).append(group)
        self._seen(group, sighting)

    def repeat(self, sighting: _Sighting, place: int, count: int) -> None:
        """Any other sighting: the latest earlier message with its content, else a new one.
        A record that repeats one content ``count`` times (a history holding one answer
        given twice) gives its ``place``-th sighting the ``place``-th of the latest ``count``
        earlier messages, so each earlier message is matched once."""
        content = self.content(sighting)
        known = self.by_content.get(content)
        if not known:
            group = _Group(sighting.message, sighting.time, sighting.order)
            self.by_content[content] = [group]
        else:
            earlier = sorted((g for g in known if g.time <= sighting.time), key=lambda g: g.time)
            group = earlier[max(0, len(earlier) - count + place)] if earlier else known[0]
        self._seen(group, sighting)

    @staticmethod
    def content(sighting: _Sighting) -> str:
        """The message's content key: role, text and requested tool calls."""
        message = sighting.message
        return json.dumps([message.role, message.text, list(message.calls)])

    @staticmethod
    def _seen(group: _Group, sighting: _Sighting) -> None:
        group.time = min(group.time, sighting.time)
        group.order = min(group.order, sighting.order)
        for source in (sighting.rid, sighting.message.record):
            if source and source not in group.records:
                group.records.append(source)

    def add_to(self, session: Session) -> None:
        """Add a node per message, numbered in the order they were first sighted."""
        groups = {id(g): g for gs in self.by_content.values() for g in gs}.values()
        for n, group in enumerate(sorted(groups, key=lambda g: g.order), start=1):
            m = group.message
            node = EvidenceNode(
                id=f"message:{session.trace_id}:{n}",
                type=MESSAGE_TYPES[m.role],
                session=session.id,
                label=(m.text.strip().splitlines() or [m.role])[0][:80],
                time=group.time,
                data={"role": m.role, "text": m.text, "tool_calls": list(m.calls)},
            )
            node.records.extend(group.records)
            session.add(node)


def tool_result_text(session: Session) -> dict[str, str]:
    """tool call id -> its result text (from the span, else the tool message)."""
    return {t.id: str(t.data.get("result") or "") for t in session.of_type("tool_call")}


def workspace_relative(path: str, cwds: Iterable[str]) -> list[str]:
    """``path`` relative to each working directory it lies under."""
    out = []
    for cwd in cwds:
        prefix = cwd.rstrip("/") + "/"
        if path.startswith(prefix):
            out.append(os.path.relpath(path, cwd))
    return out
