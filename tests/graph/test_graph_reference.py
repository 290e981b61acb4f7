"""The optimized accumulator against a naive reference, plus the invariants of its row storage
(node totals from incident edges, lazily hashed edge ids, no per-element garbage)."""

from __future__ import annotations

import copy
import gc
from typing import Any

import msgspec
from graph_helpers import PROC, agent, file_entity, obs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_graph import ReferenceGraph

from otel_bridge.graph import GraphAccumulator, encode
from otel_bridge.model import (
    Attribution,
    Channel,
    CoverageRecord,
    Entity,
    EntityKind,
    Evidence,
    ExecutableFacts,
    FileFacts,
    Observation,
    ProcessFacts,
    RelationKind,
    Source,
    ToolCallFacts,
)
from otel_bridge.stamping import EARLIEST_TIME

_SHARED = {"shared": 1}
_started = ProcessFacts(
    host_id="h",
    pid=10,
    start_time_ms=1,
    executable_path="/usr/bin/python3",
    argv=("python3", "x.py"),
    cwd="/w",
)
"""One attribute mapping used by several entities (labeled and not): identity must not matter."""
ENTITIES = [
    agent("a"),
    agent("b"),
    Entity(kind=EntityKind.AGENT, id=agent("a").id),  # unlabeled sighting of agent a
    PROC,
    Entity(kind=EntityKind.PROCESS, id=PROC.id, attrs={"process.pid": 11, "extra": (1, 2)}),
    file_entity("/a"),
    file_entity("/a/b", size=3),
    file_entity("/a0", ratio=float("nan"), raw=b"\x00"),
    Entity(kind=EntityKind.FILE, id="file:/a", attrs=_SHARED),
    Entity(kind=EntityKind.FILE, id="file:/a", label="late label", attrs=_SHARED),
    Entity(kind=EntityKind.MODEL, id="model:p:m", label="m", attrs=_SHARED),
    # sightings of one process that state different facts and keys (start, file event, exec,
    # exit), a file with facts and keys, and a record of another facts type on that file
    *(
        Entity(kind=EntityKind.PROCESS, id=PROC.id, facts=facts, key=key)
        for facts, key in [
            (_started, "process:/usr/bin/python3:python# x.py"),
            (ProcessFacts(host_id="h", pid=10, start_time_ms=1), ""),
            (ProcessFacts(host_id="h", pid=10, start_time_ms=1, exit_code=3), "process:?:x.py"),
            (
                ProcessFacts(host_id="h", pid=10, executable_path="/bin/sh", argv=(), parent_pid=1),
                "process:/bin/sh:",
            ),
            (_started, ""),
        ]
    ),
    Entity(kind=EntityKind.FILE, id="file:/a", facts=FileFacts(path="/a"), key="file:/a"),
    Entity(kind=EntityKind.FILE, id="file:/a", facts=FileFacts(path="/A"), key="file:?"),
    Entity(kind=EntityKind.FILE, id="file:/a", facts=ExecutableFacts(path="/a", name="a")),
]
RELATIONS = [None, RelationKind.OPENED, RelationKind.INVOKED, RelationKind.CHILD_OF]
EVIDENCE = [
    Evidence(attribution=Attribution.SYSCALL, causal=True),
    Evidence(attribution=Attribution.REPORTED),
    Evidence(causal=False, inferred=True),
    Evidence(identity_exact=True, attribution=Attribution.EXACT_IDENTITY),
    Evidence(
        attribution=Attribution.HEURISTIC,
        inferred=True,
        causal=False,
        method="argv_tail",
        score=0.9,
        support=("x#0",),
    ),
    Evidence(attribution=Attribution.HEURISTIC, method="exe_basename", score=0.8),
    Evidence(),
]
ATTRS: list[dict[str, Any]] = [
    {},
    {"flags": "O_RDONLY"},
    {"flags": "O_RDWR", "n": 2},
    _SHARED,
    {EARLIEST_TIME: 40},
    {EARLIEST_TIME: 90, "flags": "O_RDONLY"},
]
"""Observation attributes; an edge keeps the earliest time (``EARLIEST_TIME``) of the
observation that gave it its first time, the others first-available."""


@st.composite
def entities(draw: st.DrawFn) -> Entity:
    """One of ENTITIES, sometimes with an equal but distinct facts record."""
    entity = draw(st.sampled_from(ENTITIES))
    if entity.facts is not None and draw(st.booleans()):
        copy = type(entity.facts)(**msgspec.structs.asdict(entity.facts))
        entity = msgspec.structs.replace(entity, facts=copy)
    return entity


