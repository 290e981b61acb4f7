"""Review sessions built from coding-agent events (:mod:`otel_bridge.importers.codingagents`).

One session per (agent, session id). Evidence nodes: ``user_message`` / ``assistant_message`` /
``control`` (prompts and rollout messages), ``tool_call`` (grouped by call id: decision, call,
output and result events of one call are one node; Gemini CLI's ``tool_call`` is one finished
call), ``model_call`` (``api_request`` / ``api_error``; Gemini CLI's ``api_request`` joined
with the ``api_response`` or ``api_error`` that ended it), and, from Gemini CLI's
``api_response`` text, ``assistant_message``. Processes are attached afterwards by the review's
own agent-process rules (:func:`otel_bridge.review.evidence.add_agent_children`): the agent
process is the one whose pid the events' resource names, else the run's root process, and each
child it started inside a tool call's stated window is attributed to that call (rule
``tool_window``, inferred).
"""

from __future__ import annotations

import os
import urllib.parse
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable

import orjson

from otel_bridge.identity import canonical_ip
from otel_bridge.importers.codingagents import (
    WINDOW_SLACK_NS,
    AgentEvent,
    events_from_streams,
    events_from_transcript,
    gemini_response_text,
    message_text,
    tool_output,
)
from otel_bridge.model import EndpointFacts, ProcessFacts
from otel_bridge.review.evidence import (
    CONNECT_RELATIONS,
    MESSAGE_NODE_TYPES,
    GraphIndex,
    Session,
    process_node,
)
from otel_bridge.review.records import Records
from otel_bridge.review.types import EvidenceNode
from otel_bridge.rundir import CORRELATED_STREAM, SUMMARY

REDACTED = frozenset({"[REDACTED]", "<REDACTED>", "REDACTED"})
"""What the agents log instead of a prompt whose text logging is off (it is then unknown)."""

CONTROL_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md")
"""Codex puts its environment and instructions in ``user`` messages: they are context the agent
was given (``control``), not what the user asked."""


def build_sessions(events: Iterable[AgentEvent]) -> list[Session]:
    """The sessions of ``events``, in order of first event."""
    grouped: dict[tuple[str, str], list[AgentEvent]] = defaultdict(list)
    for e in events:
        grouped[(e.agent, e.session)].append(e)
    sessions = []
    for (agent, key), group in grouped.items():
        group.sort(key=lambda e: (e.time or 0, record_order(e.record)))
        session = Session(id=f"session:{agent}:{key}", trace_id=key, spans=[])
        session.agents.append(f"agent:{agent}")
        if agent == "gemini_cli":
            _gemini_events(session, group)
        else:
            _agent_events(session, group)
        times = [t for n in session.nodes.values() for t in (n.time, n.end) if t is not None]
        session.start, session.end = (min(times), max(times)) if times else (None, None)
        sessions.append(session)
    sessions.sort(key=lambda s: (s.start or 0, s.id))
    return sessions


def record_order(record: str) -> tuple[str, int, int]:
    """A record id (``<file>:<line>`` or ``<file>:<line>.<n>``) as a sort key: by file, then
    line and record number as numbers (``x:1.10`` after ``x:1.9``)."""
    name, _, rest = record.rpartition(":")
    line, _, n = rest.partition(".")
    try:
        return name, int(line), int(n or 0)
    except ValueError:
        return record, 0, 0


def _agent_events(session: Session, group: list[AgentEvent]) -> None:
    """Claude Code's and Codex's events (and Codex rollout items) of one session, in order."""
    pending: dict[str, list[AgentEvent]] = defaultdict(list)
    when = [e.time for e in group if e.time is not None]  # sorted: the group is
    for e in group:
        if e.kind == "tool_decision" and not _has_call_id(e):
            pending[str(e.attrs.get("tool_name"))].append(e)  # joined to its result below
            continue
        if e.kind == "tool_result" and not _has_call_id(e):
            _pair(session, e, pending[str(e.attrs.get("tool_name"))], when)
            continue
        _add_event(session, e)
    for left in sorted((d for ds in pending.values() for d in ds), key=lambda d: d.record):
        _add_event(session, left)  # a decision whose result was not seen: a call, unfinished
        session.nodes[f"tool_call:{session.trace_id}:{left.record}"].end = None  # not seen


