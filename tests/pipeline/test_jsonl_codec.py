"""Lossless JSON encoding of observations and coverage records (``otel_bridge.jsonl``)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_bridge import jsonl
from otel_bridge.errors import DecodeError
from otel_bridge.model import (
    AnyValue,
    Attribution,
    Channel,
    CoverageRecord,
    EmitterFacts,
    Entity,
    EntityKind,
    Evidence,
    Grade,
    Observation,
    RelationKind,
    Source,
)

KEYS = st.text(min_size=1, max_size=8)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=10),
    st.binary(max_size=10),
    st.sampled_from(["$bytes", "$map", "$float"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(
            st.one_of(KEYS, st.sampled_from(["$bytes", "$map", "$float"])), inner, max_size=3
        ),
    ),
    max_leaves=8,
)
ATTRS = st.dictionaries(KEYS, VALUES, max_size=4)
SOURCES = st.builds(
    Source,
    channel=st.sampled_from(list(Channel)),
    backend=st.text(max_size=6),
    record_id=st.text(max_size=6),
    emitter=st.none()
    | st.builds(
        EmitterFacts,
        host_id=st.none() | st.text(max_size=4),
        pid=st.none() | st.integers(0, 2**22),
        start_time_ms=st.none() | st.integers(0, 2**45),
    ),
    trace_id=st.text(max_size=4),
    span_id=st.text(max_size=4),
    event=st.text(max_size=4),
)
ENTITIES = st.builds(
    Entity,
    kind=st.sampled_from(list(EntityKind)),
    id=st.text(max_size=10),
    label=st.text(max_size=5),
    attrs=ATTRS,
)
EVIDENCE = st.builds(
    Evidence,
    attribution=st.none() | st.sampled_from(list(Attribution)),
    causal=st.none() | st.booleans(),
    inferred=st.none() | st.booleans(),
    identity_exact=st.none() | st.booleans(),
    method=st.none() | st.text(max_size=5),
    score=st.none() | st.floats(allow_nan=False) | st.integers(-5, 5),
    support=st.lists(st.text(max_size=4), max_size=3).map(tuple),
    grade=st.none() | st.sampled_from(list(Grade)),
)


@st.composite
def observations(draw: st.DrawFn) -> Observation:
    """Any observation, entity-only or relation."""
    relation = draw(st.none() | st.sampled_from(list(RelationKind)))
    return Observation(
        id=draw(st.text(max_size=8)),
        time_unix_nano=draw(st.integers(0, 2**64 - 1)),
        end_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
        source=draw(SOURCES),
        subject=draw(ENTITIES),
        relation=relation,
        object=None if relation is None else draw(ENTITIES),
        evidence=draw(EVIDENCE),
        occurrence=draw(st.text(max_size=6)),
        attrs=draw(ATTRS),
    )


def through_json(data: dict[str, Any]) -> Any:
    """Serialize strictly and parse again, as a file would."""
    return json.loads(jsonl.dumps(data))


@given(observations())
def test_observation_round_trips(obs: Observation) -> None:
    """Any observation survives encoding to JSON text and back unchanged."""
    assert jsonl.observation_from_dict(through_json(jsonl.observation_to_dict(obs))) == obs


@given(SOURCES, st.text(max_size=10), st.integers(0, 2**64), st.text(max_size=10))
def test_coverage_round_trips(source: Source, reason: str, t: int, detail: str) -> None:
    """Any coverage record survives encoding to JSON text and back unchanged."""
    rec = CoverageRecord(source=source, reason=reason, time_unix_nano=t, detail=detail)
    assert jsonl.coverage_from_dict(through_json(jsonl.coverage_to_dict(rec))) == rec


@given(VALUES)
def test_value_round_trips(value: AnyValue) -> None:
    """Attribute values keep type: bytes, tuples, int vs float, marker-like mappings."""
    back = jsonl.value_from_json(json.loads(jsonl.dumps({"v": jsonl.value_to_json(value)}))["v"])
    assert back == value
    assert type(back) is type(value) or isinstance(value, dict)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats(value: float) -> None:
    """NaN and infinities are encoded as markers and decode to the same float."""
    back = jsonl.value_from_json(json.loads(jsonl.dumps({"v": jsonl.value_to_json(value)}))["v"])
    assert isinstance(back, float)
    assert (math.isnan(back) and math.isnan(value)) or back == value


def test_absent_and_false_causal_stay_distinct() -> None:
    """An unstated causal flag and an explicit false are written differently."""
    unstated = jsonl.evidence_to_dict(Evidence())
    false = jsonl.evidence_to_dict(Evidence(causal=False))
    assert unstated["causal"] is None
    assert false["causal"] is False
    assert jsonl.evidence_from_dict(unstated).causal is None
    assert jsonl.evidence_from_dict(false).causal is False


def test_readable_shape() -> None:
    """The dict shape is plain and readable: enums as strings, ids and times as given."""
    obs = Observation(
        id="r#1",
        time_unix_nano=5,
        source=Source(channel=Channel.OS, backend="linux", record_id="linux:1"),
        subject=Entity(kind=EntityKind.PROCESS, id="process:h:1:2", attrs={"process.pid": 1}),
        relation=RelationKind.OPENED,
        object=Entity(kind=EntityKind.FILE, id="file:/tmp/a"),
        evidence=Evidence(attribution=Attribution.SYSCALL, causal=True),
        attrs={"raw": b"\x00"},
    )
    d = jsonl.observation_to_dict(obs)
    assert d["source"] == {"channel": "os", "backend": "linux", "record_id": "linux:1"}
    assert d["relation"] == "opened"
    assert d["subject"]["attrs"] == {"process.pid": 1}
    assert d["evidence"]["attribution"] == "syscall"
    assert d["attrs"] == {"raw": {"$bytes": "AA=="}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "observation: expected an object"),
        ({"time_unix_nano": 1}, r"observation\.id: missing"),
        (
            {
                "id": "x",
                "time_unix_nano": "soon",
                "source": {"channel": "os", "backend": "b", "record_id": "r"},
                "subject": {"kind": "file", "id": "f"},
            },
            r"observation\.time_unix_nano: not an integer",
        ),
        (
            {
                "id": "x",
                "time_unix_nano": 1,
                "source": {"channel": "tv", "backend": "b", "record_id": "r"},
                "subject": {"kind": "file", "id": "f"},
            },
            r"observation\.source\.channel: unknown value 'tv'",
        ),
        (
            {
                "id": "x",
                "time_unix_nano": 1,
                "source": {"channel": "os", "backend": "b", "record_id": "r"},
                "subject": {"kind": "file", "id": "f"},
                "relation": "opened",
            },
            "observation: an observation has both a relation and an object",
        ),
    ],
)
def test_decode_errors_name_the_field(data: Any, message: str) -> None:
    """Malformed input raises DecodeError naming the field."""
    with pytest.raises(DecodeError, match=message):
        jsonl.observation_from_dict(data)


def test_bad_markers() -> None:
    """Broken $bytes/$float markers are decode errors."""
    with pytest.raises(DecodeError, match="invalid base64"):
        jsonl.value_from_json({"$bytes": "!!"})
    with pytest.raises(DecodeError, match=r"\$float must be"):
        jsonl.value_from_json({"$float": "big"})


def test_entity_facts_and_key_round_trip() -> None:
    """The correlated stream keeps every entity's typed facts and stable key (lossless)."""
    from otel_bridge.jsonl import entity_from_dict, entity_to_dict
    from otel_bridge.model import Entity, EntityKind, FileFacts, ProcessFacts

    entities = [
        Entity(
            kind=EntityKind.PROCESS,
            id="process:h:1:2",
            facts=ProcessFacts(host_id="h", pid=1, start_time_ms=2, argv=("cp", "a", "b")),
            key="process:/usr/bin/cp:cp a b",
        ),
        Entity(kind=EntityKind.FILE, id="file:/x", facts=FileFacts(path="/x"), key="file:/x"),
        Entity(kind=EntityKind.SPAN, id="span:t:s"),
    ]
    for entity in entities:
        assert entity_from_dict(json.loads(json.dumps(entity_to_dict(entity)))) == entity
