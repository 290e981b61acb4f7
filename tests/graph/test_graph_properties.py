"""Properties of the derived views and formats over random graphs."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
from graph_helpers import agent, file_entity, obs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_bridge.graph import (
    Graph,
    GraphAccumulator,
    GraphFilter,
    filter_graph,
    simple_paths,
    to_networkx,
    to_prov,
    write_graphml,
)
from otel_bridge.graph.query import CAUSAL_STATUSES, path_edges
from otel_bridge.graph.summary import causal_name
from otel_bridge.model import Attribution, Channel, Evidence, RelationKind

ENTITIES = [agent(c) for c in "abc"] + [file_entity(f"/f{i}") for i in range(3)]
RELATIONS = [
    RelationKind.INVOKED,
    RelationKind.OPENED,
    RelationKind.DELEGATED_TO,
    RelationKind.CHILD_OF,
]


@st.composite
def graphs(draw: st.DrawFn) -> Graph:
    """A random accumulated graph over a few entities (cycles and self-loops included)."""
    acc = GraphAccumulator()
    for i in range(draw(st.integers(0, 20))):
        acc.apply(
            obs(
                f"r{i}",
                subject=draw(st.sampled_from(ENTITIES)),
                relation=draw(st.sampled_from(RELATIONS)),
                obj=draw(st.sampled_from(ENTITIES)),
                channel=draw(st.sampled_from(list(Channel))),
                backend=draw(st.sampled_from(["linux", "otlp"])),
                evidence=Evidence(
                    attribution=draw(st.sampled_from(list(Attribution))),
                    causal=draw(st.one_of(st.none(), st.booleans())),
                ),
            )
        )
    return acc.graph()


filters = st.builds(
    GraphFilter,
    kinds=st.frozensets(st.sampled_from(["agent", "file", "process"])),
    relations=st.frozensets(st.sampled_from([r.value for r in RELATIONS])),
    channels=st.frozensets(st.sampled_from([c.value for c in Channel])),
    causal=st.frozensets(st.sampled_from(CAUSAL_STATUSES)),
    grades=st.frozensets(st.sampled_from(list("ABCDU"))),
)


@settings(max_examples=80, deadline=None)
@given(graphs(), filters)
def test_filter_is_a_consistent_sub_view(graph: Graph, flt: GraphFilter) -> None:
    """A filtered view holds only matching elements of the source, and counts them right."""
    view = filter_graph(graph, flt)
    source_nodes = {n.id: n for n in graph.nodes}
    source_edges = {e.id: e for e in graph.edges}
    assert all(source_nodes[n.id] == n for n in view.nodes)
    assert all(source_edges[e.id] == e for e in view.edges)
    assert all(flt.node_ok(n) for n in view.nodes)
    for e in view.edges:
        assert flt.edge_ok(e)
        assert not flt.causal or causal_name(e.causal) in flt.causal
    assert view.summary["nodes"] == len(view.nodes)
    assert view.summary["edges"] == len(view.edges)
    assert sum(view.summary["edges_by_relation"].values()) == len(view.edges)
    if flt.filters_edges_only:
        ends = {e.source for e in view.edges} | {e.target for e in view.edges}
        assert {n.id for n in view.nodes} <= ends


@settings(max_examples=40, deadline=None)
@given(graphs())
def test_empty_filter_is_identity(graph: Graph) -> None:
    """No criteria gives back every node and edge with the same summary."""
    view = filter_graph(graph, GraphFilter())
    assert (view.nodes, view.edges) == (graph.nodes, graph.edges)
    assert view.summary == graph.summary


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(), st.integers(1, 4), st.integers(1, 5), st.data())
def test_paths_are_bounded_simple_and_connected(
    graph: Graph, depth: int, count: int, data: st.DataObject
) -> None:
    """Paths are simple, connected hop by hop, within both bounds, and shortest first."""
    if not graph.nodes:
        return
    ids = [n.id for n in graph.nodes]
    source = data.draw(st.sampled_from(ids))
    target = data.draw(st.sampled_from(ids))
    paths = simple_paths(graph, source, target, max_depth=depth, max_paths=count)
    assert len(paths) <= count
    for path in paths:
        assert path[0] == source
        assert path[-1] == target
        assert len(set(path)) == len(path)
        assert len(path) - 1 <= depth
        assert all(path_edges(graph, path))
    assert [len(p) for p in paths] == sorted(len(p) for p in paths)
    if source != target:
        reachable = (
            nx.has_path(nx.DiGraph([(e.source, e.target) for e in graph.edges]), source, target)
            if graph.edges and source in {e.source for e in graph.edges}
            else False
        )
        if not reachable:
            assert paths == []


@settings(max_examples=40, deadline=None)
@given(graphs())
def test_prov_accounts_for_every_node_and_edge(graph: Graph) -> None:
    """PROV-JSON has one record per node and per edge, and references only known ids."""
    doc = to_prov(graph)
    element_sections = ("agent", "activity", "entity")
    elements = {k for s in element_sections for k in doc.get(s, {})}
    assert elements == {f"ob:{n.id}" for n in graph.nodes}
    relations = {
        k: v
        for s, recs in doc.items()
        if s not in (*element_sections, "prefix")
        for k, v in recs.items()
    }
    assert set(relations) == {f"ob:{e.id}" for e in graph.edges}
    for record in relations.values():
        for key, value in record.items():
            if key.startswith("prov:"):
                assert value in elements


@settings(max_examples=25, deadline=None)
@given(graphs())
def test_networkx_and_graphml_keep_counts(graph: Graph) -> None:
    """The networkx view and a GraphML round trip keep every node and edge."""
    g = to_networkx(graph)
    assert (g.number_of_nodes(), g.number_of_edges()) == (len(graph.nodes), len(graph.edges))
    for e in graph.edges:
        assert g.get_edge_data(e.source, e.target, key=e.relation)["id"] == e.id
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "g.graphml"
        write_graphml(graph, path)
        back = nx.read_graphml(path, force_multigraph=True)
    assert back.number_of_nodes() == len(graph.nodes)
    assert back.number_of_edges() == len(graph.edges)
    counts = sorted(d["evidence_count"] for _, _, d in back.edges(data=True))
    assert counts == sorted(e.evidence_count for e in graph.edges)
