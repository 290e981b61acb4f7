"""graph.json: schema, golden file, typed round trip, determinism."""

from __future__ import annotations

import difflib
import json
import os
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from graph_helpers import agent, file_entity, obs
from graph_scenario import scenario_graph
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.errors import DecodeError
from otel_bridge.graph import Graph, GraphAccumulator, dump, encode, load, validate_document
from otel_bridge.graph.summary import summarize
from otel_bridge.model import Attribution, Channel, Evidence, Observation, RelationKind

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "graph_scenario.json"


def _json(doc: dict[str, Any]) -> Any:
    return json.loads(encode(doc))


def test_golden_scenario() -> None:
    """The scenario's graph.json equals the golden file (regenerate: OTEL_BRIDGE_REGEN_GOLDEN=1)."""
    actual = _json(scenario_graph())
    if os.environ.get("OTEL_BRIDGE_REGEN_GOLDEN") == "1":
        GOLDEN.write_bytes(orjson.dumps(actual, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    expected = json.loads(GOLDEN.read_text())
    if actual != expected:
        diff = difflib.unified_diff(
            json.dumps(expected, indent=2, sort_keys=True).splitlines(),
            json.dumps(actual, indent=2, sort_keys=True).splitlines(),
            "golden",
            "actual",
            lineterm="",
        )
        pytest.fail("graph.json differs from the golden file:\n" + "\n".join(diff))


def test_scenario_validates_against_the_schema() -> None:
    """The snapshot, encoded and parsed, is valid under the shipped JSON Schema."""
    validate_document(_json(scenario_graph()))
    validate_document(_json(scenario_graph(retain_support=False)))


def test_scenario_has_the_expected_shape() -> None:
    """Both sides are present, the late tool span is invoked, grades span A to D."""
    doc = scenario_graph()
    relations = {e["relation"] for e in doc["edges"]}
    assert {
        "invoked",
        "declared_command",
        "requested",
        "spawned",
        "opened",
        "connected_to",
        "observed_change",
        "correlated_with_process",
        "executed",
    } <= relations
    grades = doc["summary"]["edges_by_grade"]
    assert set(grades) == {"A", "B", "C", "D", "U"}
    opened = next(e for e in doc["edges"] if e["relation"] == "opened")
    assert (opened["logical_count"], opened["evidence_count"]) == (3, 3)
    (requested,) = [e for e in doc["edges"] if e["relation"] == "requested"]
    # The agent's own call and the gateway's span of it are one edge seen on two channels.
    assert requested["channels"] == ("gw", "sem")
    assert (requested["logical_count"], requested["evidence_count"]) == (2, 2)
    assert doc["summary"]["coverage"] == {"collection.network.degraded": 1}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d["nodes"][0].pop("kind"), "kind"),
        (lambda d: d["edges"][0].update(causal="maybe"), "causal"),
        (lambda d: d["edges"][0].update(grade="E"), "grade"),
        (lambda d: d["nodes"][0].update(logical_count=-1), "logical_count"),
        (lambda d: d["summary"].pop("coverage"), "coverage"),
    ],
)
def test_schema_rejects_broken_documents(mutate: Any, message: str) -> None:
    """A document breaking the schema raises DecodeError naming the problem."""
    doc = _json(scenario_graph())
    mutate(doc)
    with pytest.raises(DecodeError, match=message):
        Graph.from_dict(doc)


def test_summary_equals_recomputation() -> None:
    """The accumulator's summary equals summarize() over its own nodes and edges."""
    doc = _json(scenario_graph())
    s = doc["summary"]
    again = summarize(
        doc["nodes"], doc["edges"], s["coverage"], s["coverage_by_channel"], s["observations"]
    )
    assert again == s


