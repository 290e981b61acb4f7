"""Findings a reviewer must see first, each with the evidence path behind it.

``contradicted_claim``, ``unsupported_claim``, ``failed_check_ignored``, ``unchecked_artifact``
and ``unreported_side_effect``; ``docs/review.md`` gives the rule of each.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from otel_bridge.review.claims import Claim
from otel_bridge.review.evidence import Session, runs_of, workspace_relative
from otel_bridge.review.types import Edge, EvidenceNode
from otel_bridge.review.workflow import final_answer

KINDS = (
    "contradicted_claim",
    "unsupported_claim",
    "failed_check_ignored",
    "unchecked_artifact",
    "unreported_side_effect",
)


@dataclass(slots=True)
class Finding:
    """One finding."""

    kind: str
    subject: str
    message: str
    session: str
    evidence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``review.json`` object."""
        return {
            "kind": self.kind,
            "subject": self.subject,
            "message": self.message,
            "session": self.session,
            "evidence": self.evidence,
        }


def claim_findings(claims: Iterable[Claim]) -> list[Finding]:
    """``contradicted_claim`` and ``unsupported_claim``."""
    out = []
    for claim in claims:
        if claim.status == "contradicted":
            bad = [m for m in claim.mentions if m.status == "contradicted"]
            reasons = "; ".join(f"{m.text}: {m.reason}" for m in bad)
            evidence = [claim.source] + [e for m in bad for e in m.evidence]
            out.append(
                Finding(
                    "contradicted_claim",
                    claim.id,
                    f"{claim.text!r}: {reasons}",
                    claim.session,
                    evidence,
                )
            )
        elif claim.status == "unsupported":
            reasons = "; ".join(f"{m.text}: {m.reason}" for m in claim.mentions)
            out.append(
                Finding(
                    "unsupported_claim",
                    claim.id,
                    f"{claim.text!r}: {reasons}",
                    claim.session,
                    [claim.source],
                )
            )
    return out


def failed_checks(session: Session) -> list[Finding]:
    """``failed_check_ignored``: a failing validate run never followed by a passing one."""
    final = final_answer(session)
    deadline = None if final is None else final.time
    runs = [p for p in runs_of(session) if p.data.get("check")]
    out = []
    for run in runs:
        code = run.data.get("exit_code")
        if code is None or code == 0:
            continue
        name = run.data["check"]["name"]
        later = [
            p
            for p in runs
            if p.data["check"]["name"] == name
            and (p.time or 0) > (run.time or 0)
            and p.data.get("exit_code") == 0
            and (deadline is None or (p.time or 0) <= deadline)
        ]
        if later:
            continue
        evidence = [run.id] + ([str(run.data["tool_call"])] if run.data.get("tool_call") else [])
        out.append(
            Finding(
                "failed_check_ignored",
                run.id,
                f"{name} exited {code} ({' '.join(run.data.get('argv') or [])}) and no later "
                f"{name} run passed before the final answer",
                session.id,
                evidence,
            )
        )
    return out


def unchecked_artifacts(session: Session, edges: list[Edge]) -> list[Finding]:
    """``unchecked_artifact``: written files with no ``checked_by`` edge."""
    checked = {e.source for e in edges if e.relation == "checked_by"}
    by_target = _by_target(edges)
    validators = {session.owner.get(p.id, p.id) for p in runs_of(session) if p.data.get("check")}
    out = []
    for artifact in session.of_type("artifact"):
        if not artifact.data.get("written") or artifact.id in checked:
            continue
        produced = [e.id for e in by_target.get(artifact.id, ()) if e.relation == "produces"]
        read_before = any(
            e.relation == "uses" and e.source in validators for e in by_target.get(artifact.id, ())
        )
        why = (
            "written again after the last validation that read it"
            if read_before
            else "never validated"
        )
        out.append(
            Finding(
                "unchecked_artifact",
                artifact.id,
                f"{artifact.data['path']}: {why}",
                session.id,
                [artifact.id, *produced],
            )
        )
    return out


_TOKEN = re.compile(r"[\w./:@-]+")


def tokens(text: str) -> set[str]:
    """The path-like words of ``text``, with trailing dots and colons stripped (a sentence end)."""
    return {t.rstrip(".:") for t in _TOKEN.findall(text)}


def _named(words: set[str], names: Iterable[str]) -> bool:
    return any(n in words for n in names if n)


def side_effects(session: Session, edges: list[Edge], claims: list[Claim]) -> list[Finding]:
    """``unreported_side_effect``: writes, processes and connections nobody declared."""
    declared = tokens(
        " ".join(str(t.data.get("arguments") or "") for t in session.of_type("tool_call"))
    )
    said = tokens(
        " ".join(
            [str(m.data.get("text") or "") for m in session.of_type("assistant_message")]
            + [c.text for c in claims]
        )
    )
    by_target = _by_target(edges)
    out = []
    for artifact in session.of_type("artifact"):
        produced = [e.id for e in by_target.get(artifact.id, ())]
        if artifact.data.get("kind") == "file":
            path = str(artifact.data["path"])
            names = [path, os.path.basename(path), *workspace_relative(path, session.cwds)]
            if not artifact.data.get("written") or _named(declared, names) or _named(said, names):
                continue
            message = f"{path} was written, and no tool call declared it and no message mentions it"
        else:
            names = [
                f"{artifact.data.get('address')}:{artifact.data.get('port')}",
                str(artifact.data.get("port")),
            ]
            if _named(declared, names):
                continue
            message = f"a tool process connected to {names[0]}, which no tool call declared"
        out.append(
            Finding(
                "unreported_side_effect", artifact.id, message, session.id, [artifact.id, *produced]
            )
        )
    for proc in session.of_type("process_run"):
        if proc.data.get("role") == "undeclared" and session.owner.get(proc.id) == proc.id:
            out.append(_undeclared(proc, session))
    return out


def _undeclared(proc: EvidenceNode, session: Session) -> Finding:
    argv = " ".join(proc.data.get("argv") or []) or proc.label
    if proc.data.get("rule") == "agent_context":
        message = f"{argv!r} ran with the agent's trace context, not a tool call's"
    else:
        message = f"the agent process ran {argv!r} outside every tool call"
    return Finding(
        "unreported_side_effect",
        proc.id,
        message,
        session.id,
        [proc.id],
    )


def _by_target(edges: list[Edge]) -> dict[str, list[Edge]]:
    out: dict[str, list[Edge]] = {}
    for e in edges:
        if e.relation in ("produces", "uses"):
            out.setdefault(e.target, []).append(e)
    return out


def build_findings(session: Session, edges: list[Edge], claims: list[Claim]) -> list[Finding]:
    """Every finding of one session, in the order of :data:`KINDS`."""
    found = (
        claim_findings(claims)
        + failed_checks(session)
        + unchecked_artifacts(session, edges)
        + side_effects(session, edges, claims)
    )
    return sorted(found, key=lambda f: (KINDS.index(f.kind), f.subject))