def _gemini_events(session: Session, group: list[AgentEvent]) -> None:
    """Gemini CLI's events of one session, in order: each ``api_request`` joined with the
    response or error that ended it, each tool call's window (:func:`_gemini_window`)."""
    requests: dict[tuple[str, str], list[AgentEvent]] = defaultdict(list)
    responses: dict[str, list[tuple[int, str]]] = defaultdict(list)  # prompt -> (time, role)
    calls: dict[str, list[int]] = defaultdict(list)  # prompt id -> tool_call event times
    prompts: dict[str, int] = {}  # prompt id -> the user prompt's time
    for e in group:
        prompt = str(e.attrs.get("prompt_id") or "")
        if e.kind == "api_request":
            requests[_request_key(e)].append(e)  # one model call with its response below
            continue
        _add_event(session, e)
        if e.kind in ("api_response", "api_error"):
            waiting = requests[_request_key(e)]
            if waiting:
                model_call = session.nodes[f"model_call:{session.trace_id}:{e.record}"]
                model_call.records.insert(0, waiting.pop(0).record)
            if e.kind == "api_response" and e.time is not None:
                responses[prompt].append((e.time, str(e.attrs.get("role") or "")))
        elif e.kind == "tool_call":
            _gemini_window(session, e, responses[prompt], calls[prompt], prompts.get(prompt))
            if e.time is not None:
                calls[prompt].append(e.time)
        elif e.kind == "user_prompt" and e.time is not None:
            prompts.setdefault(prompt, e.time)
    for left in sorted((r for rs in requests.values() for r in rs), key=lambda r: r.record):
        _add_event(session, left)  # a request whose response was not seen: unfinished
        session.nodes[f"model_call:{session.trace_id}:{left.record}"].end = None


def _add_event(session: Session, e: AgentEvent) -> None:
    if e.kind in ("user_prompt", "message"):
        _message(session, e)
    elif e.kind in ("api_request", "api_error", "api_response"):
        _model_call(session, e)
        if e.kind == "api_response":
            _response_text(session, e)
    elif e.kind in ("tool_decision", "tool_result") or "call" in e.kind:
        _tool_event(session, e)
    # conversation_starts: the session's existence and model only; nothing to add


def _message(session: Session, e: AgentEvent) -> None:
    if e.kind == "user_prompt":
        prompt = e.attrs.get("prompt")
        logged = isinstance(prompt, str) and prompt not in REDACTED
        role, text = "user", prompt if logged else None
    else:
        role, text = str(e.attrs.get("role") or ""), message_text(e.attrs)
    kind = {"user": "user_message", "assistant": "assistant_message"}.get(role, "control")
    if role == "user" and text and text.lstrip().startswith(CONTROL_PREFIXES):
        kind = "control"
    source = e.record.rpartition(":")[0]
    for node in session.of_type(kind):  # the OTel prompt event and the rollout both carry it
        same = node.data["text"] == text and text is not None
        if same and all(r.rpartition(":")[0] != source for r in node.records):  # another source
            node.records.append(e.record)
            return
    _new_message(session, e, kind, role, text)


def _new_message(session: Session, e: AgentEvent, kind: str, role: str, text: str | None) -> None:
    """A message node of ``kind`` from event ``e``, numbered in the session's messages."""
    n = sum(1 for x in session.nodes.values() if x.type in MESSAGE_NODE_TYPES)
    session.add(
        EvidenceNode(
            id=f"message:{session.trace_id}:{n + 1}",
            type=kind,
            session=session.id,
            label=((text or "").strip().splitlines() or [f"{role} prompt (text not logged)"])[0][
                :80
            ],
            time=e.time,
            records=[e.record],
            data={"role": role, "text": text, "tool_calls": []},
        )
    )


