"""Queries (filters, bounded paths) and other formats (networkx, GraphML, PROV-JSON)."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
from graph_helpers import PROC, agent, file_entity, obs
from graph_scenario import scenario_graph

from otel_bridge.errors import OtelBridgeError
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
from otel_bridge.graph.query import path_edges
from otel_bridge.model import Channel, Evidence, RelationKind


@pytest.fixture(scope="module")
def graph() -> Graph:
    """The scenario graph."""
    return Graph.from_dict(scenario_graph())


def test_filter_by_kind_keeps_touching_edges(graph: Graph) -> None:
    """--kind selects nodes; kept edges touch at least one selected node."""
    view = filter_graph(graph, GraphFilter(kinds=frozenset({"file"})))
    assert {n.kind for n in view.nodes} == {"file"}
    assert {e.relation for e in view.edges} == {"opened", "observed_change"}
    assert view.summary["nodes"] == len(view.nodes)
    assert graph.nodes != view.nodes  # a derived view; the source is unchanged
    assert len(graph.nodes) > len(view.nodes)


def test_filter_by_relation_channel_and_grade(graph: Graph) -> None:
    """Edge filters combine: relation, channel, backend and grade."""
    view = filter_graph(graph, GraphFilter(relations=frozenset({"opened", "connected_to"})))
    assert {e.relation for e in view.edges} == {"opened", "connected_to"}
    # only the nodes those edges connect stay in the view
    assert {n.id for n in view.nodes} == {e.source for e in view.edges} | {
        e.target for e in view.edges
    }
    os_view = filter_graph(graph, GraphFilter(channels=frozenset({"os"})))
    assert all("os" in e.channels for e in os_view.edges)
    assert all("os" in n.channels for n in os_view.nodes)
    grade_a = filter_graph(graph, GraphFilter(grades=frozenset({"A"})))
    assert {e.relation for e in grade_a.edges} == {"opened", "spawned", "executed"}
    derived = filter_graph(graph, GraphFilter(backends=frozenset({"correlate"})))
    assert {e.relation for e in derived.edges} == {"correlated_with_process"}


@pytest.mark.parametrize(
    ("status", "relations"),
    [
        ("true", {"opened", "spawned", "executed", "connected_to"}),
        ("false", {"observed_change", "correlated_with_process"}),
        ("mixed", set()),
    ],
)
def test_filter_by_causal_status(graph: Graph, status: str, relations: set[str]) -> None:
    """--causal true/false/mixed/unknown selects edges by aggregated causal flag."""
    view = filter_graph(graph, GraphFilter(causal=frozenset({status})))
    assert {e.relation for e in view.edges} == relations


def test_unknown_causal_is_never_stated(graph: Graph) -> None:
    """ "unknown" selects edges whose causal flag was never stated (the sem relations)."""
    view = filter_graph(graph, GraphFilter(causal=frozenset({"unknown"})))
    assert {e.relation for e in view.edges} == {"invoked", "declared_command", "requested"}
    with pytest.raises(OtelBridgeError, match="causal status"):
        GraphFilter(causal=frozenset({"perhaps"}))


def test_bounded_paths_across_planes(graph: Graph) -> None:
    """A path leads from the agent through the bridged tool call to the file it opened."""
    agent_id = "agent:agents:planner"
    paths = simple_paths(graph, agent_id, "file:/tmp/data.txt", max_depth=4, max_paths=5)
    assert paths
    assert paths[0][0] == agent_id
    assert paths[0][-1] == "file:/tmp/data.txt"
    hops = path_edges(graph, paths[0])
    assert [h[0].relation for h in hops] == ["invoked", "correlated_with_process", "opened"]
    assert simple_paths(graph, agent_id, "file:/tmp/data.txt", max_depth=2) == []


def test_paths_are_bounded_in_count_and_survive_cycles() -> None:
    """In a cyclic graph the path search stops at max_paths and max_depth."""
    acc = GraphAccumulator()
    names = [agent(c) for c in "abcd"]
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i != j:
                acc.apply(
                    obs(
                        f"{i}{j}",
                        subject=a,
                        relation=RelationKind.DELEGATED_TO,
                        obj=b,
                        channel=Channel.SEM,
                        evidence=Evidence(),
                    )
                )
    g = acc.graph()
    paths = simple_paths(g, names[0].id, names[3].id, max_depth=3, max_paths=3)
    assert len(paths) == 3
    assert paths[0] == [names[0].id, names[3].id]
    assert simple_paths(g, names[0].id, names[0].id) == [[names[0].id]]
    with pytest.raises(OtelBridgeError, match="no node"):
        simple_paths(g, "nope", names[0].id)
    with pytest.raises(OtelBridgeError, match="at least 1"):
        simple_paths(g, names[0].id, names[1].id, max_depth=0)


def test_networkx_view(graph: Graph) -> None:
    """to_networkx: one node per node, one keyed edge per edge, attributes kept."""
    g = to_networkx(graph)
    assert isinstance(g, nx.MultiDiGraph)
    assert g.number_of_nodes() == len(graph.nodes)
    assert g.number_of_edges() == len(graph.edges)
    edge = next(e for e in graph.edges if e.relation == "opened")
    data = g.get_edge_data(edge.source, edge.target, key="opened")
    assert data["grade"] == "A"
    assert data["causal"] is True
    assert g.nodes[PROC.id.replace(":h:10:1", ":host-1:200:1767225600000")]["kind"] == "process"
    assert g.graph["run"] == {"id": "golden-run"}


def test_graphml_round_trips_through_networkx(graph: Graph, tmp_path: Path) -> None:
    """The GraphML file reads back with every node, edge and scalar attribute."""
    path = tmp_path / "g.graphml"
    write_graphml(graph, path)
    back = nx.read_graphml(path, force_multigraph=True)
    assert back.number_of_nodes() == len(graph.nodes)
    assert back.number_of_edges() == len(graph.edges)
    node = back.nodes["file:/tmp/data.txt"]
    assert node["kind"] == "file"
    assert node["channels"] == '["os"]'
    relations = {d["relation"] for _, _, d in back.edges(data=True)}
    assert "correlated_with_process" in relations


def test_prov_json_mapping(graph: Graph) -> None:
    """PROV-JSON: agents, activities and entities, relations mapped with evidence kept."""
    doc = to_prov(graph)
    assert doc["prefix"] == {"ob": "urn:otel-bridge:"}
    assert "ob:agent:agents:planner" in doc["agent"]
    assert doc["agent"]["ob:agent:agents:planner"]["prov:type"] == "prov:SoftwareAgent"
    activities = doc["activity"]
    assert any(k.startswith("ob:tool_call:") for k in activities)
    assert any(k.startswith("ob:process:") for k in activities)
    assert "ob:file:/tmp/data.txt" in doc["entity"]
    (assoc,) = doc["wasAssociatedWith"].values()
    assert assoc["prov:agent"] == "ob:agent:agents:planner"
    used = [r for r in doc["used"].values() if r["ob:relation"] == "opened"]
    assert used[0]["ob:grade"] == "A"
    assert used[0]["ob:causal"] is True
    assert any(r["ob:relation"] == "spawned" for r in doc["wasStartedBy"].values())
    bridge = next(
        r for r in doc["wasInfluencedBy"].values() if r["ob:relation"] == "correlated_with_process"
    )
    assert bridge["ob:inferred"] is True
    assert bridge["ob:causal"] is False
    assert bridge["ob:method"] == "command_head"
    started = next(v for k, v in activities.items() if k.startswith("ob:tool_call:"))
    assert started["prov:startTime"].endswith("Z")
    relation_records = sum(
        len(doc[k]) for k in doc if k not in ("prefix", "agent", "activity", "entity")
    )
    assert relation_records == len(graph.edges)


def test_self_loop_counts_its_node_once() -> None:
    """An observation relating a node to itself counts one evidence and one occurrence."""
    acc = GraphAccumulator()
    a = agent("a")
    acc.apply_many(
        [
            obs("x", subject=a, relation=RelationKind.DELEGATED_TO, obj=a),
            obs("y", subject=a, relation=RelationKind.DELEGATED_TO, obj=a, occurrence=""),
        ]
    )
    (node,) = acc.to_dict()["nodes"]
    assert (node["logical_count"], node["evidence_count"]) == (2, 2)
    _ = file_entity