def test_dump_and_load_file(tmp_path: Path) -> None:
    """dump writes a 0600 file that load reads back to an equal graph."""
    graph = Graph.from_dict(scenario_graph())
    path = tmp_path / "sub" / "graph.json"
    dump(graph, path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert load(path) == graph
    assert load(path).to_dict() == _json(scenario_graph())


@pytest.mark.parametrize(("content", "message"), [(b"{", "not JSON"), (b"[]", "JSON object")])
def test_load_rejects_non_graphs(tmp_path: Path, content: bytes, message: str) -> None:
    """load names the problem with a bad file."""
    path = tmp_path / "g.json"
    path.write_bytes(content)
    with pytest.raises(DecodeError, match=message):
        load(path)
    with pytest.raises(DecodeError, match="cannot read"):
        load(tmp_path / "missing.json")


ENTITIES = [agent("a"), agent("b"), file_entity("/x"), file_entity("/y")]
evidence_st = st.builds(
    Evidence,
    attribution=st.one_of(st.none(), st.sampled_from(list(Attribution))),
    causal=st.one_of(st.none(), st.booleans()),
    inferred=st.one_of(st.none(), st.booleans()),
    method=st.one_of(st.none(), st.sampled_from(["m", "n"])),
    score=st.one_of(st.none(), st.floats(0, 1)),
    support=st.lists(st.sampled_from(["s1", "s2"]), max_size=2).map(tuple),
)


@st.composite
def observation_lists(draw: st.DrawFn) -> list[Observation]:
    """Observations over a few entities, with replays (shared occurrences)."""
    out = []
    for i in range(draw(st.integers(0, 25))):
        relation = draw(st.one_of(st.none(), st.sampled_from(list(RelationKind)[:6])))
        out.append(
            obs(
                f"r{i}",
                subject=draw(st.sampled_from(ENTITIES)),
                relation=relation,
                obj=draw(st.sampled_from(ENTITIES)),
                evidence=draw(evidence_st),
                occurrence=draw(st.sampled_from(["o1", "o2", "", f"u{i}"])),
                time=draw(st.integers(0, 10**18)),
                channel=draw(st.sampled_from(list(Channel))),
                backend=draw(st.sampled_from(["linux", "otlp", "strace"])),
                attrs={"k": 1},
            )
        )
    return out


@settings(max_examples=80, deadline=None)
@given(observation_lists(), st.booleans())
def test_round_trip(observations: list[Observation], retain: bool) -> None:
    """to_dict -> JSON -> Graph -> to_dict gives the same document, and it is schema-valid."""
    acc = GraphAccumulator(retain_support=retain)
    acc.apply_many(observations)
    doc = _json(acc.to_dict())
    graph = Graph.from_dict(doc)
    assert graph.to_dict() == doc
    assert Graph.from_dict(graph.to_dict()) == graph
    assert acc.graph() == graph


@settings(max_examples=80, deadline=None)
@given(observation_lists(), st.randoms(use_true_random=False))
def test_input_order_does_not_change_graph_json(
    observations: list[Observation], rnd: random.Random
) -> None:
    """When observations agree on first-available values (entity labels/attrs per id and
    observation attrs per edge, as here), any permutation gives byte-identical graph.json."""
    shuffled = list(observations)
    rnd.shuffle(shuffled)
    a, b = GraphAccumulator(retain_support=True), GraphAccumulator(retain_support=True)
    a.apply_many(observations)
    b.apply_many(shuffled)
    assert encode(a.to_dict()) == encode(b.to_dict())


def test_disagreeing_attributes_are_the_only_order_dependence() -> None:
    """With disagreeing values only first-available attrs differ between two orders."""
    one = obs("a", obj=file_entity("/f", owner="alice"), attrs={"flags": "r"})
    two = obs("b", obj=file_entity("/f", owner="bob"), attrs={"flags": "w"})
    x, y = GraphAccumulator(), GraphAccumulator()
    x.apply_many([one, two])
    y.apply_many([two, one])
    dx, dy = _json(x.to_dict()), _json(y.to_dict())
    assert dx != dy
    for doc in (dx, dy):
        for element in doc["nodes"] + doc["edges"]:
            element.pop("attrs")
    assert dx == dy