@st.composite
def observations(draw: st.DrawFn) -> list[Observation]:
    """A random stream: entity and relation observations, self-loops, replays, shared ids."""
    out: list[Observation] = []
    for i in range(draw(st.integers(0, 30))):
        if out and draw(st.integers(0, 9)) == 0:  # a replay: the same observation again
            replayed = draw(st.sampled_from(out))
            # the same object, or a copy delivered again (equal, every object a new one)
            out.append(copy.deepcopy(replayed) if draw(st.booleans()) else replayed)
            continue
        relation = draw(st.sampled_from(RELATIONS))
        evidence = draw(st.sampled_from(EVIDENCE))
        if draw(st.booleans()):  # an equal but distinct evidence object
            evidence = Evidence(**{f: getattr(evidence, f) for f in evidence.__struct_fields__})
        out.append(
            obs(
                f"r{draw(st.integers(0, 12))}",
                subject=draw(entities()),
                relation=relation,
                obj=draw(entities()) if relation is not None else None,
                evidence=evidence,
                occurrence=draw(st.sampled_from([None, "", "o1", "o2", "o3"])),
                time=draw(st.sampled_from([0, 50, 100, 300])),
                end=draw(st.sampled_from([0, 0, 400])),
                channel=draw(st.sampled_from(list(Channel))),
                backend=draw(st.sampled_from(["linux", "otlp", "strace", "ebpf", "correlate"])),
                attrs=draw(st.sampled_from(ATTRS)),
                n=i,
            )
        )
    return out


