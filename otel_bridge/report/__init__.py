"""The run report (``report.md``): what each tool call ran, wrote and reached, in plain words.

Read from a finished graph (``graph.json``, `docs/graph.md`) through its typed facts and edges,
with what was written and reached read by the shared rule of ``otel_bridge.graph.reading`` (a
write, or an open for writing where the file plane sees opens, not writes, as strace and ebpf
do; a connect, or one begun whose completion was not seen):

* each tool call (in time order) → the processes linked to it (``correlated_with_process``) and
  their descendants (``spawned``), each with argv, exit code, how it was linked and at what
  grade → the files those processes wrote, created, renamed or deleted, and the endpoints they
  connected to;
* then what could not be linked, and why: tool calls no process was linked to, processes linked
  to no tool call, files a watcher saw change with no process known (``observed_change``, the
  ``portable`` backend's file plane), and the planes whose observation was degraded (so "no
  file written" is read as "not observed" where the file plane was not complete).

The report states only what the graph holds; an overlap in time is said to be one, never a link.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from otel_bridge.grading import weakest
from otel_bridge.graph import reading
from otel_bridge.graph.document import Graph, GraphEdge, GraphNode
from otel_bridge.identity import reaches_listener
from otel_bridge.linkreasons import unlinked_reason
from otel_bridge.model import (
    BRIDGE_SKIP_ATTR,
    SENDER_SKIP_ATTR,
    AgentFacts,
    CommandFacts,
    EndpointFacts,
    FileFacts,
    Grade,
    ProcessFacts,
    RelationKind,
    ToolCallFacts,
)
from otel_bridge.processors.correlate.parser import normalize_exe
from otel_bridge.stamping import EARLIEST_TIME, FILE_STAMP_LATENESS_NS

_HOW = {
    "traceparent": "it inherited the call's trace context (TRACEPARENT)",
    "resource_pid": "the span's resource named its pid",
    "transport_peer": "it sent the span: the connection the span came over was its",
}


@dataclass(slots=True)
class ProcessRow:
    """One process a tool call ran."""

    node: GraphNode
    how: str
    grade: str
    writes: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CallRow:
    """One tool call and what it ran."""

    node: GraphNode
    command: str
    processes: list[ProcessRow] = field(default_factory=list)


@dataclass(slots=True)
class Report:
    """What :func:`render` prints."""

    calls: list[CallRow]
    unlinked_calls: list[str]
    unlinked_processes: list[str]
    agent_processes: list[str]
    folded: int
    changed_by_unknown: list[str] = field(default_factory=list)
    """Files a watcher saw change while the run ran, the changing process unknown."""
    unplaced_agents: list[str] = field(default_factory=list)
    """Agents no process is linked to (their spans named no observed process)."""
    senders: list[str] = field(default_factory=list)
    """Processes that sent spans naming no pid (``transport_peer``): the agent's own process,
    or a relay between it and the receiver, so never called the agent's."""


def _argv(node: GraphNode) -> str:
    facts = node.facts
    if isinstance(facts, ProcessFacts) and facts.argv is not None:
        return _line(" ".join(facts.argv)) or "(empty argv)"
    return _line(node.label or node.id)


def _path(node: GraphNode) -> str:
    facts = node.facts
    return facts.path if isinstance(facts, FileFacts) else node.label or node.id


def _pid(node: GraphNode) -> str:
    facts = node.facts
    return str(facts.pid) if isinstance(facts, ProcessFacts) else "?"


def _exit(node: GraphNode) -> str:
    facts = node.facts
    if isinstance(facts, ProcessFacts) and facts.exit_code is not None:
        return str(facts.exit_code)
    return "not observed"


def _methods(edge: GraphEdge) -> tuple[str, ...]:
    method = edge.method
    return (method,) if isinstance(method, str) else tuple(method or ())


def _inferred(edge: GraphEdge) -> bool:
    """Whether ``edge`` rests, wholly or in part, on an inferred observation."""
    return edge.inferred is True or edge.inferred == "mixed"


def _how(edge: GraphEdge) -> str:
    method = ", ".join(_methods(edge))
    if _inferred(edge):
        return f"inferred ({method or 'heuristic'}): a likely match, not proof"
    return _HOW.get(method, method or "exact identity")


