"""The model's records: frozen values, outside the cyclic GC, shared where decoded together."""

from __future__ import annotations

import gc
import pickle

import msgspec
import pytest
from hypothesis import given, settings
from test_otlp_codec_properties import spans

from otel_bridge.model import (
    Batch,
    Channel,
    Entity,
    EntityKind,
    Observation,
    RelationKind,
    Resource,
    Scope,
    Source,
    Span,
    Status,
    relation_problem,
)
from otel_bridge.otlp import proto_codec


@settings(max_examples=50, deadline=None)
@given(spans())
def test_span_records_are_frozen_values(item: Span) -> None:
    """A span equals, hashes like and pickles to a copy built field by field; it cannot change."""
    fields = {name: getattr(item, name) for name in Span.__struct_fields__}
    built = Span(**fields)
    assert type(built) is Span
    assert built == item
    assert repr(built) == repr(item)
    assert pickle.loads(pickle.dumps(built)) == item
    with pytest.raises(AttributeError, match="immutable"):
        built.name = "changed"  # type: ignore[misc]
    changed = msgspec.structs.replace(built, name="changed")
    assert changed.name == "changed"
    assert built == item


def test_records_stay_out_of_the_cyclic_gc() -> None:
    """Model records are not tracked by the cyclic GC (they form trees, never cycles)."""
    source = Source(channel=Channel.SEM, backend="otlp", record_id="r")
    agent = Entity(kind=EntityKind.AGENT, id="agent:a")
    observation = Observation(id="o", time_unix_nano=1, source=source, subject=agent)
    records = (source, agent, observation, Resource(), Scope(), Status(), Batch())
    assert not any(gc.is_tracked(r) for r in records)


def test_relation_problem_names_half_a_relation() -> None:
    """An observation has both a relation and an object, or neither: ``relation_problem`` says
    when it does not (the decoders of what arrives from outside refuse it; producers build
    whole ones, and construction itself does not check, see ``Observation``)."""
    source = Source(channel=Channel.SEM, backend="otlp", record_id="r")
    agent = Entity(kind=EntityKind.AGENT, id="agent:a")
    whole = (
        Observation(id="o", time_unix_nano=1, source=source, subject=agent),
        Observation(
            id="o",
            time_unix_nano=1,
            source=source,
            subject=agent,
            relation=RelationKind.INVOKED,
            object=agent,
        ),
    )
    half = (
        Observation(
            id="o", time_unix_nano=1, source=source, subject=agent, relation=RelationKind.INVOKED
        ),
        Observation(id="o", time_unix_nano=1, source=source, subject=agent, object=agent),
    )
    assert [relation_problem(o) for o in whole] == ["", ""]
    assert [relation_problem(o) for o in half] == [
        "an observation has both a relation and an object, or neither"
    ] * 2


def test_decoded_spans_share_resource_and_scope_objects() -> None:
    """Every span decoded from one ResourceSpans/ScopeSpans shares one Resource and Scope."""
    resource = Resource(attributes={"service.name": "svc", "process.pid": 7})
    scope = Scope(name="agents", version="1")
    items = [
        Span(
            resource=resource,
            scope=scope,
            trace_id=bytes([1]) * 16,
            span_id=bytes([i + 1]) * 8,
            name=f"span {i}",
            attributes={"n": i, "s": "x"},
        )
        for i in range(3)
    ]
    decoded = proto_codec.decode_traces(proto_codec.encode_traces(items)).records
    assert decoded == tuple(items)
    assert all(d.resource is decoded[0].resource for d in decoded)
    assert all(d.scope is decoded[0].scope for d in decoded)
