"""``otel-bridge compare --model URL``: model refinement of candidate edges as checked patches.

``compare.json`` is written first and never changed. The model is shown each run's activities,
entities and ``candidate`` edges and may answer ``{"operations": [{"op": "add"|"remove", "run",
"source", "target", "relation", "reason"}]}``. Every operation is checked against the run's
provenance graph (ids exist, the PROV schema and temporal order are kept, only candidate edges
can be removed); accepted operations are marked ``model:<name>`` in ``compare-assist.json``, the
rejected ones are listed with why, and every exchange is stored in ``compare-audit.jsonl`` (both
owner-only). ``docs/compare.md`` (*Model assistance*) is the contract.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import orjson

from otel_bridge.assist import AssistError, AuditLog, ModelConfig, ask
from otel_bridge.rundir import write_private

from .provenance import CANDIDATE

ASSIST_JSON = "compare-assist.json"
AUDIT = "compare-audit.jsonl"
FORMAT = "otel-bridge.compare-assist"
VERSION = 1
MAX_NODES = 300
"""Activities (and entities) per run shown to the model at most."""
RELATIONS = {
    "wasInformedBy": ("activity", "activity"),
    "used": ("activity", "entity"),
    "wasGeneratedBy": ("entity", "activity"),
}
"""What each relation a patch may add joins (source side, target side): PROV's bipartite
schema, plus activity-to-activity dependencies; entity to entity is never allowed."""

SYSTEM = (
    "You refine dependency edges between an AI agent's tool calls. Answer with one JSON object "
    'only: {"operations": [{"op": "add" or "remove", "run": RUN_ID, "source": ID, "target": ID, '
    '"relation": "wasInformedBy" | "used" | "wasGeneratedBy", "reason": TEXT}]}. wasInformedBy '
    "goes from the later (informed) call to the earlier one. Only candidate edges may be "
    "removed; use only ids given to you."
)


class RunGraph:
    """One run's provenance graph, indexed for the checks."""

    def __init__(self, prov: Mapping[str, Any]) -> None:
        self.activities = {a["id"]: a for a in prov.get("activities", ())}
        self.entities = {e["id"]: e for e in prov.get("entities", ())}
        self.edges: list[dict[str, Any]] = list(prov.get("edges", ()))

    def side(self, node: str) -> str | None:
        """``activity``, ``entity`` or None when the id is not in the run."""
        if node in self.activities:
            return "activity"
        return "entity" if node in self.entities else None

    def times(self, activity: str) -> tuple[int | None, int | None]:
        """(start, end) of an activity; a process has its tool call's."""
        a = self.activities[activity]
        if "start" not in a and a.get("call") in self.activities:
            a = self.activities[a["call"]]
        return a.get("start"), a.get("end")

    def generators(self, entity: str) -> list[str]:
        """Activities the entity ``wasGeneratedBy``."""
        return [
            e["target"]
            for e in self.edges
            if e["relation"] == "wasGeneratedBy" and e["source"] == entity
        ]

    def users(self, entity: str) -> list[str]:
        """Activities that ``used`` the entity."""
        return [
            e["source"] for e in self.edges if e["relation"] == "used" and e["target"] == entity
        ]

    def matching(self, source: str, target: str, relation: str) -> list[dict[str, Any]]:
        """Existing edges with these ends and relation."""
        return [
            e
            for e in self.edges
            if (e["source"], e["target"], e["relation"]) == (source, target, relation)
        ]


def question(provenance: Mapping[str, Any]) -> dict[str, Any]:
    """What the model is shown: per run, its nodes (ids, types, times) and candidate edges."""
    runs: dict[str, Any] = {}
    for run_id, prov in provenance.items():
        acts = [
            {k: a[k] for k in ("id", "type", "tool", "start", "end", "call") if k in a}
            for a in prov.get("activities", ())[:MAX_NODES]
        ]
        ents = [
            {k: e[k] for k in ("id", "type", "path", "call") if k in e}
            for e in prov.get("entities", ())[:MAX_NODES]
        ]
        cands = [
            {k: e[k] for k in ("source", "target", "relation", "score", "detail") if k in e}
            for e in prov.get("edges", ())
            if e.get("method") == CANDIDATE
        ]
        runs[run_id] = {"activities": acts, "entities": ents, "candidates": cands}
    return {"runs": runs}


def _order_problem(graph: RunGraph, source: str, target: str, relation: str) -> str:
    """Why the edge would break temporal order ("" when it keeps it): an informing or generating
    activity must end no later than the activity it informs, or that uses what it generated,
    starts. An order that cannot be checked (no time, no generator) is a rejection too."""
    if relation == "wasInformedBy":
        pairs = [(target, source)]  # (earlier activity, later activity)
    elif relation == "used":
        pairs = [(g, source) for g in graph.generators(target)]
        if not pairs:
            return "the entity has no generating activity: the order cannot be checked"
    else:  # wasGeneratedBy: every activity that used the entity starts after this one ends
        pairs = [(target, u) for u in graph.users(source)]
    for earlier, later in pairs:
        end, start = graph.times(earlier)[1], graph.times(later)[0]
        if end is None or start is None:
            return f"{earlier} or {later} has no known time: the order cannot be checked"
        if end > start:
            return f"{earlier} ends ({end}) after {later} starts ({start}): breaks temporal order"
    return ""


