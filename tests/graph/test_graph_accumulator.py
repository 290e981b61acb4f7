"""GraphAccumulator: entity-relation graph, counts, first-available attributes, support."""

from __future__ import annotations

from typing import Any

from graph_helpers import PROC, agent, file_entity, obs

from otel_bridge.graph import GraphAccumulator
from otel_bridge.model import (
    Attribution,
    Channel,
    CoverageRecord,
    Entity,
    EntityKind,
    Evidence,
    RelationKind,
    Source,
)
from otel_bridge.stamping import EARLIEST_TIME


def _snapshot(*observations: Any, **kwargs: Any) -> dict[str, Any]:
    acc = GraphAccumulator(**kwargs)
    acc.apply_many(list(observations))
    doc: dict[str, Any] = acc.to_dict()
    return doc


def _edge(doc: dict[str, Any], relation: str = "opened") -> dict[str, Any]:
    edges: list[dict[str, Any]] = [e for e in doc["edges"] if e["relation"] == relation]
    (edge,) = edges
    return edge


def test_seventeen_opens_share_one_edge_with_logical_count_seventeen() -> None:
    """17 separately recorded opens: one edge, logical 17, evidence 17 (paper IV-B)."""
    doc = _snapshot(*(obs(f"linux:{i}") for i in range(17)))
    assert len(doc["nodes"]) == 2
    edge = _edge(doc)
    assert (edge["logical_count"], edge["evidence_count"]) == (17, 17)


def test_seventeen_replays_of_one_span_count_one_logical_occurrence() -> None:
    """17 replays of one identified occurrence: logical 1, evidence 17."""
    replays = [
        obs(
            "abc",
            subject=agent("a"),
            relation=RelationKind.INVOKED,
            obj=Entity(kind=EntityKind.TOOL_CALL, id="tool_call:t:abc", label="shell"),
            occurrence="t:abc",
            channel=Channel.SEM,
            backend="otlp",
            evidence=Evidence(attribution=Attribution.REPORTED),
        )
        for _ in range(17)
    ]
    doc = _snapshot(*replays)
    edge = _edge(doc, "invoked")
    assert (edge["logical_count"], edge["evidence_count"]) == (1, 17)
    for node in doc["nodes"]:
        assert (node["logical_count"], node["evidence_count"]) == (1, 17)


def test_occurrence_counted_once_per_element_across_observations() -> None:
    """One occurrence touching a node through two observations counts once for that node."""
    a = agent("a")
    doc = _snapshot(
        obs("s#0", subject=a, relation=None, occurrence="t:s"),
        obs(
            "s#1",
            subject=a,
            relation=RelationKind.REQUESTED,
            obj=Entity(kind=EntityKind.MODEL, id="model:p:m"),
            occurrence="t:s",
        ),
    )
    node = next(n for n in doc["nodes"] if n["id"] == a.id)
    assert (node["logical_count"], node["evidence_count"]) == (1, 2)


def test_observations_without_occurrence_each_count() -> None:
    """An observation with no occurrence is its own logical occurrence."""
    doc = _snapshot(obs("x", occurrence=""), obs("x", occurrence=""))
    assert _edge(doc)["logical_count"] == 2


def test_bounded_window_only_overcounts_old_replays() -> None:
    """With a tiny occurrence window an old replay is counted again; evidence stays exact."""
    acc = GraphAccumulator(occurrence_window=4)
    acc.apply_many([obs("r0")] + [obs(f"r{i}", obj=file_entity(f"/f{i}")) for i in range(1, 6)])
    acc.apply(obs("r0"))
    edge = next(e for e in acc.to_dict()["edges"] if e["target"] == "file:/tmp/f")
    assert edge["evidence_count"] == 2
    assert edge["logical_count"] == 2
    recent = GraphAccumulator(occurrence_window=4)
    recent.apply_many([obs("r0"), obs("r0")])
    assert recent.to_dict()["edges"][0]["logical_count"] == 1