def _call_label(node: GraphNode) -> str:
    facts = node.facts
    if isinstance(facts, ToolCallFacts):
        return f"{facts.tool} ({facts.call_id})" if facts.call_id else facts.tool
    return node.label or node.id


class _Index:
    def __init__(self, graph: Graph, own: Collection[tuple[str, int]] = ()) -> None:
        self.nodes = {n.id: n for n in graph.nodes}
        self.own = tuple(own)
        """(address, port) where the run's own collector listened: a connection there is the
        workload exporting its telemetry to ``observe``, not an endpoint it chose."""
        self.written: dict[str, list[reading.Effect]] = defaultdict(list)
        self.reached: dict[str, list[reading.Effect]] = defaultdict(list)
        for w in reading.writes(graph):
            self.written[w.process].append(w)
        for r in reading.reached_endpoints(graph):
            self.reached[r.process].append(r)
        self.edges = {e.id: e for e in graph.edges}
        self.out: dict[str, list[GraphEdge]] = defaultdict(list)
        self.into: dict[str, list[GraphEdge]] = defaultdict(list)
        for e in graph.edges:
            self.out[e.source].append(e)
            self.into[e.target].append(e)

    def targets(self, source: str, relations: Iterable[str]) -> list[GraphEdge]:
        rels = set(relations)
        return [e for e in self.out[source] if e.relation in rels]

    def descendants(self, pid: str) -> list[GraphEdge]:
        """The ``spawned`` edges below ``pid``, parents before children."""
        seen, todo, out = {pid}, [pid], []
        while todo:
            for e in self.targets(todo.pop(0), ("spawned",)):
                if e.target not in seen:
                    seen.add(e.target)
                    out.append(e)
                    todo.append(e.target)
        return out

    def writes(self, pid: str) -> list[str]:
        """Files ``pid`` changed, ``path (created, wrote)``; an open for writing (strace, ebpf)
        is said as such, not hidden behind "none observed"."""
        return sorted(_written(w) for w in self.written.get(pid, ()))

    def writes_during(self, pid: str, start: int, end: int) -> tuple[list[str], int, int]:
        """Files ``pid`` changed while ``[start, end]`` ran, and for the changes stamped after
        ``end`` how long after it the latest stamp is and the widest lateness of their records
        (ns).

        A backend that stamps a file record when it reads it may stamp a change made during the
        window after its end: a record states the earliest its change can have happened when
        that is earlier than the backend's pacing period says
        (:data:`~otel_bridge.stamping.EARLIEST_TIME`; an edge keeps its ``first_seen``'s), and
        a record stating none was read within that period
        (:data:`~otel_bridge.stamping.FILE_STAMP_LATENESS_NS`). A change stamped after ``end``
        counts when its earliest time is not after it."""
        out: list[str] = []
        after = widest = 0
        for w in self.written.get(pid, ()):
            hit = False
            for e in w.edges:
                edge = self.edges.get(e)
                if edge is None or edge.first_seen is None:
                    continue
                first = edge.first_seen
                late = _lateness(edge)
                if start <= (edge.last_seen or first) and first - late <= end:
                    hit = True
                    if first > end:  # stamped after the end: made during it, or up to then
                        after, widest = max(after, first - end), max(widest, late)
            if hit:
                out.append(_written(w))
        return sorted(out), after, widest

    def endpoints(self, pid: str) -> list[str]:
        """Endpoints ``pid`` connected to, or began to (said as such), in the graph's order."""
        out: list[str] = []
        for r in self.reached.get(pid, ()):
            facts = self.nodes[r.target].facts if r.target in self.nodes else None
            if isinstance(facts, EndpointFacts) and reaches_listener(
                facts.address, facts.port, self.own
            ):
                continue
            label = r.label
            if r.observed == reading.ATTEMPTED:
                label += " (connect begun, completion not observed)"
            if label not in out:
                out.append(label)
        return out

    def effects(self, row: ProcessRow) -> None:
        row.writes = self.writes(row.node.id)
        row.endpoints = self.endpoints(row.node.id)


def _written(w: reading.Effect) -> str:
    rels = [r for r in w.relations if r in reading.CHANGE_RELATIONS]
    if w.observed == reading.OPENED_FOR_WRITING:
        rels.append("opened for writing")
    return f"{w.label} ({', '.join(sorted(rels))})"