CONFIGS = st.fixed_dictionaries(
    {
        "occurrence_window": st.sampled_from([2, 3, 4, 6, 200_000]),
        "retain_support": st.booleans(),
        "support_limit": st.sampled_from([0, 1, 3, 1000]),
        "run": st.just({"id": "r"}),
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(observations(), CONFIGS, st.lists(st.integers(1, 6), max_size=8), st.booleans())
def test_accumulator_equals_the_naive_reference(
    stream: list[Observation], config: dict[str, Any], chunks: list[int], snapshot_midway: bool
) -> None:
    """Any stream, window, support setting and batching gives the reference's bytes."""
    acc, ref = GraphAccumulator(**config), ReferenceGraph(**config)
    start = 0
    for size in [*chunks, len(stream)]:
        batch = stream[start : start + size]
        if size == 1 and batch:
            acc.apply(batch[0])
        else:
            acc.apply_many(batch)
        ref.apply_many(batch)
        start += size
        if snapshot_midway:
            assert encode(acc.to_dict()) == encode(ref.to_dict())
    source = Source(channel=Channel.OS, backend="linux", record_id="c")
    coverage = CoverageRecord(source=source, reason="collection.file.degraded")
    acc.apply_coverage([coverage])
    ref.apply_coverage([coverage])
    assert encode(acc.to_dict()) == encode(ref.to_dict())


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(observations(), CONFIGS, st.lists(st.integers(1, 6), max_size=8))
def test_rows_of_touched_elements_equal_the_snapshot(
    stream: list[Observation], config: dict[str, Any], chunks: list[int]
) -> None:
    """A copy kept current with only the rows each batch touched (what the ``postgres``
    exporter upserts) equals the whole snapshot after every batch: methods, scores, support and
    derived support included, whatever the batching."""
    acc = GraphAccumulator(**{**config, "run": {"id": "r", "runtime_reads": "keep"}})
    nodes: dict[str, Any] = {}
    edges: dict[str, Any] = {}
    start = 0
    for size in [*chunks, len(stream)]:
        batch = stream[start : start + size]
        start += size
        acc.apply_many(batch)
        touched = {o.subject.id for o in batch} | {o.object.id for o in batch if o.object}
        pairs = {
            (o.subject.id, o.relation.value, o.object.id)
            for o in batch
            if o.object is not None and o.relation is not None
        }
        got_nodes, got_edges = acc.rows(touched, pairs)
        nodes.update((n["id"], n) for n in got_nodes)
        edges.update((e["id"], e) for e in got_edges)
        doc = acc.to_dict()
        assert [nodes[n["id"]] for n in doc["nodes"]] == doc["nodes"]
        assert len(nodes) == len(doc["nodes"])
        assert {e["id"]: e for e in doc["edges"]} == edges


def test_node_totals_add_own_and_incident_edge_observations() -> None:
    """A node's times, channels and counts cover its entity observations and its edges."""
    acc = GraphAccumulator()
    acc.apply_many(
        [
            obs("e", subject=PROC, relation=None, time=50, channel=Channel.SEM, backend="otlp"),
            obs("a", obj=file_entity("/x"), time=100),
            obs("b", obj=file_entity("/y"), time=200, end=250),
            obs("c", subject=file_entity("/x"), obj=PROC, relation=RelationKind.CHILD_OF),
        ]
    )
    proc = next(n for n in acc.to_dict()["nodes"] if n["id"] == PROC.id)
    assert (proc["first_seen"], proc["last_seen"]) == (50, 1000)
    assert (proc["evidence_count"], proc["logical_count"]) == (4, 4)
    assert proc["channels"] == ("os", "sem")
    assert proc["backends"] == ("linux", "otlp")


def test_one_occurrence_over_several_edges_counts_each_node_once() -> None:
    """A span reported as two relations of one subject: the subject counts it once."""
    acc = GraphAccumulator()
    acc.apply_many(
        [
            obs("s#0", obj=file_entity("/x"), occurrence="t:s"),
            obs("s#1", obj=file_entity("/y"), occurrence="t:s"),
            obs("s#2", subject=file_entity("/y"), obj=PROC, occurrence="t:s"),
        ]
    )
    doc = acc.to_dict()
    assert {n["id"]: n["logical_count"] for n in doc["nodes"]} == {
        PROC.id: 1,
        "file:/x": 1,
        "file:/y": 1,
    }
    assert [e["logical_count"] for e in doc["edges"]] == [1, 1, 1]
    assert {n["id"]: n["evidence_count"] for n in doc["nodes"]}[PROC.id] == 3


def test_snapshots_repeat_and_do_not_share_state() -> None:
    """Snapshots are equal when nothing changed, survive caller edits, and keep edge ids."""
    acc = GraphAccumulator()
    acc.apply_many([obs("a", obj=file_entity("/x")), obs("b", obj=file_entity("/y"))])
    first = acc.to_dict()
    assert encode(first) == encode(acc.to_dict())
    first["nodes"][0]["attrs"]["edited"] = True
    first["edges"][0]["attrs"]["edited"] = True
    acc.apply(obs("c", obj=file_entity("/a")))
    later = acc.to_dict()
    assert all("edited" not in e["attrs"] for e in [*later["nodes"], *later["edges"]])
    assert {e["id"] for e in first["edges"]} < {e["id"] for e in later["edges"]}
    fresh = GraphAccumulator()
    fresh.apply_many([obs("c", obj=file_entity("/a")), obs("a", obj=file_entity("/x"))])
    fresh.apply(obs("b", obj=file_entity("/y")))
    assert [e["id"] for e in fresh.to_dict()["edges"]] == [e["id"] for e in later["edges"]]


def test_edges_sort_by_source_relation_target_strings() -> None:
    """Edge order is the string order of (source, relation, target), prefixes included."""
    targets = ["/a", "/a/b", "/a0", "/A", "/a b"]
    stream = [
        obs(f"r{i}", subject=subject, relation=relation, obj=file_entity(t))
        for i, (subject, relation, t) in enumerate(
            (s, r, t)
            for s in (PROC, agent("z"), agent("a"))
            for r in (RelationKind.WROTE, RelationKind.OPENED, RelationKind.CHILD_OF)
            for t in targets
        )
    ]
    acc = GraphAccumulator()
    acc.apply_many(stream[::-1])
    keys = [(e["source"], e["relation"], e["target"]) for e in acc.to_dict()["edges"]]
    assert keys == sorted(keys)
    assert len(keys) == 3 * 3 * len(targets)


def test_unlabeled_object_takes_a_later_label() -> None:
    """An entity first seen without a label as a target gets the first label offered later."""
    bare = Entity(kind=EntityKind.FILE, id="file:/l", attrs={"file.path": "/l"})
    acc = GraphAccumulator()
    acc.apply_many([obs("a", obj=bare), obs("b", obj=bare), obs("c", obj=file_entity("/l"))])
    node = next(n for n in acc.to_dict()["nodes"] if n["id"] == "file:/l")
    assert node["label"] == "/l"


def _span_stream(times: list[int]) -> list[Observation]:
    """Spans as ``normalize`` reports them: each an entity observation of its node, then its
    relations, all under the span's occurrence; fresh entity objects on every call."""
    stream: list[Observation] = []
    for i, time in enumerate(times):
        span = f"s{i % 3}"
        tool = Entity(
            kind=EntityKind.TOOL_CALL,
            id=f"tool_call:{span}",
            label="bash",
            attrs={"gen_ai.tool.name": "bash", "span_id": span},
            facts=ToolCallFacts(tool="bash", agent="a", trace_id="t", span_id=span),
            key="tool_call:a:bash",
        )
        command = file_entity(f"/cmd/{span}")
        stream += [
            obs(span, subject=tool, relation=None, time=time, channel=Channel.SEM, n=0),
            obs(span, subject=agent("a"), relation=RelationKind.INVOKED, obj=tool, time=time, n=1),
            obs(span, subject=tool, relation=RelationKind.OPENED, obj=command, time=time, n=2),
            # occurrences reached first through an edge, then by the edge's subject alone, or
            # through another edge
            obs(f"e{i}", obj=command, time=time, occurrence=f"edge-first:{span}"),
            obs(f"e{i}", relation=None, time=time, occurrence=f"edge-first:{span}", n=1),
            obs(f"f{i}", obj=command, time=time, occurrence=f"two-edges:{span}"),
            obs(f"f{i}", obj=file_entity("/other"), time=time, occurrence=f"two-edges:{span}"),
        ]
    return stream


def test_replayed_spans_equal_the_reference() -> None:
    """The pipeline benchmark's stream: spans replayed with fresh, equal entity objects, at
    earlier, equal and later times, so every occurrence is seen again (an occurrence entry that
    is a tuple of element tags, and one that is an edge number) and every facts stamp is
    compared. Applied in one batch and in batches of 4, it gives the reference's bytes."""
    stream = _span_stream([30, 20, 10]) + _span_stream([30, 20, 10]) + _span_stream([5, 40, 20])
    for size in (len(stream), 4):
        configs: list[dict[str, Any]] = [{}, {"retain_support": True, "occurrence_window": 6}]
        for config in configs:
            acc, ref = GraphAccumulator(**config), ReferenceGraph(**config)
            for start in range(0, len(stream), size):
                acc.apply_many(stream[start : start + size])
                ref.apply_many(stream[start : start + size])
            assert encode(acc.to_dict()) == encode(ref.to_dict())


def test_a_subject_seen_again_after_its_own_self_loop_offers_its_facts_again() -> None:
    """The accumulator remembers the entity last merged into the current subject; a self-loop
    that merges another record into that node as an object must make a later subject sighting,
    equal to the remembered entity, offer its record again (the latest sighting wins)."""
    exited = ProcessFacts(host_id="h", pid=10, start_time_ms=1, cwd="/elsewhere", exit_code=3)
    first = Entity(kind=EntityKind.PROCESS, id=PROC.id, facts=_started, key="k")
    other = Entity(kind=EntityKind.PROCESS, id=PROC.id, facts=exited, key="k")
    again = msgspec.structs.replace(first, facts=ProcessFacts(**msgspec.structs.asdict(_started)))
    for known_edge in (False, True):
        stream = [obs("a", subject=first, relation=None, time=1)]
        if known_edge:  # the self-loop edge exists before the object brings another record
            stream.append(obs("b", subject=first, relation=RelationKind.CHILD_OF, obj=first))
        stream += [
            obs("c", subject=first, relation=RelationKind.CHILD_OF, obj=other, time=2_000),
            obs("d", subject=again, relation=None, time=3_000),
        ]
        acc, ref = GraphAccumulator(), ReferenceGraph()
        acc.apply_many(stream)
        ref.apply_many(stream)
        assert encode(acc.to_dict()) == encode(ref.to_dict())
        node = next(n for n in acc.to_dict()["nodes"] if n["id"] == PROC.id)
        assert node["facts"]["exit_code"] == 3  # only the exit record states it
        assert node["facts"]["argv"] == _started.argv
        assert node["facts"]["cwd"] == "/w"  # the first record, seen again last


def test_rows_leave_no_tracked_object_per_element() -> None:
    """Thousands of new nodes and edges add (almost) no object the collector tracks."""
    shared = Evidence(attribution=Attribution.SYSCALL, causal=True)  # as the normalizer shares
    stream = [
        obs(f"r{i}", obj=file_entity(f"/many/{i}"), attrs={"i": i}, evidence=shared)
        for i in range(3000)
    ]
    acc = GraphAccumulator()
    acc.apply(stream[0])
    gc.collect()
    before = len(gc.get_objects())
    acc.apply_many(stream[1:])
    gc.collect()
    assert len(gc.get_objects()) - before < 30
    assert acc.node_count == 3001
    assert acc.edge_count == 3000