def test_first_and_last_seen_use_times_and_end_times() -> None:
    """first_seen is the earliest time, last_seen the latest time or end time; 0 is unknown."""
    doc = _snapshot(obs("a", time=500, end=900), obs("b", time=300), obs("c", time=0))
    edge = _edge(doc)
    assert (edge["first_seen"], edge["last_seen"]) == (300, 900)
    only_unknown = _snapshot(obs("z", time=0))
    assert _edge(only_unknown)["first_seen"] is None
    assert _edge(only_unknown)["last_seen"] is None


def test_attributes_are_first_available() -> None:
    """A key keeps the first value seen; later observations only add missing keys."""
    doc = _snapshot(
        obs("a", obj=file_entity("/tmp/f", owner="alice"), attrs={"flags": "O_RDONLY"}),
        obs("b", obj=file_entity("/tmp/f", owner="bob", size=3), attrs={"flags": "O_RDWR", "x": 1}),
    )
    node = next(n for n in doc["nodes"] if n["id"] == "file:/tmp/f")
    assert node["attrs"] == {"file.path": "/tmp/f", "owner": "alice", "size": 3}
    assert _edge(doc)["attrs"] == {"flags": "O_RDONLY", "x": 1}


def test_merges_never_change_the_mappings_observations_carry() -> None:
    """A row holds the attributes of the observation that added it; a later merge (new keys,
    an earlier time of the edge) gives the row a new mapping and leaves the observations'
    own as they were (the model is immutable, and other readers hold them too)."""
    first = obs("a", obj=file_entity("/tmp/f"), attrs={"flags": "O_RDONLY"}, time=500)
    node_attrs, edge_attrs = dict(first.object.attrs), dict(first.attrs)  # type: ignore[union-attr]
    later = obs(
        "b",
        obj=file_entity("/tmp/f", size=3),
        attrs={"x": 1, EARLIEST_TIME: 100},
        time=200,
    )
    doc = _snapshot(first, later, obs("c", attrs={"y": 2}, time=100))
    assert first.object.attrs == node_attrs  # type: ignore[union-attr]
    assert first.attrs == edge_attrs
    assert later.attrs == {"x": 1, EARLIEST_TIME: 100}
    node = next(n for n in doc["nodes"] if n["id"] == "file:/tmp/f")
    assert node["attrs"] == {"file.path": "/tmp/f", "size": 3}
    assert _edge(doc)["attrs"] == {"flags": "O_RDONLY", "x": 1, "y": 2}


def test_label_is_first_non_empty() -> None:
    """An unlabeled first sighting takes the label of a later one."""
    bare = Entity(kind=EntityKind.PROCESS, id=PROC.id)
    doc = _snapshot(obs("a", subject=bare), obs("b"))
    node = next(n for n in doc["nodes"] if n["id"] == PROC.id)
    assert node["label"] == PROC.label


def test_attribute_values_become_json() -> None:
    """Tuples become lists and bytes a tagged base64 object."""
    doc = _snapshot(obs("a", attrs={"argv": ("ls", "-l"), "raw": b"\x00\x01"}))
    assert _edge(doc)["attrs"] == {"argv": ["ls", "-l"], "raw": {"$bytes": "AAE="}}


def test_channels_and_backends_accumulate() -> None:
    """Channels and backends of every supporting observation are listed, sorted."""
    doc = _snapshot(
        obs("a", backend="strace"),
        obs("b", backend="linux"),
        obs("c", channel=Channel.SEM, backend="otlp"),
    )
    edge = _edge(doc)
    assert edge["channels"] == ("os", "sem")
    assert edge["backends"] == ("linux", "otlp", "strace")


def test_support_retained_only_when_asked_and_bounded() -> None:
    """support lists observation ids with retain_support, capped by support_limit."""
    many = [obs(f"linux:{i}") for i in range(5)]
    assert _edge(_snapshot(*many))["support"] is None
    assert _edge(_snapshot(*many, retain_support=True))["support"] == [
        f"linux:{i}#0" for i in range(5)
    ]
    capped = _edge(_snapshot(*many, retain_support=True, support_limit=2))
    assert capped["support"] == ["linux:0#0", "linux:1#0"]
    assert capped["evidence_count"] == 5