def _lateness(edge: GraphEdge) -> int:
    """How much earlier than ``edge``'s ``first_seen`` its first event can have happened (ns):
    its record's earliest time when stated, else its backends' pacing period (0 for a backend
    that stamps the event itself)."""
    earliest = edge.attrs.get(EARLIEST_TIME)
    if type(earliest) is int and edge.first_seen is not None:
        return max(0, edge.first_seen - earliest)
    return max((FILE_STAMP_LATENESS_NS.get(b, 0) for b in edge.backends), default=0)


def _by_time(nodes: Iterable[GraphNode]) -> list[GraphNode]:
    return sorted(nodes, key=lambda n: (n.first_seen or 0, n.id))


def _call_row(ix: _Index, node: GraphNode) -> CallRow:
    """A tool call's row: its declared command and the processes linked to it (each shell it
    ran its command in, the linked processes, their descendants), each process once."""
    commands = [ix.nodes[e.target] for e in ix.targets(node.id, ("declared_command",))]
    command = next((c.facts.command for c in commands if isinstance(c.facts, CommandFacts)), "")
    row = CallRow(node=node, command=command)
    links = [
        e
        for src in [node.id] + [c.id for c in commands]
        for e in ix.targets(src, ("correlated_with_process",))
    ]
    shown = {e.target for e in links}  # a shell linked itself is said by its own link
    for e in links:
        if any(p.node.id == e.target for p in row.processes):
            continue
        shell = _shell_of(ix, e, command)
        if shell is not None and shell.node.id not in shown:
            row.processes.append(shell)
            shown.add(shell.node.id)
        row.processes.append(ProcessRow(ix.nodes[e.target], _how(e), e.grade))
        for child in ix.descendants(e.target):
            if child.target in shown:  # linked itself: its own row says how
                continue
            shown.add(child.target)
            how = f"its parent pid {_pid(ix.nodes[child.source])} is linked (fork record)"
            row.processes.append(ProcessRow(ix.nodes[child.target], how, child.grade))
    return row


def build(graph: Graph, own_endpoints: Collection[tuple[str, int]] = ()) -> Report:
    """The report of ``graph``; ``own_endpoints``: (address, port) where the run's collector
    listened (``summary.json`` ``collector_endpoints``), left out of the endpoints reached."""
    ix = _Index(graph, own_endpoints)
    calls: list[CallRow] = []
    unlinked_calls: list[str] = []
    linked: set[str] = set()
    for node in _by_time(n for n in graph.nodes if n.kind == "tool_call"):
        row = _call_row(ix, node)
        for p in row.processes:
            ix.effects(p)
            linked.add(p.node.id)
        calls.append(row)
    found = _agents(graph, ix)
    agents = found.stated | found.sent
    for row in calls:
        if not row.processes:
            unlinked_calls.append(_unlinked_call(row, ix, found))
    unlinked = [
        n
        for n in _by_time(graph.nodes)
        if n.kind == "process"
        and n.id not in linked
        and n.id not in agents
        and isinstance(n.facts, ProcessFacts)
        and n.facts.argv is not None
    ]
    return Report(
        calls=calls,
        unlinked_calls=unlinked_calls,
        unlinked_processes=_unlinked_processes(unlinked, ix, _agent_context(graph, ix)),
        agent_processes=found.lines,
        senders=found.sender_lines,
        folded=sum(1 for n in graph.nodes if n.kind == "runtime_reads"),
        unplaced_agents=found.unplaced,
        changed_by_unknown=sorted(
            {
                _path(ix.nodes[e.target])
                for e in graph.edges
                if e.relation == RelationKind.OBSERVED_CHANGE
                and e.target in ix.nodes
                and ix.nodes[e.target].kind == "file"
            }
        ),
    )


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "tcsh", "csh"})
"""Shells whose ``-c`` runs a command line (``subprocess.run(cmd, shell=True)`` runs ``sh``)."""