def _response_text(session: Session, e: AgentEvent) -> None:
    """Gemini CLI's ``api_response`` of the agent's own model call (``role`` ``main``) states
    the model's response (``response_text``, while prompt logging is on, its default): its text
    is an assistant message at the response's time (:func:`gemini_response_text`). A response of
    only function calls has none. Responses of Gemini CLI's utility and tool-internal model
    calls (another ``role``, or none stated: whose call it was is unknown) are not the agent's
    messages (``events_from_streams`` records a coverage record for the latter)."""
    if e.attrs.get("role") != "main":
        return
    text = gemini_response_text(e.attrs.get("response_text"))
    if text is None or text in REDACTED:
        return
    _new_message(session, e, "assistant_message", "assistant", text)


def _model_call(session: Session, e: AgentEvent) -> None:
    duration = _ms(e.attrs.get("duration_ms"))
    start = e.time - duration if e.time is not None and duration is not None else e.time
    model = e.attrs.get("model")
    session.add(
        EvidenceNode(
            id=f"model_call:{session.trace_id}:{e.record}",
            type="model_call",
            session=session.id,
            label=f"{e.kind} {model or ''}".strip(),
            time=start,
            end=e.time,
            records=[e.record],
            data={"model": model if isinstance(model, str) else "", "response_id": None},
        )
    )


def _ms(value: object) -> int | None:
    try:
        return int(str(value)) * 1_000_000
    except ValueError:
        return None


BATCH_NS = 5_000_000
"""Tool calls a Gemini CLI version logs together (every call of a batch, when the last
finished) are logged within this of each other; one logged earlier than that ended before."""


def _gemini_window(
    session: Session,
    e: AgentEvent,
    responses: list[tuple[int, str]],
    earlier: list[int],
    prompted: int | None,
) -> None:
    """The window of Gemini CLI's ``tool_call`` ``e`` (its node already made from the event).

    * A rejected call (``decision`` ``reject``) did not run: no window, an instant at its event.
    * ``start_time``/``end_time`` (epoch ms, logged since early 2026): the window they state
      (rule ``stated_times``), widened by whole-millisecond rounding.
    * Else the event's time bounds the end from above: Gemini CLI logs a call once it finished,
      and older versions log every call of a batch when the last of them finished, so the start
      lies between the model response that asked for the call and the event's time less
      ``duration_ms`` (the stated start). When the responses state their ``role``, the asking
      response is the agent's own (``main``) last one not after the stated start. Otherwise it
      came after every call of an earlier batch had ended (``earlier``: the event times of the
      prompt's earlier calls; else after the prompt, ``prompted``), and a model call made inside
      a tool of the batch answers later: the window opens at the earliest response of the prompt
      after the earlier batch and not after the stated start. Either way (rule
      ``since_model_response``) it holds the start wherever it was. The agent's own writes count
      for the call only from the stated start (``Session.write_from``): Gemini CLI writes its
      chat file after each response. With no such response the stated window stays (a call
      logged on its own is logged when it ends).
    """
    node = session.nodes[f"tool_call:{session.trace_id}:{e.record}"]
    a = e.attrs
    if a.get("decision") == "reject":
        node.time = node.end = e.time
        node.data["rule"] = "rejected"
        return
    start_ms, end_ms = _number(a.get("start_time")), _number(a.get("end_time"))
    if start_ms is not None and (e.time is None or start_ms * 1_000_000 <= e.time):
        node.time = start_ms * 1_000_000 - WINDOW_SLACK_NS
        if end_ms is not None and end_ms >= start_ms:
            node.end = (end_ms + 1) * 1_000_000  # the stated end is truncated to whole ms
        node.data["rule"] = "stated_times"
        return  # (a start after the event's own time is not a start: the window below)
    duration = _ms(a.get("duration_ms"))
    if e.time is None or duration is None:
        return
    stated = e.time - duration
    if any(role for _, role in responses):  # the agent's own responses are known
        asked = [t for t, role in responses if role == "main" and t <= stated]
        opened = max(asked) if asked else None
    else:
        batches = [t for t in earlier if t < e.time - BATCH_NS]
        floor = max(batches) if batches else prompted
        asked = [t for t, _ in responses if (floor is None or t > floor) and t <= stated]
        opened = min(asked) if asked else None
    if opened is not None:
        node.time = opened
        node.data["rule"] = "since_model_response"
        session.write_from[node.id] = stated - WINDOW_SLACK_NS


