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

A thing with no stable key (the graph's ``key`` is empty: nothing stable was observed of it)
gives no feature, and a call with none has a tool feature of its own (``unkeyed:<call id>``):
two things never compare equal by what nobody observed.

Similarity is S = sum over components of w_m * J_m, J the Jaccard index (two empty sets: 1).
Clustering is deterministic: distinct capsules are taken by decreasing count, then by their
text, and each joins the existing cluster whose first capsule is most similar (earliest on
ties) if S >= threshold, else starts one. When ``w_tool > 1 - threshold`` two calls of different
tools can never reach the threshold, so capsules are only compared within one tool key.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .compact import Capsule, CapsuleTable, CompactCalls, Members, Multiplicity, RunIds
from .inputs import RunData
from .provenance import CONFIRMED, Dependency, flatten_io

COMPONENTS = ("tool", "io", "context", "lineage")
DEFAULT_WEIGHTS: dict[str, float] = {"tool": 0.4, "io": 0.25, "context": 0.2, "lineage": 0.15}
DEFAULT_THRESHOLD = 0.75
MOTIF_FRACTION = 0.8
"""A joined node or edge is a motif when at least this fraction of the runs have it."""
DETOUR_FRACTION = 0.2
"""A joined node is a detour when at most this fraction of the runs (at least 1 run) have it."""


@dataclass(slots=True)
class Cluster:
    """A joined node in the making: its first capsule and every capsule placed in it (numbers
    in a :class:`CapsuleTable`, the leader first)."""

    leader: int
    capsules: list[int] = field(default_factory=list)


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
                if keys[p]:
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
    context = [_keyed("proc:", run.keys, c.processes) for c in calls]
    for d in confirmed:
        if keys[d.producer]:
            context[d.consumer].add(f"in:{keys[d.producer]}")
        if keys[d.consumer]:
            context[d.producer].add(f"out:{keys[d.consumer]}")
    lineage = _roots(confirmed, len(calls), keys)
    out: list[Capsule] = []
    for i, (call, (args, result)) in enumerate(zip(calls, flatten_io(run), strict=True)):
        io = {f"arg:{path}" for path, _, is_key in args if is_key}
        io.update(f"res:{path}" for path, _, is_key in result if is_key)
        io |= _keyed("read:", run.keys, [a.file for a in call.reads])
        io |= _keyed("wrote:", run.keys, [a.file for a in call.writes])
        io |= _keyed("endpoint:", run.keys, call.endpoints)
        tool = call.key or f"unkeyed:{call.id}"
        out.append((frozenset({tool}), frozenset(io), frozenset(context[i]), lineage[i]))
    return out


def _keyed(prefix: str, keys: Mapping[str, str], nodes: Sequence[str]) -> set[str]:
    """``prefix`` + the stable key of each of ``nodes`` that has one (none: no feature)."""
    out: set[str] = set()
    for node in nodes:
        key = keys.get(node)
        if key:
            out.add(prefix + key)
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


def cluster(table: CapsuleTable, weights: Mapping[str, float], threshold: float) -> list[Cluster]:
    """Deterministic leader clustering of the distinct capsules of ``table`` (see the module
    docstring): every call of one capsule lands in the capsule's cluster."""
    caps, counts = table.capsules, table.counts
    distinct = sorted(range(len(caps)), key=lambda n: (-counts[n], _order(caps[n])))
    block_by_tool = weights["tool"] > 1 - threshold
    blocks: dict[frozenset[str], list[Cluster]] = {}
    clusters: list[Cluster] = []
    for n in distinct:
        capsule = caps[n]
        block = blocks.setdefault(capsule[0] if block_by_tool else frozenset(), [])
        best: Cluster | None = None
        best_score = threshold
        for candidate in block:
            score = similarity(capsule, caps[candidate.leader], weights)
            if score >= best_score and (best is None or score > best_score):
                best, best_score = candidate, score
        if best is None:
            best = Cluster(leader=n)
            block.append(best)
            clusters.append(best)
        best.capsules.append(n)
    return clusters


def node_of(clusters: Sequence[Cluster], size: int) -> array[int]:
    """Capsule number -> cluster number (in the order of ``clusters``)."""
    out = array("I", bytes(4 * size))
    for n, c in enumerate(clusters):
        for capsule in c.capsules:
            out[capsule] = n
    return out


def changed_assignments(
    table: CapsuleTable, base: Sequence[Cluster], other: Sequence[Cluster]
) -> int:
    """Calls whose set of co-members differs between two clusterings (labels do not matter).

    The calls of one capsule always share a cluster, so a call's co-members are the calls of
    the capsules in its cluster: they differ exactly when that set of capsules differs, and
    every call of a capsule counts."""

    def capsule_sets(clusters: Sequence[Cluster]) -> dict[int, frozenset[int]]:
        out: dict[int, frozenset[int]] = {}
        for c in clusters:
            group = frozenset(c.capsules)
            out.update(dict.fromkeys(c.capsules, group))
        return out

    a, b = capsule_sets(base), capsule_sets(other)
    return sum(table.counts[n] for n in a if a[n] != b.get(n))


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


def ordered(table: CapsuleTable, clusters: Sequence[Cluster]) -> list[Cluster]:
    """Clusters in joined-node order: by their earliest call index, then their leader."""
    first = table.first_index
    return sorted(
        clusters,
        key=lambda c: (min(first[n] for n in c.capsules), _order(table.capsules[c.leader])),
    )


def joined_graph(calls: CompactCalls, clusters: Sequence[Cluster]) -> dict[str, Any]:
    """The ``joined`` object of ``compare.json`` from a clustering of every run's calls (in
    node order, :func:`ordered`). Each node's ``multiplicity`` and ``members`` and each edge's
    ``runs`` are :class:`~.compact.Streamed` values, read from ``calls`` when written."""
    table = calls.table
    where = node_of(clusters, len(table.capsules))
    node_runs, positions = calls.placement(where, len(clusters))
    scores = [m.get("score") for m in calls.metrics]
    nodes: list[dict[str, Any]] = []
    for n, c in enumerate(clusters):
        runs, counts = node_runs[n]
        nodes.append(
            {
                "id": f"j{n}",
                "tool": table.tools[c.leader],
                "key": table.keys[c.leader],
                "support": len(runs),
                "multiplicity": Multiplicity(calls, runs, counts),
                "members": Members(calls, positions[n]),
                "score": _score_summary(runs, scores),
            }
        )
    edges = _joined_edges(calls, where)
    motifs, detours = _motifs(calls, nodes, edges, node_runs)
    return {"nodes": nodes, "edges": edges, "motifs": motifs, "detours": detours}


def _joined_edges(calls: CompactCalls, where: array[int]) -> list[dict[str, Any]]:
    links: dict[tuple[int, int], list[array[int]]] = {}
    methods: dict[tuple[int, int], set[str]] = {}
    for (producer, consumer, method), runs in calls.links.items():
        pair = (where[producer], where[consumer])
        links.setdefault(pair, []).append(runs)  # each array: distinct runs, in order
        methods.setdefault(pair, set()).add(method)
    edges: list[dict[str, Any]] = []
    for a, b in sorted(links):
        parts = links[(a, b)]
        runs = parts[0] if len(parts) == 1 else array("I", sorted(set().union(*parts)))
        edges.append(
            {
                "source": f"j{a}",
                "target": f"j{b}",
                "support": len(runs),
                "runs": RunIds(calls, runs),
                "methods": sorted(methods[(a, b)]),
            }
        )
    return edges


def _motifs(
    calls: CompactCalls,
    nodes: Sequence[dict[str, Any]],
    edges: Sequence[dict[str, Any]],
    node_runs: Sequence[tuple[array[int], array[int]]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    n_runs = len(calls.run_ids)
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
            "runs": sorted(calls.run_ids[r] for r in node_runs[i][0]),
        }
        for i, n in enumerate(nodes)
        if n["support"] <= low and n["support"] < high
    ]
    return motifs, detours