def _shell_of(ix: _Index, link: GraphEdge, command: str) -> ProcessRow | None:
    """The shell that forked the process ``link`` ties to a call, when its argv is exactly
    ``<shell> -c <command>`` (the call's declared command): the call ran that shell too.

    The correlator matches a declared command to the process that runs it, not to the shell
    around it (whose argv has neither its head nor its tail), so the shell is reached through
    the fork record and its argv, said as such, at the weakest grade of the two edges: never
    stronger than the link it goes through."""
    for fork in ix.into[link.target]:
        parent = ix.nodes.get(fork.source)
        if fork.relation != "spawned" or parent is None:
            continue
        argv = parent.facts.argv if isinstance(parent.facts, ProcessFacts) else None
        if not (command and argv and len(argv) == 3 and argv[1] == "-c" and argv[2] == command):
            continue
        shell = normalize_exe(argv[0])
        if shell not in _SHELLS:
            continue
        how = (
            f"its argv is `{shell} -c` with the call's declared command, and it is the parent "
            f"of pid {_pid(ix.nodes[link.target])} (fork record)"
        )
        if _inferred(link):
            how += ", whose link is inferred: a likely match, not proof"
        grades = [Grade(g) if g in Grade.__members__ else Grade.U for g in (link.grade, fork.grade)]
        return ProcessRow(parent, how, weakest(grades))
    return None


_SENT_BY = (
    " (their resource names no pid; the connection they came over was this process's: the "
    "agent's own process, unless it relays spans it received)"
)


_SENDER_WHY = {
    "no_connection": "the host plane saw no followed process hold the connection the spans "
    "came over (a connection opened and closed between two socket scans, without a socket "
    "tracer, is missed)",
    "several_processes": "several followed processes were seen holding the connection the "
    "spans came over (the same client port reused): not one sender",
    "not_loopback": "the spans came from another host (not a loopback connection), whose "
    "sockets this host's plane does not see",
}
_SENDER_UNKNOWN = "no sender of the spans was found from the connection they came over"
_NO_SENDERS_END = (
    "the host plane recorded connections without the sender's end (its local port), as the "
    "ebpf backend always does and strace for a socket closed before it read its end: the "
    "connection the spans came over could not be matched to a process"
)


@dataclass(slots=True)
class _Agents:
    stated: set[str]
    """Processes the agent's spans named (a stated pid)."""
    sent: set[str]
    """Processes that sent spans naming no pid (the agent's, or a relay)."""
    lines: list[str]
    sender_lines: list[str]
    unplaced: list[str]


def _agents(graph: Graph, ix: _Index) -> _Agents:
    """The agent's processes and senders, their report lines (stated, then sent by), and why
    agents (or models no agent called) have none."""
    agent_edges = [
        e
        for n in graph.nodes
        if n.kind == "agent"
        for e in ix.targets(n.id, ("correlated_with_process",))
        if not _in_context(e)
    ]
    # A model call no agent made (an instrumented client: openai-v2 emits chat spans only)
    # joins the process that requested it: that process is the agent's too.
    callers = _model_callers(graph, ix)
    agents = {e.target for e in agent_edges} | {e.source for e in callers}
    # Linked only by the connection the spans came over: the process *sent* them.
    stated = {e.target for e in agent_edges if "transport_peer" not in _methods(e)}
    stated |= {e.source for e in callers if "transport_peer" not in _methods(e)}
    models: dict[str, list[str]] = defaultdict(list)
    for e in callers:
        models[e.source].append(ix.nodes[e.target].label or e.target)
    lines = [
        f"pid {_pid(ix.nodes[a])} `{_argv(ix.nodes[a])}`"
        + _requested(models.get(a, []))
        + _effects(ix, [ix.nodes[a]])
        for a in sorted(stated)
    ]
    senders = [
        f"pid {_pid(ix.nodes[a])} `{_argv(ix.nodes[a])}`"
        + _SENT_BY
        + _listened(ix, a)
        + _sent_calls(models.get(a, []))
        + _effects(ix, [ix.nodes[a]])
        for a in sorted(agents - stated)
    ]
    called = {e.target for e in callers}
    unplaced = [
        _unplaced_agent(n, ix)
        for n in _by_time(graph.nodes)
        if n.kind == "agent"
        and not [e for e in ix.targets(n.id, ("correlated_with_process",)) if not _in_context(e)]
    ] + [
        _unplaced_model(n, ix)
        for n in _by_time(graph.nodes)
        if n.kind == "model" and SENDER_SKIP_ATTR in n.attrs and n.id not in called
    ]
    return _Agents(stated, agents - stated, lines, senders, unplaced)


def _in_context(edge: GraphEdge) -> bool:
    """Whether an agent's link to a process says only that the process carried the agent's
    trace context (``traceparent``), not a tool call's: a process started on the agent's behalf
    (its runtime's helpers, a command no tool call declared), not the agent's own process."""
    return _methods(edge) == ("traceparent",)