def _number(value: object) -> int | None:
    """A whole number attribute (OTLP/JSON gives 64-bit integers as strings; a double is
    truncated), else None."""
    if isinstance(value, bool):
        return None
    try:
        return int(float(str(value)))
    except ValueError:
        return None


def _request_key(e: AgentEvent) -> tuple[str, str]:
    """Gemini CLI's ``api_request`` and the ``api_response`` or ``api_error`` that ends it share
    the prompt id and the model call's ``role`` (joined in order). Not the model: a response
    states the model version that answered, the request the model asked for."""
    return str(e.attrs.get("prompt_id") or ""), str(e.attrs.get("role") or "")


def _has_call_id(e: AgentEvent) -> bool:
    return bool(e.attrs.get("call_id") or e.attrs.get("tool_use_id") or e.attrs.get("id"))


def _pair(session: Session, e: AgentEvent, decisions: list[AgentEvent], when: list[int]) -> None:
    """A result that names no call (Claude Code): one tool call, joined with the earliest
    pending decision for the same tool (rule ``decision_order``, recorded on the node).

    The call's window opens at the decision instead of the stated start only when that join is
    certain enough to widen a window by: the decision was the only one pending for the tool,
    and no other event of the session (``when``: every event time, sorted) came between it and
    the stated start (a decision left over from an interrupted call is not this call's)."""
    _tool_event(session, e)
    node = session.nodes[f"tool_call:{session.trace_id}:{e.record}"]
    # a result that states its decision is joined only with a decision that says the same (a
    # rejected call of the same tool before it is not this call)
    stated = e.attrs.get("decision")
    matching = [
        i for i, d in enumerate(decisions) if stated is None or d.attrs.get("decision") == stated
    ]
    if matching:
        alone = len(matching) == 1
        decision = decisions.pop(matching[0])
        node.records.insert(0, decision.record)
        node.data["decision"] = decision.attrs.get("decision")
        node.data["rule"] = "decision_order"
        # The decision is made before the tool runs; the stated start (result time minus
        # duration) is late by however long the agent took to report the result, which
        # can be longer than the call's first child takes to appear on a loaded machine.
        t, stated_start = decision.time, node.time
        if t is not None and alone and (stated_start is None or t < stated_start):
            between = bisect_left(when, stated_start) - bisect_right(when, t) if stated_start else 0
            if between <= 0:
                node.time = t


def _call_id(e: AgentEvent) -> str:
    found = e.attrs.get("call_id") or e.attrs.get("tool_use_id") or e.attrs.get("id")
    return str(found) if found else e.record  # Claude Code events name no call: one per result


def _tool_event(session: Session, e: AgentEvent) -> None:
    call_id = _call_id(e)
    node = session.nodes.get(f"tool_call:{session.trace_id}:{call_id}")
    if node is None:
        node = _new_tool_call(session, e, call_id)
    node.records.append(e.record) if e.record not in node.records else None
    a = e.attrs
    if e.kind in ("function_call", "local_shell_call", "custom_tool_call"):
        node.time = e.time
        node.data["tool"] = a.get("name") or ("shell" if e.kind == "local_shell_call" else None)
        arguments = a.get("arguments") or a.get("input") or a.get("action")
        node.data["arguments"] = arguments if isinstance(arguments, str | None) else str(arguments)
    elif e.kind.endswith("_output"):
        node.end = e.time
        node.data["result"], node.data["exit_code"] = tool_output(a.get("output"))
    elif e.kind == "tool_decision":
        node.data["decision"] = a.get("decision")
        node.data["tool"] = node.data["tool"] or a.get("tool_name")
    elif e.kind in ("tool_result", "tool_call"):  # Gemini CLI's tool_call: a finished call
        _tool_result(node, e)


