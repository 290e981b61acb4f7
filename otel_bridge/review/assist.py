"""``otel-bridge review --model URL``: model-proposed claim splits and ``supports`` edges.

The deterministic ``review.json`` is written first and never changed. The model is shown the
claims the rules left ``unsupported`` or ``partially_supported`` and the evidence of their
sessions, and may answer ``{"supports": [{"claim", "evidence", "reason"}], "splits": [{"claim",
"parts"}]}``. Each proposal is checked; the outcome goes to ``review-assist.json`` and every
exchange to ``review-audit.jsonl`` (both owner-only). ``docs/review.md`` (*Model assistance*)
documents the checks and the one status change a model can cause.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import orjson

from otel_bridge.assist import AssistError, AuditLog, ModelConfig, ask
from otel_bridge.review.types import edge_id
from otel_bridge.rundir import MANIFEST, RunDir, verify, write_private

ASSIST_JSON = "review-assist.json"
AUDIT = "review-audit.jsonl"
FORMAT = "otel-bridge.review-assist"
VERSION = 1
OPEN = ("unsupported", "partially_supported")
"""Claim statuses a model may propose support for."""
MAX_EVIDENCE = 300
"""Evidence nodes per session shown to the model at most (the first ones in time order)."""

SYSTEM = (
    "You review an AI agent's claims against observed evidence. Answer with one JSON object "
    'only: {"supports": [{"claim": CLAIM_ID, "evidence": EVIDENCE_ID, "reason": TEXT}], '
    '"splits": [{"claim": CLAIM_ID, "parts": [TEXT, ...]}]}. Propose a support only when the '
    "named evidence node shows what the claim states; use only ids given to you; a split's "
    "parts must be verbatim pieces of the claim's text."
)


def question(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the model is shown: the open claims and their sessions' evidence (metadata)."""
    claims = [c for c in doc["claims"] if c["status"] in OPEN]
    sessions = {c["session"] for c in claims}
    evidence: dict[str, list[dict[str, Any]]] = {}
    fields = ("id", "type", "label", "time", "path", "argv")
    for node in doc["evidence"]:
        shown = evidence.setdefault(node["session"], []) if node["session"] in sessions else None
        if shown is not None and len(shown) < MAX_EVIDENCE:
            shown.append({k: node[k] for k in fields if k in node})
    return {
        "claims": [
            {k: c[k] for k in ("id", "session", "text", "status")}
            | {"mentions": [{"type": m["type"], "text": m["text"]} for m in c["mentions"]]}
            for c in claims
        ],
        "evidence": evidence,
    }