def _agent_context(graph: Graph, ix: _Index) -> set[str]:
    """The processes that carried an agent's trace context (:func:`_in_context`)."""
    return {
        e.target
        for n in graph.nodes
        if n.kind == "agent"
        for e in ix.targets(n.id, ("correlated_with_process",))
        if _in_context(e)
    }


def _model_callers(graph: Graph, ix: _Index) -> list[GraphEdge]:
    """The exact ``process requested model`` edges (a stated pid, or the sender of the spans);
    an inferred one names no caller."""
    return [
        e
        for e in graph.edges
        if e.relation == RelationKind.REQUESTED
        and e.inferred is not True
        and e.source in ix.nodes
        and ix.nodes[e.source].kind == "process"
        and e.target in ix.nodes
        and ix.nodes[e.target].kind == "model"
    ]


def _requested(models: list[str]) -> str:
    if not models:
        return ""
    return f", which made the model calls to {_names(models)}"


def _sent_calls(models: list[str]) -> str:
    if not models:
        return ""
    return f"; the spans it sent include model calls to {_names(models)}"


def _names(models: list[str]) -> str:
    return ", ".join(f"`{_md(m)}`" for m in sorted(set(models)))


def _listened(ix: _Index, pid: str) -> str:
    """A caution when the sender also listened for TCP connections: a relay (a local
    OpenTelemetry Collector) receives the spans it sends over TCP, and is then not the agent. A
    UDP port it was bound to (a resolver's, a metrics client's) is no such sign."""
    ports = sorted(
        {
            ix.nodes[e.target].label
            for e in ix.targets(pid, (RelationKind.LISTENED_ON,))
            if _is_tcp(ix.nodes[e.target])
        }
    )
    if not ports:
        return ""
    return (
        f"; it also listened on {', '.join(ports)}: it may be a relay (a local OpenTelemetry "
        "Collector) that forwarded another process's spans, and that process is then unknown"
    )


def _sender_why(node: GraphNode, ix: _Index) -> str:
    why = str(node.attrs.get(SENDER_SKIP_ATTR))
    if why == "no_connection" and _without_senders_end(ix):
        return _NO_SENDERS_END
    return _SENDER_WHY.get(why, _SENDER_UNKNOWN)


def _without_senders_end(ix: _Index) -> bool:
    """True when the host plane recorded a TCP connection of a process without its sender's
    end (``network.local.port``): strace for a connect that did not complete inside the call,
    ebpf always. (OTLP comes over TCP: a UDP socket's ends say nothing about a sender.)"""
    return any(
        e.relation in (RelationKind.CONNECTED_TO, RelationKind.ATTEMPTED_CONNECT)
        and "network.local.port" not in e.attrs
        and e.source in ix.nodes
        and ix.nodes[e.source].kind == "process"
        and e.target in ix.nodes
        and _is_tcp(ix.nodes[e.target])
        for e in ix.edges.values()
    )


def _is_tcp(node: GraphNode) -> bool:
    """An endpoint node of a TCP socket (one whose transport is unstated counts as TCP)."""
    facts = node.facts
    return not isinstance(facts, EndpointFacts) or facts.transport == "tcp"


def _unplaced_agent(node: GraphNode, ix: _Index) -> str:
    """Why agent ``node`` has no process: its spans named none this run observed."""
    facts = node.facts
    who = f"agent `{_md(node.label or node.id)}`"
    if isinstance(facts, AgentFacts):
        who += f" (service {_md(facts.service)})"
    return (
        f"{who} is linked to no process: its spans' resource named no process this run "
        f"observed ({_NO_PID}), and "
        + _sender_why(node, ix)
        + ", so its own process, what that process changed and the connections of its model "
        "calls are not joined to it"
    )


def _unplaced_model(node: GraphNode, ix: _Index) -> str:
    """Why the model calls to ``node`` (no agent made them) have no calling process."""
    return (
        f"the model calls to `{_md(node.label or node.id)}` are linked to no process: their "
        f"spans' resource named no process this run observed ({_NO_PID}), and "
        + _sender_why(node, ix)
        + ", so the process that made them and its connections are not joined to them"
    )


