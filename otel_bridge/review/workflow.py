"""Workflow Nodes by the rule table, and the observed and rule edges between nodes.

Phase rules (first match wins; ``docs/review.md`` has the table):

| evidence | phase | rule |
| --- | --- | --- |
| user message | context | ``user_message`` |
| system message | context | ``system_message`` |
| assistant text before the first action | plan | ``text_before_first_action`` |
| assistant text between actions (not the final answer) | plan | ``text_between_actions`` |
| the final assistant text (no tool calls after it) | claim | ``final_answer`` |
| tool call with a process in the validate table | validate | ``validate_table:<check>`` |
| tool call whose processes wrote a file | execute | ``writes_artifact`` |
| tool call with observed processes that wrote nothing | inspect | ``reads_only`` |
| tool call with no observed process | execute | ``no_observed_process`` |
| process the agent ran outside any tool call | execute | ``undeclared_process`` |

Consecutive nodes of one phase form one workflow node, which lists the rules of its members.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from typing import Any

from otel_bridge.graph import reading
from otel_bridge.review.evidence import GEdge, Session, runs_of
from otel_bridge.review.types import Edge, EvidenceNode, WorkflowNode, chained, ruled

Touches = Mapping[str, list[tuple[str, GEdge]]]


def final_answer(session: Session) -> EvidenceNode | None:
    """The last assistant message with text after which the session made no tool call."""
    messages = [m for m in session.of_type("assistant_message") if m.data.get("text")]
    if not messages:
        return None
    last = messages[-1]
    later_calls = [t for t in session.of_type("tool_call") if (t.time or 0) > (last.time or 0)]
    return None if later_calls or last.data.get("tool_calls") else last


def _tool_phase(tool: EvidenceNode, session: Session, wrote: set[str]) -> tuple[str, str]:
    procs = [session.nodes[p] for p in tool.data.get("processes", ()) if p in session.nodes]
    for proc in procs:
        check = proc.data.get("check")
        if check:
            return "validate", f"validate_table:{check['name']}"
    if tool.id in wrote:
        return "execute", "writes_artifact"
    if procs:
        return "inspect", "reads_only"
    return "execute", "no_observed_process"


def writers(touches: Touches) -> set[str]:
    """The owners (tool calls, process runs) that wrote some artifact."""
    return {o for uses in touches.values() for o, e in uses if e.write is not None}


def phases(session: Session, touches: Touches) -> list[tuple[EvidenceNode, str, str]]:
    """(evidence node, phase, rule) for every action, in time order."""
    final = final_answer(session)
    actions = session.of_type("control", "user_message", "assistant_message", "tool_call")
    undeclared = [
        p
        for p in session.of_type("process_run")
        if p.data.get("role") == "undeclared" and session.owner.get(p.id) == p.id
    ]
    ordered = sorted(actions + undeclared, key=lambda n: (n.time or 0, n.id))
    wrote = writers(touches)
    first_action = next((n.time for n in ordered if n.type in ("tool_call", "process_run")), None)
    out: list[tuple[EvidenceNode, str, str]] = []
    for node in ordered:
        if node.type == "user_message":
            out.append((node, "context", "user_message"))
        elif node.type == "control":
            out.append((node, "context", "system_message"))
        elif node.type == "assistant_message":
            if node is final:
                out.append((node, "claim", "final_answer"))
            elif node.data.get("text"):
                before = first_action is None or (node.time or 0) <= first_action
                out.append(
                    (node, "plan", "text_before_first_action" if before else "text_between_actions")
                )
        elif node.type == "tool_call":
            phase, rule = _tool_phase(node, session, wrote)
            out.append((node, phase, rule))
        else:
            out.append((node, "execute", "undeclared_process"))
    return out


def workflow_nodes(session: Session, touches: Touches) -> list[WorkflowNode]:
    """Group consecutive actions of one phase."""
    nodes: list[WorkflowNode] = []
    for evidence, phase, rule in phases(session, touches):
        if not nodes or nodes[-1].phase != phase:
            nodes.append(
                WorkflowNode(
                    id=f"workflow:{session.trace_id}:{len(nodes) + 1}",
                    phase=phase,
                    session=session.id,
                    rules=[],
                    members=[],
                    time=evidence.time,
                    end=evidence.end or evidence.time,
                )
            )
        current = nodes[-1]
        current.members.append(evidence.id)
        if rule not in current.rules:
            current.rules.append(rule)
        current.end = max(current.end or 0, evidence.end or evidence.time or 0)
        if phase == "validate":
            current.checks.extend(_checks(evidence, session))
    return nodes


def _checks(tool: EvidenceNode, session: Session) -> list[dict[str, Any]]:
    out = []
    for pid in tool.data.get("processes", ()):
        proc = session.nodes.get(pid)
        if proc is not None and proc.data.get("check"):
            code = proc.data.get("exit_code")
            out.append(
                {
                    "evidence": pid,
                    "check": proc.data["check"]["name"],
                    "exit_code": code,
                    "passed": None if code is None else code == 0,
                }
            )
    return out


def artifact_edges(session: Session, touches: Touches) -> list[Edge]:
    """``produces`` and ``uses`` from the owners' observed file writes and reads."""
    out: list[Edge] = []
    for aid, uses in touches.items():
        by_owner: dict[tuple[str, str], list[GEdge]] = {}
        for owner, e in uses:
            relation = "produces" if e.write is not None else "uses"
            by_owner.setdefault((owner, relation), []).append(e)
        for (owner, relation), edges in by_owner.items():
            out.append(_artifact_edge(session, owner, relation, aid, edges))
    return out