def _new_tool_call(session: Session, e: AgentEvent, call_id: str) -> EvidenceNode:
    tool = e.attrs.get("tool_name") or e.attrs.get("name") or e.attrs.get("function_name")
    return session.add(
        EvidenceNode(
            id=f"tool_call:{session.trace_id}:{call_id}",
            type="tool_call",
            session=session.id,
            label=str(tool or e.kind),
            time=e.time,
            end=e.time,
            data={
                "tool": tool,
                "call_id": call_id if call_id != e.record else None,
                "arguments": None,
                "result": None,
                "status": "unset",
                "decision": None,
                "in_graph": False,
                "processes": [],
                "links": [],
            },
        )
    )


def _tool_result(node: EvidenceNode, e: AgentEvent) -> None:
    a = e.attrs
    node.data["tool"] = node.data["tool"] or a.get("tool_name") or a.get("function_name")
    node.label = str(node.data["tool"] or node.label)
    success = str(a.get("success")).lower()
    node.data["status"] = {"true": "ok", "false": "error"}.get(success, "unset")
    if node.data["arguments"] is None:
        args = a.get("arguments") or a.get("tool_parameters") or a.get("function_args")
        node.data["arguments"] = args if isinstance(args, str) else None
    if node.data["result"] is None and isinstance(a.get("output"), str):
        node.data["result"] = a["output"]
    if a.get("decision") is not None and node.data["decision"] is None:
        node.data["decision"] = a.get("decision")
    duration = _ms(a.get("duration_ms"))
    if e.time is not None:
        node.end = max(node.end or 0, e.time)
        if duration is not None:
            stated = e.time - duration - WINDOW_SLACK_NS
            node.time = min(node.time or stated, stated)


Peer = tuple[str, int, int]
"""A transport peer: (sender address, sender port, the receiver's or mux's port)."""


def agent_process(
    pids: Iterable[int | None],
    index: GraphIndex,
    otlp_port: int | None,
    peers: Iterable[Peer] = (),
) -> tuple[str | None, str]:
    """The graph process of the agent and how it was found (first rule that names exactly one):

    * ``resource_pid``: the process with a pid the events' resource states (``process.pid``);
    * ``transport_peer``: the process observed holding the sender's end of the loopback
      connections the events came over (their transport ``peers``, as the receiver recorded
      them): it sent the events;
    * ``otlp_sender``: the process observed connecting to the run's own OTLP endpoint (the agent
      sends its events there; ``summary.json`` ``otlp.endpoint``);
    * ``run_root``: the only process of the run no observed process spawned.
    """
    wanted = {p for p in pids if p}
    procs = {nid: n.facts for nid, n in index.nodes.items() if isinstance(n.facts, ProcessFacts)}
    by_pid = [nid for nid, f in procs.items() if f.pid in wanted]
    if len(by_pid) == 1:
        return by_pid[0], "resource_pid"
    held = _holders(index, procs, set(peers))
    if len(held) == 1:
        return held.pop(), "transport_peer"
    senders = sorted(
        {
            nid
            for nid in procs
            for e in index.out_edges(nid, CONNECT_RELATIONS)
            if otlp_port is not None and _is_port(index, e.target, otlp_port)
        }
    )
    if len(senders) == 1:
        return senders[0], "otlp_sender"
    spawned = {e.target for edges in index.out.values() for e in edges if e.relation == "spawned"}
    roots = [nid for nid in procs if nid not in spawned]
    if len(roots) == 1:
        return roots[0], "run_root"
    return None, "unknown"


