"""The joined quotient graph: tool calls of many runs clustered into joined nodes.

Each tool call becomes a **capsule** of four feature sets, all built from stable keys so that
equal things in different runs compare equal:

* ``tool``: the tool call's stable key (``tool_call:<agent>:<tool>``);
* ``io``: its I/O structure: argument and result key paths, the stable keys of files it read and
  wrote, endpoints it reached;
* ``context``: its local graph context: the tool keys of the calls it depends on (``in:``) and
  that depend on it (``out:``) by a confirmed method, and the stable keys of its processes;
* ``lineage``: its upstream root lineage: the tool keys of the root calls (no confirmed
  dependency of their own) it transitively depends on; ``root`` for a root itself.

Similarity is S = sum over components of w_m * J_m, J the Jaccard index (two empty sets: 1).
Clustering is deterministic: distinct capsules are taken by decreasing count, then by their
text, and each joins the existing cluster whose first capsule is most similar (earliest on
ties) if S >= threshold, else starts one. When ``w_tool > 1 - threshold`` two calls of different
tools can never reach the threshold, so capsules are only compared within one tool key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .inputs import RunData
from .provenance import CONFIRMED, Dependency, flatten_io

COMPONENTS = ("tool", "io", "context", "lineage")
DEFAULT_WEIGHTS: dict[str, float] = {"tool": 0.4, "io": 0.25, "context": 0.2, "lineage": 0.15}
DEFAULT_THRESHOLD = 0.75
MOTIF_FRACTION = 0.8
"""A joined node or edge is a motif when at least this fraction of the runs have it."""
DETOUR_FRACTION = 0.2
"""A joined node is a detour when at most this fraction of the runs (at least 1 run) have it."""

Capsule = tuple[frozenset[str], ...]


class CallView(Protocol):
    """What the joined graph reads of a call (a :class:`~.inputs.Call` or a summary's)."""

    @property
    def id(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def key(self) -> str: ...


class RunView(Protocol):
    """What the joined graph reads of a run (a :class:`RunData` or a run summary)."""

    @property
    def id(self) -> str: ...
    @property
    def metrics(self) -> dict[str, Any]: ...
    @property
    def calls(self) -> Sequence[CallView]: ...


class DependencyView(Protocol):
    """What the joined graph reads of a dependency."""

    @property
    def producer(self) -> int: ...
    @property
    def consumer(self) -> int: ...
    @property
    def method(self) -> str: ...


@dataclass(slots=True)
class Member:
    """One tool call placed in the joined graph."""

    run: int
    index: int
    capsule: Capsule


@dataclass(slots=True)
class Cluster:
    """A joined node in the making: its first capsule and its members."""

    leader: Capsule
    members: list[Member] = field(default_factory=list)


def _roots(deps: Sequence[Dependency], n: int, keys: Sequence[str]) -> list[frozenset[str]]:
    parents: list[list[int]] = [[] for _ in range(n)]
    for d in deps:
        parents[d.consumer].append(d.producer)
    lineage: list[frozenset[str]] = []
    for i in range(n):  # producers precede consumers, so their lineage is already known
        if not parents[i]:
            lineage.append(frozenset({"root"}))
            continue
        roots: set[str] = set()
        for p in parents[i]:
            if lineage[p] == {"root"}:
                roots.add(keys[p])
            else:
                roots.update(lineage[p])
        lineage.append(frozenset(roots))
    return [frozenset({f"root:{k}" for k in s}) if s != {"root"} else s for s in lineage]


def capsules(run: RunData, deps: Sequence[Dependency]) -> list[Capsule]:
    """The capsule of every call of ``run`` (in call order), from its confirmed dependencies."""
    confirmed = sorted(
        (d for d in deps if d.method in CONFIRMED), key=lambda d: (d.consumer, d.producer)
    )
    calls = run.calls
    keys = [c.key for c in calls]
    context: list[set[str]] = [{f"proc:{run.keys.get(p, '')}" for p in c.processes} for c in calls]
    for d in confirmed:
        context[d.consumer].add(f"in:{keys[d.producer]}")
        context[d.producer].add(f"out:{keys[d.consumer]}")
    lineage = _roots(confirmed, len(calls), keys)
    out: list[Capsule] = []
    for i, (call, (args, result)) in enumerate(zip(calls, flatten_io(run), strict=True)):
        io = {f"arg:{path}" for path, _, is_key in args if is_key}
        io.update(f"res:{path}" for path, _, is_key in result if is_key)
        io.update(f"read:{run.keys.get(a.file, '')}" for a in call.reads)
        io.update(f"wrote:{run.keys.get(a.file, '')}" for a in call.writes)
        io.update(f"endpoint:{run.keys.get(e, '')}" for e in call.endpoints)
        out.append((frozenset({call.key}), frozenset(io), frozenset(context[i]), lineage[i]))
    return out


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def similarity(a: Capsule, b: Capsule, weights: Mapping[str, float]) -> float:
    """S = sum of w_m * Jaccard(a_m, b_m) over the four components."""
    return sum(weights[m] * _jaccard(x, y) for m, x, y in zip(COMPONENTS, a, b, strict=True))


def normalized(weights: Mapping[str, float]) -> dict[str, float]:
    """``weights`` scaled to sum to 1 (ValueError when they cannot)."""
    total = sum(weights.get(m, 0.0) for m in COMPONENTS)
    if total <= 0 or any(weights.get(m, 0.0) < 0 for m in COMPONENTS):
        raise ValueError("capsule weights must be non-negative with a positive sum")
    return {m: weights.get(m, 0.0) / total for m in COMPONENTS}


def _order(capsule: Capsule) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(sorted(s)) for s in capsule)


def cluster(
    members: Sequence[Member], weights: Mapping[str, float], threshold: float
) -> list[Cluster]:
    """Deterministic leader clustering of ``members`` (see the module docstring)."""
    groups: dict[Capsule, list[Member]] = {}
    for m in members:
        groups.setdefault(m.capsule, []).append(m)
    distinct = sorted(groups, key=lambda c: (-len(groups[c]), _order(c)))
    block_by_tool = weights["tool"] > 1 - threshold
    blocks: dict[frozenset[str], list[Cluster]] = {}
    clusters: list[Cluster] = []
    for capsule in distinct:
        block = blocks.setdefault(capsule[0] if block_by_tool else frozenset(), [])
        best: Cluster | None = None
        best_score = threshold
        for candidate in block:
            score = similarity(capsule, candidate.leader, weights)
            if score >= best_score and (best is None or score > best_score):
                best, best_score = candidate, score
        if best is None:
            best = Cluster(leader=capsule)
            block.append(best)
            clusters.append(best)
        best.members.extend(groups[capsule])
    return clusters


def assignments(clusters: Sequence[Cluster]) -> dict[tuple[int, int], int]:
    """(run, call index) -> cluster number."""
    return {(m.run, m.index): n for n, c in enumerate(clusters) for m in c.members}


def changed_assignments(base: Sequence[Cluster], other: Sequence[Cluster]) -> int:
    """Calls whose set of co-members differs between two clusterings (labels do not matter)."""

    def partner_sets(
        clusters: Sequence[Cluster],
    ) -> dict[tuple[int, int], frozenset[tuple[int, int]]]:
        out: dict[tuple[int, int], frozenset[tuple[int, int]]] = {}
        for c in clusters:
            group = frozenset((m.run, m.index) for m in c.members)
            for m in c.members:
                out[(m.run, m.index)] = group
        return out

    a, b = partner_sets(base), partner_sets(other)
    return sum(1 for k in a if a[k] != b.get(k))


def _score_summary(run_ids: Sequence[int], scores: Sequence[float | None]) -> dict[str, Any]:
    present = set(run_ids)
    inside = [s for r, s in enumerate(scores) if r in present and s is not None]
    outside = [s for r, s in enumerate(scores) if r not in present and s is not None]
    return {
        "runs_scored": len(inside),
        "mean": sum(inside) / len(inside) if inside else None,
        "min": min(inside) if inside else None,
        "max": max(inside) if inside else None,
        "mean_without": sum(outside) / len(outside) if outside else None,
    }


def joined_graph(
    runs: Sequence[RunView],
    deps: Sequence[Sequence[DependencyView]],
    clusters: Sequence[Cluster],
) -> dict[str, Any]:
    """The ``joined`` object of ``compare.json`` from a clustering of every run's calls."""
    ordered = sorted(
        clusters,
        key=lambda c: (min(m.index for m in c.members), _order(c.leader)),
    )
    where = assignments(ordered)
    scores = [r.metrics.get("score") for r in runs]
    nodes: list[dict[str, Any]] = []
    for n, c in enumerate(ordered):
        multiplicity: dict[str, int] = {}
        for m in c.members:
            multiplicity[runs[m.run].id] = multiplicity.get(runs[m.run].id, 0) + 1
        call = runs[c.members[0].run].calls[c.members[0].index]
        nodes.append(
            {
                "id": f"j{n}",
                "tool": call.tool,
                "key": call.key,
                "support": len(multiplicity),
                "multiplicity": multiplicity,
                "members": [
                    {"run": runs[m.run].id, "activity": runs[m.run].calls[m.index].id}
                    for m in sorted(c.members, key=lambda m: (m.run, m.index))
                ],
                "score": _score_summary(sorted({m.run for m in c.members}), scores),
            }
        )
    edges = _joined_edges(runs, deps, where)
    motifs, detours = _motifs(nodes, edges, len(runs))
    return {"nodes": nodes, "edges": edges, "motifs": motifs, "detours": detours}


def _joined_edges(
    runs: Sequence[RunView],
    deps: Sequence[Sequence[DependencyView]],
    where: Mapping[tuple[int, int], int],
) -> list[dict[str, Any]]:
    support: dict[tuple[int, int], set[int]] = {}
    methods: dict[tuple[int, int], set[str]] = {}
    for r, run_deps in enumerate(deps):
        for d in run_deps:
            if d.method not in CONFIRMED:
                continue
            pair = (where[(r, d.producer)], where[(r, d.consumer)])
            support.setdefault(pair, set()).add(r)
            methods.setdefault(pair, set()).add(d.method)
    return [
        {
            "source": f"j{a}",
            "target": f"j{b}",
            "support": len(support[(a, b)]),
            "runs": sorted(runs[r].id for r in support[(a, b)]),
            "methods": sorted(methods[(a, b)]),
        }
        for a, b in sorted(support)
    ]


def _motifs(
    nodes: Sequence[dict[str, Any]], edges: Sequence[dict[str, Any]], n_runs: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    high = max(1, math.ceil(MOTIF_FRACTION * n_runs))
    low = max(1, math.floor(DETOUR_FRACTION * n_runs))
    motifs = [
        {"type": "node", "id": n["id"], "tool": n["tool"], "support": n["support"]}
        for n in nodes
        if n["support"] >= high
    ] + [
        {"type": "edge", "source": e["source"], "target": e["target"], "support": e["support"]}
        for e in edges
        if e["support"] >= high
    ]
    detours = [
        {
            "id": n["id"],
            "tool": n["tool"],
            "support": n["support"],
            "runs": sorted(n["multiplicity"]),
        }
        for n in nodes
        if n["support"] <= low and n["support"] < high
    ]
    return motifs, detours