def _artifact_edge(
    session: Session, owner: str, relation: str, aid: str, edges: list[GEdge]
) -> Edge:
    """One ``produces``/``uses`` edge. It is ``observed`` unless it rests on a rule: the process
    is the call's by time only (``rule:tool_window``), or the only write seen is an open for
    writing (``rule:opened_for_writing``: strace and ebpf see opens, not writes); both are
    inferences, graded D, never promoted to an observed write."""
    chain = edges + _link_edges(session, owner)
    by_window = any(e.source in session.window_owned or e.id in session.window_edges for e in edges)
    observed = reading.strongest(e.write for e in edges if e.write)
    opened_only = relation == "produces" and observed == reading.OPENED_FOR_WRITING
    method = "observed"
    if by_window:
        method = "rule:tool_window"
    elif opened_only:
        method = "rule:opened_for_writing"
    detail: dict[str, Any] = {
        "first": min((e.first_seen or 0 for e in edges), default=None),
        "last": max((e.last_seen or 0 for e in edges), default=None),
        "relations": sorted({e.relation for e in edges}),
    }
    if relation == "produces":
        detail["observed"] = observed
    edge = chained(
        owner, relation, aid, session=session.id, edges=chain, method=method, detail=detail
    )
    if by_window or opened_only:  # an inference: never graded as an observed write
        edge.inferred, edge.grade = True, "D"
    return edge


def _link_edges(session: Session, owner: str) -> list[GEdge]:
    return list(session.links.get(owner, ()))


def informs_edges(session: Session, edges: list[Edge]) -> list[Edge]:
    """``informs``: a later action read an artifact an earlier one wrote (observed dataflow)."""
    producers = [e for e in edges if e.relation == "produces"]
    users: dict[str, list[Edge]] = {}
    for e in edges:
        if e.relation == "uses":
            users.setdefault(e.target, []).append(e)
    out: dict[str, Edge] = {}
    for p in producers:
        for u in users.get(p.target, ()):
            if u.source == p.source:
                continue
            if (u.detail.get("last") or 0) < (p.detail.get("first") or 0):
                continue
            src, dst = session.nodes.get(p.source), session.nodes.get(u.source)
            if src is None or dst is None or (dst.time or 0) < (src.time or 0):
                continue
            edge = ruled(p.source, "informs", u.source, session=session.id, method="observed")
            edge.inferred, edge.causal = _worst_flags((p, u))
            edge.grade = max(p.grade, u.grade)
            edge.support = sorted({p.id, u.id})
            edge.detail = {"artifact": p.target}
            out.setdefault(edge.id, edge)
    return list(out.values())


def _worst_flags(edges: tuple[Edge, ...]) -> tuple[Any, Any]:
    inferred = True if any(e.inferred is True for e in edges) else edges[0].inferred
    causal = False if any(e.causal is False for e in edges) else edges[0].causal
    return inferred, causal


def checked_by_edges(session: Session, edges: list[Edge]) -> list[Edge]:
    """``checked_by``, at most one per artifact: the earliest validate run that read it after its
    last write (observed), else the earliest whose working directory holds it and that started
    after the last write (rule ``covers_directory``)."""
    out: list[Edge] = []
    validators = [p for p in runs_of(session) if p.data.get("check") is not None]
    starts = [p.time or 0 for p in validators]
    by_owner: dict[str, list[int]] = {}  # owner of the validate runs' effects -> their positions
    for i, proc in enumerate(validators):
        by_owner.setdefault(session.owner.get(proc.id, proc.id), []).append(i)
    reads: dict[str, list[tuple[int, Edge]]] = {}  # artifact -> (validator position, its use)
    for e in edges:
        for i in by_owner.get(e.source, ()) if e.relation == "uses" else ():
            reads.setdefault(e.target, []).append((i, e))
    for artifact in session.of_type("artifact"):
        last_write = artifact.data.get("last_write") or 0
        path = artifact.data.get("path")
        if not artifact.data.get("written") or path is None:
            continue
        # the earliest validate run (in time order) that read it after the last write
        read = min(
            ((i, use) for i, use in reads.get(artifact.id, ()) if _last(use) >= last_write),
            key=lambda iu: iu[0],
            default=None,
        )
        if read is not None:
            i, use = read
            edge = ruled(
                artifact.id, "checked_by", validators[i].id, session=session.id, method="observed"
            )
            edge.inferred, edge.causal, edge.grade = use.inferred, use.causal, use.grade
            edge.support = [use.id]
            out.append(edge)
            continue
        # else the earliest that started after it and whose working directory holds it
        for proc in validators[bisect_right(starts, last_write) :]:
            cwd = proc.data.get("cwd")
            if cwd and path.startswith(cwd.rstrip("/") + "/"):
                method = "rule:covers_directory"
                out.append(
                    ruled(artifact.id, "checked_by", proc.id, session=session.id, method=method)
                )
                break
    return out


def _last(use: Edge) -> int:
    return int(use.detail.get("last") or 0)


def frames_edges(session: Session, workflow: list[WorkflowNode]) -> list[Edge]:
    """``frames``: the request (context) frames every later phase."""
    contexts = [w for w in workflow if w.phase == "context"]
    if not contexts:
        return []
    request = contexts[0]
    return [
        ruled(request.id, "frames", w.id, session=session.id, method="rule:request_frames")
        for w in workflow
        if w is not request
    ]