def test_derived_support_method_and_score() -> None:
    """Derived observations contribute their support ids, methods and the maximum score."""

    def bridge(record: str, method: str, score: float, support: tuple[str, ...]) -> Any:
        return obs(
            record,
            subject=agent("a"),
            relation=RelationKind.CORRELATED_WITH_PROCESS,
            obj=PROC,
            channel=Channel.SEM,
            backend="correlate",
            evidence=Evidence(
                attribution=Attribution.HEURISTIC,
                inferred=True,
                causal=False,
                method=method,
                score=score,
                support=support,
            ),
        )

    one = _edge(_snapshot(bridge("b1", "exe_basename", 0.8, ("x#0",))), "correlated_with_process")
    assert one["method"] == "exe_basename"
    assert one["score"] == 0.8
    assert one["derived_support"] == ["x#0"]
    assert one["grade"] == "D"
    both = _edge(
        _snapshot(
            bridge("b1", "exe_basename", 0.8, ("x#0",)),
            bridge("b2", "argv_tail", 0.95, ("y#0", "x#0")),
        ),
        "correlated_with_process",
    )
    assert both["method"] == ["argv_tail", "exe_basename"]
    assert both["score"] == 0.95
    assert both["derived_support"] == ["x#0", "y#0"]


def test_coverage_is_summarized_by_reason_and_channel() -> None:
    """Coverage records are counted in the summary."""
    acc = GraphAccumulator()
    source = Source(channel=Channel.OS, backend="linux", record_id="c")
    acc.apply_coverage([CoverageRecord(source=source, reason="collection.network.degraded")] * 2)
    summary = acc.to_dict()["summary"]
    assert summary["coverage"] == {"collection.network.degraded": 2}
    assert summary["coverage_by_channel"] == {"os": 2}
    assert summary["coverage_total"] == 2


def test_summary_counts() -> None:
    """The summary counts nodes by kind and channel, edges by relation, channel, grade, causal."""
    doc = _snapshot(
        obs("a"),
        obs("b", relation=RelationKind.WROTE),
        obs("c", subject=agent("x"), relation=None, channel=Channel.SEM),
    )
    s = doc["summary"]
    assert s["nodes"] == 3
    assert s["edges"] == 2
    assert s["observations"] == 3
    assert s["nodes_by_kind"] == {"agent": 1, "file": 1, "process": 1}
    assert s["nodes_by_channel"] == {"os": 2, "sem": 1}
    assert s["edges_by_relation"] == {"opened": 1, "wrote": 1}
    assert s["edges_by_grade"] == {"A": 2}
    assert s["edges_by_causal"] == {"true": 2}


def test_edge_ids_are_stable_and_distinct() -> None:
    """Edge ids depend only on (source, relation, target)."""
    a = _snapshot(obs("a"), obs("b", relation=RelationKind.WROTE))
    b = _snapshot(obs("z", relation=RelationKind.WROTE), obs("y"))
    assert [e["id"] for e in a["edges"]] == [e["id"] for e in b["edges"]]
    assert len({e["id"] for e in a["edges"]}) == 2


def test_run_metadata_is_copied() -> None:
    """The run object is the metadata given to the accumulator."""
    assert _snapshot(run={"id": "r1"})["run"] == {"id": "r1"}


def test_an_entity_with_an_empty_id_is_still_a_node() -> None:
    """The subject memo has no id of its own: even an empty entity id names a node."""
    blank = Entity(kind=EntityKind.SPAN, id="")
    doc = _snapshot(obs("a", subject=blank, relation=None), obs("b", subject=blank))
    assert [n["id"] for n in doc["nodes"]] == ["", "file:/tmp/f"]
    assert [e["source"] for e in doc["edges"]] == [""]
