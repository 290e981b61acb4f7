"""Queries over a finished graph (ExecWeave section V-F).

Filtering produces a derived view, never a rewrite of the source graph:

* node filters (``kind``, ``key`` (exact stable key), and ``channel``/``backend`` which also
  apply to nodes) select nodes;
* edge filters (``relation``, ``channel``, ``backend``, ``causal``, ``grade``) select edges;
* when a node filter is given, an edge is kept only if it satisfies the edge filters **and**
  touches at least one selected node; without node filters every edge satisfying the edge
  filters is kept;
* when only edge filters are given (relation, causal status, grade, and no kind), the view keeps
  just the nodes those edges connect, so ``--relation correlated_with_process`` shows the bridged
  entities rather than the whole node table. The view's summary is recomputed over what it holds.

Path queries enumerate bounded **directed simple paths** (repeated interactions create cycles):
at most ``max_depth`` edges and ``max_paths`` paths. A path shows that evidence connects two
entities; it does not establish temporal information flow.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from otel_bridge.errors import OtelBridgeError
from otel_bridge.graph.document import Graph, GraphEdge, GraphNode
from otel_bridge.graph.summary import causal_name, summarize

if TYPE_CHECKING:
    import networkx as nx

CAUSAL_STATUSES = ("true", "false", "mixed", "unknown")


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphFilter:
    """What to keep. Each field is a set of accepted values; empty means "any"."""

    kinds: frozenset[str] = frozenset()
    keys: frozenset[str] = frozenset()
    """Stable keys (exact match)."""
    relations: frozenset[str] = frozenset()
    channels: frozenset[str] = frozenset()
    backends: frozenset[str] = frozenset()
    causal: frozenset[str] = frozenset()
    """Causal statuses: ``true``, ``false``, ``mixed``, ``unknown`` (never stated)."""
    grades: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = self.causal - set(CAUSAL_STATUSES)
        if unknown:
            raise OtelBridgeError(
                f"causal status {sorted(unknown)[0]!r} is not one of {', '.join(CAUSAL_STATUSES)}"
            )

    def node_ok(self, node: GraphNode) -> bool:
        """True when ``node`` passes the node filters."""
        return (
            (not self.kinds or node.kind in self.kinds)
            and (not self.keys or node.key in self.keys)
            and (not self.channels or not self.channels.isdisjoint(node.channels))
            and (not self.backends or not self.backends.isdisjoint(node.backends))
        )

    def edge_ok(self, edge: GraphEdge) -> bool:
        """True when ``edge`` passes the edge filters."""
        return (
            (not self.relations or edge.relation in self.relations)
            and (not self.channels or not self.channels.isdisjoint(edge.channels))
            and (not self.backends or not self.backends.isdisjoint(edge.backends))
            and (not self.causal or causal_name(edge.causal) in self.causal)
            and (not self.grades or edge.grade in self.grades)
        )

    @property
    def filters_nodes(self) -> bool:
        """True when some node filter is set."""
        return bool(self.kinds or self.keys or self.channels or self.backends)

    @property
    def selects_all(self) -> bool:
        """True when no filter is set (the view is the whole graph)."""
        return not (self.filters_nodes or self.relations or self.causal or self.grades)

    @property
    def filters_edges_only(self) -> bool:
        """True when an edge-only criterion (relation, causal, grade) is set and no kind or key
        is."""
        return bool(self.relations or self.causal or self.grades) and not (self.kinds or self.keys)


def filter_graph(graph: Graph, flt: GraphFilter) -> Graph:
    """The derived view of ``graph`` that ``flt`` selects (see the module docstring); the graph
    itself when ``flt`` selects everything."""
    if flt.selects_all:
        return graph
    nodes = tuple(n for n in graph.nodes if flt.node_ok(n))
    keep = {n.id for n in nodes}
    edges = tuple(
        e
        for e in graph.edges
        if flt.edge_ok(e) and (not flt.filters_nodes or e.source in keep or e.target in keep)
    )
    if flt.filters_edges_only:
        ends = {e.source for e in edges} | {e.target for e in edges}
        nodes = tuple(n for n in nodes if n.id in ends)
    coverage = dict(graph.summary.get("coverage", {}))
    by_channel = dict(graph.summary.get("coverage_by_channel", {}))
    node_dicts = [n.to_dict() for n in nodes]
    edge_dicts = [e.to_dict() for e in edges]
    observations = int(graph.summary.get("observations", 0))
    summary = summarize(node_dicts, edge_dicts, coverage, by_channel, observations)
    if "bounded" in graph.summary:  # what the whole graph could not hold stays said
        summary["bounded"] = dict(graph.summary["bounded"])
    return Graph(run=graph.run, nodes=nodes, edges=edges, summary=summary)


def to_digraph(graph: Graph) -> nx.DiGraph:
    """A plain directed graph of node ids (one arc per connected ordered pair)."""
    import networkx as nx  # noqa: PLC0415 - lazily: the collector never needs it

    g = nx.DiGraph()
    g.add_nodes_from(n.id for n in graph.nodes)
    g.add_edges_from((e.source, e.target) for e in graph.edges)
    return g


def simple_paths(
    graph: Graph, source: str, target: str, *, max_depth: int = 6, max_paths: int = 20
) -> list[list[str]]:
    """Up to ``max_paths`` directed simple paths of at most ``max_depth`` edges.

    Paths come shortest first (ties in a deterministic order, the graph being sorted).
    """
    ids = {n.id for n in graph.nodes}
    for node_id in (source, target):
        if node_id not in ids:
            raise OtelBridgeError(f"no node {node_id!r} in the graph")
    if max_depth < 1 or max_paths < 1:
        raise OtelBridgeError("--max-depth and --max-paths must be at least 1")
    if source == target:
        return [[source]]
    import networkx as nx  # noqa: PLC0415 - lazily: the collector never needs it

    g = to_digraph(graph)
    paths: list[list[str]] = []
    try:
        # Yen's algorithm yields simple paths in order of length, so the bound on the count
        # keeps the shortest ones and the search stops at the first path that is too long.
        for path in nx.shortest_simple_paths(g, source, target):
            if len(path) - 1 > max_depth or len(paths) >= max_paths:
                break
            paths.append(path)
    except nx.NetworkXNoPath:
        pass
    return paths


def path_edges(graph: Graph, path: list[str]) -> list[list[GraphEdge]]:
    """For each hop of ``path``, the edges (one per relation) that connect it."""
    by_pair: dict[tuple[str, str], list[GraphEdge]] = {}
    for e in graph.edges:
        by_pair.setdefault((e.source, e.target), []).append(e)
    return [by_pair.get((a, b), []) for a, b in itertools.pairwise(path)]
