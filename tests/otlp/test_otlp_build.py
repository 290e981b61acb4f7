"""The slot-filling span builder of the decode hot path equals the dataclass constructor."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from test_otlp_codec_properties import spans

from otel_bridge.model import Resource, Scope, Span, Status
from otel_bridge.otlp import proto_codec
from otel_bridge.otlp._build import slot_setters
from otel_bridge.otlp._build import span as build_span


@settings(max_examples=50, deadline=None)
@given(spans())
def test_span_builder_equals_constructor(item: Span) -> None:
    """build_span with every field of a span gives an equal Span, field by field."""
    fields = {f.name: getattr(item, f.name) for f in dataclasses.fields(Span)}
    built = build_span(**fields)
    assert type(built) is Span
    assert built == item
    assert repr(built) == repr(item)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.name = "changed"  # type: ignore[misc]


def test_slot_setters_name_every_field() -> None:
    """slot_setters refuses a field list that misses or invents a field."""
    with pytest.raises(RuntimeError, match="update the builder"):
        slot_setters(Status, ("code",))
    with pytest.raises(RuntimeError, match="update the builder"):
        slot_setters(Status, ("code", "message", "extra"))
    (code, message) = slot_setters(Status, ("code", "message"))
    assert callable(code)
    assert callable(message)


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