def _holders(index: GraphIndex, procs: Iterable[str], peers: set[Peer]) -> set[str]:
    """The processes with a loopback connection whose local end and remote port are a peer's."""
    if not peers:
        return set()
    out = set()
    for nid in procs:
        for e in index.out_edges(nid, CONNECT_RELATIONS):
            detail = e.attrs
            if detail is None or not isinstance(detail.local_address, str):
                continue
            target = index.nodes.get(e.target)
            facts = None if target is None else target.facts
            if not isinstance(facts, EndpointFacts) or not _loopback(facts.address):
                continue
            if facts.transport != "tcp":
                continue  # OTLP comes over TCP; a UDP socket may share the port numbers
            end = (canonical_ip(detail.local_address), detail.local_port, facts.port)
            if end in peers:
                out.add(nid)
    return out


def session_peers(run_dir: str) -> dict[str, set[Peer]]:
    """Log record id -> the loopback transport peers its request came from, as ``normalize``
    recorded them on the coverage of log records it does not interpret (``correlated.jsonl``)."""
    out: dict[str, set[Peer]] = defaultdict(set)
    try:
        f = open(os.path.join(run_dir, CORRELATED_STREAM), "rb")  # noqa: SIM115
    except OSError:
        return out
    with f:
        for raw in f:
            if b'"coverage"' not in raw or b'"peer":{' not in raw:
                continue  # not a coverage record, or one with no peer (``"peer":null``)
            try:
                source = orjson.loads(raw)["coverage"]["source"]
                peer = source["emitter"]["peer"]
                out[str(source["record_id"])].add(
                    (str(peer["address"]), int(peer["port"]), int(peer["local_port"]))
                )
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
    return out


def _is_port(index: GraphIndex, node: str, port: int) -> bool:
    found = index.nodes.get(node)
    facts = None if found is None else found.facts
    return (
        isinstance(facts, EndpointFacts)
        and facts.transport == "tcp"
        and facts.port == port
        and _loopback(facts.address)
    )


def _loopback(address: str | None) -> bool:
    return bool(address) and (str(address).startswith("127.") or address in ("::1", "localhost"))


def otlp_port(run_dir: str) -> int | None:
    """The port of the OTLP endpoint ``observe`` gave the command (``summary.json``)."""
    try:
        with open(os.path.join(run_dir, SUMMARY), "rb") as f:
            summary = orjson.loads(f.read())
        endpoint = str((summary.get("otlp") or {}).get("endpoint") or "")
        return urllib.parse.urlsplit(endpoint if "//" in endpoint else f"//{endpoint}").port
    except (OSError, ValueError, AttributeError):
        return None


def import_sessions(
    run_dir: str, records: Records, index: GraphIndex, transcripts: Iterable[str] = ()
) -> list[Session]:
    """The coding-agent sessions of ``run_dir``'s streams and of the given rollout files, with
    the agent process found (:func:`agent_process`) and added as a ``process_run`` (role
    ``agent``, ``rule`` saying how it was found). Their child processes are attributed by the
    review's own rules afterwards (``add_agent_processes``)."""
    events = events_from_streams(run_dir, records)
    for path in transcripts:
        events += events_from_transcript(path, records)
    sessions = build_sessions(events)
    pids = {e.session: e.attrs.get("_pid") for e in events}
    by_log = session_peers(run_dir) if sessions else {}  # a run of no coding agent: not read
    peers: dict[str, set[Peer]] = defaultdict(set)
    for e in events:
        peers[e.session] |= by_log.get(str(e.attrs.get("_log_id")), set())
    port = otlp_port(run_dir)
    capture = {os.path.realpath(p) for p in transcripts} | {os.path.abspath(p) for p in transcripts}
    for session in sessions:
        session.capture |= capture
        pid, how = agent_process(
            [pids.get(session.trace_id)], index, port, peers.get(session.trace_id, ())
        )
        if pid is None:
            continue
        session.agent_processes.append(pid)
        proc = process_node(session, index, pid, records)
        proc.data["role"], proc.data["rule"] = "agent", how
        session.owner.setdefault(pid, pid)
    return sessions
