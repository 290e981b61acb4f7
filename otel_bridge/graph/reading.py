"""One reading of "what a process wrote" and "what it reached", for every layer above the graph.

The OS backends see different things (``docs/host.md``): ``linux`` (fanotify) reports a write
when a file open for writing is closed (``wrote``), and create, delete and rename; ``strace`` and
``ebpf`` see the ``open`` with its access mode and never the write itself (``opened`` with
``file.access: write``). A successful non-blocking ``connect()`` is ``connected_to`` under
``linux`` (the socket was seen established) but an ``attempted_connect`` with result ``pending``
under ``strace`` (the syscall returned ``EINPROGRESS``). ``report``, ``review`` and ``compare``
read the graph through these functions, so the same workload gives the same written files and
endpoints whichever backend observed it, and each says *how* it was observed:

========================  ============================================================
observation               graph edge (process -> file / endpoint)
========================  ============================================================
``written``               ``wrote``, ``created``, ``renamed``, ``deleted``
``opened_for_writing``    ``opened`` with ``file.access`` ``write`` or ``read_write``
``connected``             ``connected_to``
``attempted``             ``attempted_connect`` whose ``network.connect.result`` is not
                          ``failed`` (a connect begun, its completion not seen)
========================  ============================================================

An open for writing is weaker evidence than a write: the process could write, not that it did.
Readers say which one they hold and never present the weaker as the stronger (``review`` marks a
``produces`` edge resting on an open for writing as a rule, ``rule:opened_for_writing``, graded
D). A failed connect reached nothing and is not listed. The graph merges an edge's attributes
first-available, so an edge's ``file.access`` is that of the first open of the pair.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from otel_bridge.graph.document import Graph, GraphEdge, GraphNode
from otel_bridge.model import FileFacts

WRITTEN = "written"
OPENED_FOR_WRITING = "opened_for_writing"
CONNECTED = "connected"
ATTEMPTED = "attempted"

CHANGE_RELATIONS = frozenset({"wrote", "created", "renamed", "deleted"})
"""Relations of a process to a file that record a change (``written``)."""
WRITE_ACCESS = frozenset({"write", "read_write"})
"""``file.access`` values of an ``opened`` edge that opened the file for writing."""
_STRENGTH = {WRITTEN: 2, OPENED_FOR_WRITING: 1, CONNECTED: 2, ATTEMPTED: 1}


def write_kind(relation: str, access: Any) -> str | None:
    """How an edge of ``relation`` whose ``file.access`` is ``access`` shows a write:
    ``written``, ``opened_for_writing``, or None (not a write)."""
    if relation in CHANGE_RELATIONS:
        return WRITTEN
    if relation == "opened" and access in WRITE_ACCESS:
        return OPENED_FOR_WRITING
    return None


def reach_kind(relation: str, result: Any) -> str | None:
    """How an edge of ``relation`` whose ``network.connect.result`` is ``result`` shows an
    endpoint reached: ``connected``, ``attempted``, or None (not a connect, or a failed one)."""
    if relation == "connected_to":
        return CONNECTED
    if relation == "attempted_connect" and result != "failed":
        return ATTEMPTED
    return None


def write_observation(relation: str, attrs: Mapping[str, Any] | None) -> str | None:
    """:func:`write_kind` of an edge's relation and attributes."""
    return write_kind(relation, attrs.get("file.access") if attrs else None)


def reach_observation(relation: str, attrs: Mapping[str, Any] | None) -> str | None:
    """:func:`reach_kind` of an edge's relation and attributes."""
    return reach_kind(relation, attrs.get("network.connect.result") if attrs else None)


def strongest(observations: Iterable[str]) -> str | None:
    """The strongest of ``observations`` (``written`` over ``opened_for_writing``, ``connected``
    over ``attempted``); None when there are none."""
    return max(observations, key=lambda o: _STRENGTH.get(o, 0), default=None)


@dataclass(frozen=True, slots=True)
class Effect:
    """Every edge from one process to one file it wrote (or endpoint it reached), read as one."""

    process: str
    target: str
    """The file or endpoint node id."""
    label: str
    """The file's path, or the endpoint node's label."""
    observed: str
    """The strongest observation of the edges: ``written``/``opened_for_writing`` for a file,
    ``connected``/``attempted`` for an endpoint."""
    relations: tuple[str, ...]
    edges: tuple[str, ...]
    grade: str
    """The graph grade of the strongest edges (the weakest grade among them)."""
    first_seen: int | None
    last_seen: int | None


Classify = Callable[[str, Mapping[str, Any] | None], str | None]


def _effects(
    graph: Graph,
    classify: Classify,
    kind: str,
    processes: Iterable[str] | None,
) -> list[Effect]:
    nodes = {n.id: n for n in graph.nodes}
    wanted = None if processes is None else set(processes)
    grouped: dict[tuple[str, str], list[tuple[str, GraphEdge]]] = {}
    for e in graph.edges:
        if wanted is not None and e.source not in wanted:
            continue
        observed = classify(e.relation, e.attrs)
        node = nodes.get(e.target)
        if observed is None or node is None or node.kind != kind:
            continue
        grouped.setdefault((e.source, e.target), []).append((observed, e))
    out = []
    for (process, target), seen in grouped.items():
        best = strongest(o for o, _ in seen) or ""
        edges = [e for o, e in seen if o == best]
        out.append(
            Effect(
                process=process,
                target=target,
                label=_label(nodes[target]),
                observed=best,
                relations=tuple(sorted({e.relation for _, e in seen})),
                edges=tuple(sorted(e.id for _, e in seen)),
                grade=max(e.grade for e in edges),  # "A" < "B" < ... < "U": the weakest
                first_seen=min((e.first_seen for _, e in seen if e.first_seen), default=None),
                last_seen=max((e.last_seen for _, e in seen if e.last_seen), default=None),
            )
        )
    out.sort(key=lambda w: (w.process, w.label, w.target))
    return out


def _label(node: GraphNode) -> str:
    if isinstance(node.facts, FileFacts):
        return node.facts.path
    return node.label or node.id


def writes(graph: Graph, processes: Iterable[str] | None = None) -> list[Effect]:
    """The files each process (of ``processes``, default all) wrote or opened for writing."""
    return _effects(graph, write_observation, "file", processes)


def reached_endpoints(graph: Graph, processes: Iterable[str] | None = None) -> list[Effect]:
    """The endpoints each process (of ``processes``, default all) connected or began to
    connect to (failed connects are not listed)."""
    return _effects(graph, reach_observation, "endpoint", processes)


__all__ = [
    "ATTEMPTED",
    "CHANGE_RELATIONS",
    "CONNECTED",
    "OPENED_FOR_WRITING",
    "WRITE_ACCESS",
    "WRITTEN",
    "Effect",
    "reach_kind",
    "reach_observation",
    "reached_endpoints",
    "strongest",
    "write_kind",
    "write_observation",
    "writes",
]
