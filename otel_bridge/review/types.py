"""The review's values: evidence nodes, workflow nodes, edges, claims and findings.

Plain dataclasses built once per review; ``to_dict`` gives the ``review.json`` objects
(``docs/review.md`` documents every field).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from otel_bridge.grading import Flag, aggregate_flag, grade_edge, weakest
from otel_bridge.model import Attribution, Grade

ACTION_TYPES = ("control", "user_message", "assistant_message", "tool_call")
ARTIFACT_KINDS = ("file", "endpoint")


@dataclass(slots=True)
class EvidenceNode:
    """One evidence node: an action, a process run, a model call or an artifact."""

    id: str
    type: str
    """``control``, ``user_message``, ``assistant_message``, ``tool_call``, ``process_run``,
    ``model_call`` or ``artifact``."""
    session: str
    label: str
    time: int | None
    end: int | None = None
    records: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``review.json`` object."""
        return {
            "id": self.id,
            "type": self.type,
            "session": self.session,
            "label": self.label,
            "time": self.time,
            "end": self.end,
            "records": sorted(self.records),
            **self.data,
        }


@dataclass(slots=True)
class WorkflowNode:
    """Consecutive evidence nodes of one phase."""

    id: str
    phase: str
    session: str
    rules: list[str]
    members: list[str]
    time: int | None
    end: int | None
    checks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The ``review.json`` object."""
        return {
            "id": self.id,
            "phase": self.phase,
            "session": self.session,
            "rules": self.rules,
            "members": self.members,
            "time": self.time,
            "end": self.end,
            "checks": self.checks,
        }


@dataclass(slots=True)
class Edge:
    """One typed review edge with its provenance."""

    id: str
    source: str
    target: str
    relation: str
    method: str
    session: str
    inferred: Flag
    causal: Flag
    grade: str
    support: list[str]
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The ``review.json`` object."""
        return {
            "id": self.id,
            "source": self.source,
            "target": self.target,
            "relation": self.relation,
            "method": self.method,
            "session": self.session,
            "inferred": self.inferred,
            "causal": self.causal,
            "grade": self.grade,
            "support": sorted(self.support),
            "detail": self.detail,
        }


def edge_id(source: str, relation: str, target: str, method: str) -> str:
    """``r-`` and 16 hex digits of BLAKE2b-64 over the edge's ends, relation and method."""
    raw = "\0".join((source, relation, target, method)).encode()
    return "r-" + hashlib.blake2b(raw, digest_size=8).hexdigest()


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


class _Grading(NamedTuple):
    """How far an edge may be trusted: its flags and its grade."""

    inferred: Flag
    causal: Flag
    grade: Grade


def _edge(  # noqa: PLR0917 (its two callers pass their own arguments on, in order)
    source: str,
    relation: str,
    target: str,
    method: str,
    session: str,
    grading: _Grading,
    support: Iterable[str],
    detail: dict[str, Any] | None,
    /,
) -> Edge:
    """The edge ``method`` made from ``source`` to ``target``: its id derived from the ends, the
    relation and the method, its support sorted without repeats."""
    return Edge(
        id=edge_id(source, relation, target, method),
        source=source,
        target=target,
        relation=relation,
        method=method,
        grade=str(grading.grade),
        inferred=grading.inferred,
        causal=grading.causal,
        session=session,
        support=sorted(set(support)),
        detail=detail or {},
    )


def chained(
    source: str,
    relation: str,
    target: str,
    *,
    session: str,
    edges: Iterable[Any],
    method: str = "observed",
    detail: dict[str, Any] | None = None,
) -> Edge:
    """An observed edge resting on a chain of graph edges.

    Flags aggregate as graph.json's do (``aggregate_flag``: only true is true, a non-causal link
    makes the chain ``mixed``, never promoted); the grade is the weakest of the chain's grades.
    """
    chain = list(edges)
    causal = aggregate_flag(_flag(e.causal) for e in chain) if chain else None
    if any(e.causal == "mixed" for e in chain):
        causal = "mixed"
    inferred = aggregate_flag(_flag(e.inferred) for e in chain) if chain else None
    if any(e.inferred == "mixed" for e in chain):
        inferred = "mixed"
    grade = weakest(Grade(e.grade) for e in chain) if chain else Grade.U
    grading = _Grading(inferred=inferred, causal=causal, grade=grade)
    support = (e.id for e in chain)
    return _edge(source, relation, target, method, session, grading, support, detail)


def ruled(
    source: str,
    relation: str,
    target: str,
    *,
    session: str,
    method: str,
    support: Iterable[str] = (),
    detail: dict[str, Any] | None = None,
) -> Edge:
    """An edge a rule or an exact textual reference made.

    ``rule:<name>`` edges are inferred (grade D, as graph.json grades a recorded inference
    method); ``exact_reference`` edges are exact, non-causal (grade C).
    """
    exact = method == "exact_reference"
    inferred: Flag = not exact
    causal: Flag = False
    grade = grade_edge(frozenset({Attribution.EXACT_IDENTITY}), causal, inferred, method)
    grading = _Grading(inferred=inferred, causal=causal, grade=grade)
    return _edge(source, relation, target, method, session, grading, support, detail)