_NO_PID = (
    "`process.pid`, which the OpenTelemetry Python SDK states only with "
    "`OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process`"
)


_PIDS_SHOWN = 3
"""Pids named in one folded line (the first ones in time)."""
_EFFECTS_SHOWN = 5
"""Files (and endpoints) named after an unlinked process; graph.json has the rest."""


def _effects(ix: _Index, group: list[GraphNode]) -> str:
    """What the processes of ``group`` changed and the endpoints they reached (not the run's
    own collector), said after their line ("" when nothing was observed): a process linked to
    no tool call, or the agent's own, still shows what it did."""
    parts = []
    for verb, items in (
        ("changed", sorted({w for n in group for w in ix.writes(n.id)})),
        ("reached", list(dict.fromkeys(e for n in group for e in ix.endpoints(n.id)))),
    ):
        if items:
            more = len(items) - _EFFECTS_SHOWN
            shown = ", ".join(items[:_EFFECTS_SHOWN]) + (
                f" and {more} more (graph.json)" if more > 0 else ""
            )
            parts.append(f"{verb} {shown}")
    if not parts:
        return ""
    return f"; {'it' if len(group) == 1 else 'they'} {' and '.join(parts)}"


_AGENT_CONTEXT = ": it carried the agent's trace context (TRACEPARENT), not a tool call's"


def _unlinked_processes(
    nodes: list[GraphNode], ix: _Index, in_context: Collection[str] = ()
) -> list[str]:
    """One line per unlinked process, in time order, with the files it changed and the
    endpoints it reached; processes that ran the same executable with the same argv and the
    same exit code share one line with their count (a workload that runs ``true`` 125 times
    gets one line, not 125), placed where the first of them ran. A process in ``in_context``
    carried an agent's trace context, not a tool call's (:func:`_in_context`): its line says so."""
    groups: dict[tuple[str, str, str, bool], list[GraphNode]] = {}
    for n in nodes:
        facts = n.facts
        exe = (facts.executable_path or "") if isinstance(facts, ProcessFacts) else ""
        groups.setdefault((exe, _argv(n), _exit(n), n.id in in_context), []).append(n)
    lines = []
    for (_exe, argv, code, context), group in groups.items():
        why = _AGENT_CONTEXT if context else ""
        if len(group) == 1:
            lines.append(
                f"pid {_pid(group[0])} `{argv}` (exit {code}) ran, but no tool call is linked to it"
                + why
                + _effects(ix, group)
            )
            continue
        pids = ", ".join(_pid(n) for n in group[:_PIDS_SHOWN])
        more = f" and {len(group) - _PIDS_SHOWN} more" if len(group) > _PIDS_SHOWN else ""
        lines.append(
            f"{len(group)} processes `{argv}` (exit {code}; pids {pids}{more}) ran, but no "
            "tool call is linked to any of them" + why + _effects(ix, group)
        )
    return lines


def _why(row: CallRow) -> str:
    """Why no process is linked to ``row``'s call, from what the correlator recorded for it."""
    reason = row.node.attrs.get(BRIDGE_SKIP_ATTR)
    return unlinked_reason(reason if isinstance(reason, str) else None, row.command)[1]


def _unlinked_call(row: CallRow, ix: _Index, agents: _Agents) -> str:
    what = f"`{_md(row.command)}`" if row.command else "no command"
    text = f"{_call_label(row.node)} declared {what}; no process was linked to it: {_why(row)}"
    start, end = row.node.first_seen, row.node.last_seen
    if start is None or end is None:
        return text
    during: list[str] = []
    after = widest = 0
    who = set()
    for agent in sorted(agents.stated | agents.sent):
        files, late_by, late = ix.writes_during(agent, start, end)
        during += files
        after, widest = max(after, late_by), max(widest, late)
        if files:  # a sender may be a relay: said as what it is
            who.add("the agent's process" if agent in agents.stated else _SENDER)
    if during:
        when = "While it ran"
        if after:  # a change stamped after the end: it was made before its stamp
            when += (
                f" or within {_ms(after)} after it ended (the file plane stamps a change when "
                f"it reads it, here up to {_ms(widest)} after the change)"
            )
        text += (
            f". {when}, {' and '.join(sorted(who))} changed {', '.join(map(_md, during))} "
            "(same time only: not a link)"
        )
    return text


_SENDER = "the process that sent the agent's spans"