def check_supports(
    doc: Mapping[str, Any], proposals: Any, method: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(accepted ``supports`` edges, rejected proposals with ``reason``)."""
    claims = {c["id"]: c for c in doc["claims"]}
    evidence = {n["id"]: n for n in doc["evidence"]}
    existing = {(e["source"], e["target"]) for e in doc["edges"] if e["relation"] == "supports"}
    accepted: dict[str, dict[str, Any]] = {}
    rejected: list[dict[str, Any]] = []
    for proposal in proposals if isinstance(proposals, list) else [proposals]:
        reason = _support_problem(proposal, claims, evidence, existing)
        if reason:
            rejected.append({"proposal": proposal, "reason": reason})
            continue
        claim, target = claims[proposal["claim"]], proposal["evidence"]
        edge = {
            "id": edge_id(claim["id"], "supports", target, method),
            "source": claim["id"],
            "target": target,
            "relation": "supports",
            "method": method,
            "session": claim["session"],
            "inferred": True,
            "causal": False,
            "grade": "D",
            "support": [target],
            "detail": {"reason": str(proposal.get("reason") or "")[:500]},
        }
        if edge["id"] in accepted:
            rejected.append({"proposal": proposal, "reason": "a repeat of an accepted proposal"})
        else:
            accepted[edge["id"]] = edge
    return list(accepted.values()), rejected


def _support_problem(
    proposal: Any,
    claims: Mapping[str, Any],
    evidence: Mapping[str, Any],
    existing: set[tuple[str, str]],
) -> str:
    if not isinstance(proposal, dict):
        return "not an object"
    claim, target = proposal.get("claim"), proposal.get("evidence")
    if not isinstance(claim, str) or claim not in claims:
        return f"no claim {claim!r} in the review"
    if not isinstance(target, str) or target not in evidence:
        return f"no evidence node {target!r} in the review"
    if claims[claim]["status"] == "contradicted":
        return "the claim is contradicted by observed evidence; a model cannot support it"
    if claims[claim]["status"] not in OPEN:
        return f"the claim is already {claims[claim]['status']}"
    if evidence[target]["session"] != claims[claim]["session"]:
        return "the evidence node belongs to another session"
    if (claim, target) in existing:
        return "the rules already link this claim to this evidence"
    return ""


def check_splits(doc: Mapping[str, Any], proposals: Any) -> tuple[list[Any], list[Any]]:
    """(accepted splits, rejected ones with ``reason``): two or more verbatim parts of the
    claim's text, in order, that do not overlap."""
    claims = {c["id"]: c for c in doc["claims"]}
    accepted: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    for proposal in proposals if isinstance(proposals, list) else [proposals]:
        reason = _split_problem(proposal, claims)
        if reason:
            rejected.append({"proposal": proposal, "reason": reason})
        else:
            accepted.append({"claim": proposal["claim"], "parts": list(proposal["parts"])})
    return accepted, rejected


def _split_problem(proposal: Any, claims: Mapping[str, Any]) -> str:
    if not isinstance(proposal, dict):
        return "not an object"
    claim = proposal.get("claim")
    if not isinstance(claim, str) or claim not in claims:
        return f"no claim {claim!r} in the review"
    parts = proposal.get("parts")
    if not isinstance(parts, list) or len(parts) < 2:
        return "a split needs two or more parts"
    text, at = claims[proposal["claim"]]["text"], 0
    for part in parts:
        found = text.find(part, at) if isinstance(part, str) and part.strip() else -1
        if found < 0:
            return f"part {part!r} is not a verbatim piece of the claim's text (in order)"
        at = found + len(part)
    return ""


def status_changes(doc: Mapping[str, Any], edges: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``unsupported`` → ``partially_supported`` for each claim with an accepted model support;
    no other change exists."""
    supported = {e["source"] for e in edges}
    return [
        {"claim": c["id"], "from": "unsupported", "to": "partially_supported"}
        for c in doc["claims"]
        if c["id"] in supported and c["status"] == "unsupported"
    ]


def assist_review(doc: Mapping[str, Any], config: ModelConfig, audit: AuditLog) -> dict[str, Any]:
    """Ask the model, check its answer and return the ``review-assist.json`` document.

    A model that cannot be asked or answers nonsense gives ``status: error`` with the message;
    nothing it said is accepted then.
    """
    out: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "model": {"endpoint": config.endpoint(), "name": config.name, "method": config.method},
        "status": "ok",
        "error": None,
        "edges": [],
        "splits": [],
        "status_changes": [],
        "rejected": [],
    }
    shown = question(doc)
    if not shown["claims"]:
        out["status"] = "nothing_to_ask"
        return out
    try:
        answer = ask(config, SYSTEM, shown, audit, "review")
    except AssistError as exc:
        out["status"], out["error"] = "error", str(exc)
        return out
    edges, rejected = check_supports(doc, answer.get("supports", []), config.method)
    splits, bad_splits = check_splits(doc, answer.get("splits", []))
    out["edges"] = sorted(edges, key=lambda e: e["id"])
    out["splits"] = splits
    out["status_changes"] = status_changes(doc, edges)
    out["rejected"] = [{"kind": "supports", **r} for r in rejected] + [
        {"kind": "split", **r} for r in bad_splits
    ]
    return out


def write_assist(target: str, doc: Mapping[str, Any], config: ModelConfig) -> dict[str, Any]:
    """Run :func:`assist_review` for the review written in ``target`` and write its files.

    A run directory whose manifest verified before is re-digested after, as the review does.
    """
    manifest = os.path.join(target, MANIFEST)
    redigest = os.path.exists(manifest) and not verify(target)
    result = assist_review(doc, config, AuditLog(os.path.join(target, AUDIT)))
    write_private(
        os.path.join(target, ASSIST_JSON),
        orjson.dumps(
            result, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE | orjson.OPT_INDENT_2
        ),
    )
    if redigest:
        RunDir(target).redigest()
    return result