def _add_problem(graph: RunGraph, op: Mapping[str, Any]) -> str:
    source, target, relation = op["source"], op["target"], op["relation"]
    if relation not in RELATIONS:
        return f"relation {relation!r} is not one a patch may add"
    sides = (graph.side(source), graph.side(target))
    if sides != RELATIONS[relation]:
        want = " -> ".join(RELATIONS[relation])
        return f"{relation} joins {want}, not {sides[0]} -> {sides[1]}: breaks the schema"
    if relation == "wasInformedBy" and source == target:
        return "an activity cannot inform itself"
    if graph.matching(source, target, relation):
        return "the edge is already in the run's graph"
    return _order_problem(graph, source, target, relation)


def _remove_problem(graph: RunGraph, op: Mapping[str, Any]) -> str:
    found = graph.matching(op["source"], op["target"], op["relation"])
    if not found:
        return "no such edge in the run's graph"
    if not any(e.get("method") == CANDIDATE for e in found):
        methods = sorted({str(e.get("method")) for e in found})
        return f"only candidate edges can be removed; this one is {', '.join(methods)}"
    return ""


def _operation_problem(graphs: Mapping[str, RunGraph], op: Any) -> str:
    if not isinstance(op, dict) or op.get("op") not in ("add", "remove"):
        return "not an operation: needs op add or remove"
    if not isinstance(op.get("run"), str) or op["run"] not in graphs:
        return f"no run {op.get('run')!r} in the comparison"
    graph = graphs[op["run"]]
    for end in ("source", "target"):
        if not isinstance(op.get(end), str) or graph.side(op[end]) is None:
            return f"no {end} {op.get(end)!r} in run {op['run']}"
    op.setdefault("relation", "wasInformedBy")
    if not isinstance(op["relation"], str):
        return "relation is not a string"
    return _add_problem(graph, op) if op["op"] == "add" else _remove_problem(graph, op)


def check_operations(
    provenance: Mapping[str, Any], operations: Any, method: str
) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], list[dict[str, Any]]]:
    """(per run, the accepted ``added`` and ``removed`` edges; the rejected operations with
    ``reason``). Operations are checked one by one against the unpatched graph."""
    graphs = {run_id: RunGraph(prov) for run_id, prov in provenance.items()}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    rejected: list[dict[str, Any]] = []
    done: set[tuple[str, str, str, str, str]] = set()
    for op in operations if isinstance(operations, list) else [operations]:
        reason = _operation_problem(graphs, op)
        if not reason:
            ident = (op["op"], op["run"], op["source"], op["target"], op["relation"])
            reason = "a repeat of an accepted operation" if ident in done else ""
        if reason:
            rejected.append({"operation": op, "reason": reason})
            continue
        done.add(ident)
        edge = {
            "source": op["source"],
            "target": op["target"],
            "relation": op["relation"],
            "method": method,
            "candidate": True,
            "inferred": True,
            "score": None,
            "detail": {"reason": str(op.get("reason") or "")[:500]},
        }
        lists = runs.setdefault(op["run"], {"added": [], "removed": []})
        lists["added" if op["op"] == "add" else "removed"].append(edge)
    return runs, rejected


def assist_compare(
    provenance: Mapping[str, Any], config: ModelConfig, audit: AuditLog
) -> dict[str, Any]:
    """Ask the model, check its patch and return the ``compare-assist.json`` document."""
    out: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "model": {"endpoint": config.endpoint(), "name": config.name, "method": config.method},
        "status": "ok",
        "error": None,
        "runs": {},
        "rejected": [],
    }
    if not any("edges" in p for p in provenance.values()):
        out["status"], out["error"] = "error", "needs the full provenance (--provenance full)"
        return out
    try:
        answer = ask(config, SYSTEM, question(provenance), audit, "compare")
    except AssistError as exc:
        out["status"], out["error"] = "error", str(exc)
        return out
    out["runs"], out["rejected"] = check_operations(
        provenance, answer.get("operations", []), config.method
    )
    return out


def write_assist(out_dir: str, compare_json: str, config: ModelConfig) -> dict[str, Any]:
    """Refine the comparison in ``compare_json``; write ``compare-assist.json`` and the audit
    into ``out_dir``."""
    with open(compare_json, "rb") as f:
        provenance = orjson.loads(f.read()).get("provenance") or {}
    result = assist_compare(provenance, config, AuditLog(os.path.join(out_dir, AUDIT)))
    write_private(
        os.path.join(out_dir, ASSIST_JSON),
        orjson.dumps(
            result, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE | orjson.OPT_INDENT_2
        ),
    )
    return result