def _ms(ns: int) -> str:
    """``ns`` in milliseconds, rounded up to a tenth (a lateness is never said smaller)."""
    return f"{math.ceil(ns / 100_000) / 10:g} ms"


def _line(text: str) -> str:
    """``text`` on one line (an argv with a newline, as ``python -c`` scripts have, would
    otherwise break its list item or table row)."""
    return text.replace("\r", " ").replace("\n", " ")


def _md(text: str) -> str:
    """``text`` safe inside a Markdown table cell."""
    return _line(text).replace("|", "\\|")


def _cell(items: list[str]) -> str:
    return "<br>".join(map(_md, items)) if items else "none observed"


def render(report: Report, *, title: str, planes: Mapping[str, str] | None = None) -> str:
    """The report as Markdown."""
    lines = [f"# {_line(title)}", ""]
    if report.agent_processes:
        lines += [f"Agent process: {', '.join(report.agent_processes)}", ""]
    for sender in report.senders:
        lines += [f"Spans sent by {sender}", ""]
    lines += ["## Tool calls", ""]
    if not report.calls:
        lines += [
            "No tool call spans arrived (`execute_tool` or TOOL spans): the graph has no tool "
            "call to link a process to. Tool calls a coding agent told only in log events "
            "(Claude Code, Codex, Gemini CLI) are read by the review: review.json has each "
            "with the processes it attributes to it by time, review.md's workflow names them.",
            "",
        ]
    else:
        lines += [
            "| tool call | process (argv) | exit | linked because | grade | files written "
            "| endpoints reached |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for call in report.calls:
            lines += _call_rows(call)
        lines.append("")
    lines += ["## Not linked, and why", ""]
    notes = [*report.unplaced_agents, *report.unlinked_calls, *report.unlinked_processes]
    if report.changed_by_unknown:
        notes.append(_changed_by_unknown(report.changed_by_unknown))
    for plane, state in sorted((planes or {}).items()):
        if not state.startswith("available"):
            notes.append(
                f"the {plane} plane was {state}; what it did not see is unknown, not absent"
            )
    lines += [f"- {n}" for n in notes] or ["- everything the agent reported was linked"]
    if report.folded:
        lines += [
            "",
            f"Interpreter and shared-library reads of {report.folded} process(es) are folded "
            "into one `runtime_reads` node each in graph.json (all events are in os.jsonl).",
        ]
    return "\n".join(lines) + "\n"


def _changed_by_unknown(paths: list[str]) -> str:
    more = len(paths) - _EFFECTS_SHOWN
    shown = ", ".join(map(_line, paths[:_EFFECTS_SHOWN]))
    shown += f" and {more} more (graph.json)" if more > 0 else ""
    return (
        f"{shown} changed while the run ran, but the file plane does not know which process "
        "changed them (a watcher of paths, not of processes): linked to no process or tool call"
    )


def _call_rows(call: CallRow) -> list[str]:
    label = _call_label(call.node)
    if call.command:
        label += f": `{_md(call.command)}`"
    if not call.processes:
        return [f"| {label} | none linked | | | | | |"]
    rows = []
    for i, p in enumerate(call.processes):
        rows.append(
            f"| {label if i == 0 else ''} | pid {_pid(p.node)} `{_md(_argv(p.node))}` "
            f"| {_exit(p.node)} | {p.how} | {p.grade} | {_cell(p.writes)} "
            f"| {_cell(p.endpoints)} |"
        )
    return rows


def report_text(doc: Mapping[str, Any], *, title: str, planes: Mapping[str, str]) -> str:
    """``report.md`` of a graph document (the ``graph.json`` object)."""
    return render(build(graph_of(doc)), title=title, planes=planes)


def graph_of(doc: Mapping[str, Any]) -> Graph:
    """The typed graph of a parsed ``graph.json`` document, not schema-validated.

    ``msgspec.convert`` builds the typed nodes and edges straight from the parsed document: a
    tenth of the CPU of :meth:`Graph.from_dict`, which first copies the whole document (at the
    end of every ``observe``, on its critical path). A document it cannot convert is read by
    ``from_dict``, which gives the same graph for every document both accept (tested) and names
    what is wrong otherwise."""
    try:
        return msgspec.convert(doc, Graph)
    except msgspec.ValidationError:
        return Graph.from_dict(doc, validate=False)
