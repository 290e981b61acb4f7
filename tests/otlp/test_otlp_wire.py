"""The twin messages of ``otel_bridge.otlp.wire`` read attributes as the generated classes do.

Attributes arrive as serialized ``KeyValue`` bytes and the usual ones are read straight from
those bytes; these tests hold that shortcut to the generated ``KeyValue`` class over arbitrary
keys and values, hand-made byte layouts the shortcut must refuse, and bad UTF-8.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue as PbAnyValue
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from otel_bridge.model import UNSET_STATUS
from otel_bridge.otlp import proto_codec
from otel_bridge.otlp import wire as twins

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
# Keys and strings on both sides of the one-byte length limit (127), some not ASCII.
TEXT = st.one_of(st.text(max_size=12), st.text(min_size=120, max_size=140))
SCALAR = st.one_of(
    st.none(), TEXT, st.booleans(), INT64, st.floats(allow_nan=False), st.binary(max_size=8)
)
VALUES = st.recursive(
    SCALAR,
    lambda children: st.one_of(
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=5), children, max_size=3),
    ),
    max_leaves=6,
)


def serialized(key: str, value: object) -> bytes:
    kv = KeyValue(key=key)
    proto_codec.any_value_to_pb(value, kv.value)  # type: ignore[arg-type]
    return kv.SerializeToString()


def generated(raw: bytes) -> dict[str, object]:
    """What the generated classes make of serialized ``KeyValue``s."""
    return dict(twins.attributes_from_pb([KeyValue.FromString(raw)]))


@settings(max_examples=400, deadline=None)
@given(key=TEXT, value=VALUES)
def test_the_shortcut_reads_every_attribute_as_the_generated_class(key: str, value: object) -> None:
    raw = serialized(key, value)
    first = twins.attributes_from_wire([raw])
    again = twins.attributes_from_wire([raw])  # now possibly from the table of known values
    assert first == again == generated(raw)
    assert [type(v) for v in first.values()] == [type(v) for v in generated(raw).values()]


@pytest.mark.parametrize(
    "raw",
    [
        # value before key (legal field order), then key only, then value only
        b"\x12\x04\x0a\x02hi\x0a\x01k",
        b"\x0a\x01k",
        b"\x12\x04\x0a\x02hi",
        # a string value followed by an int: the oneof keeps the last one
        b"\x0a\x01k\x12\x06\x0a\x02hi\x18\x07",
        # an int followed by a string
        b"\x0a\x01k\x12\x06\x18\x07\x0a\x02hi",
        # an unknown field inside the AnyValue, and one after the value
        b"\x0a\x01k\x12\x06\x0a\x02hi\x50\x01",
        b"\x0a\x01k\x12\x04\x0a\x02hi\x50\x01",
        # a two-byte varint length for a short string (non-minimal, but valid)
        b"\x0a\x01k\x12\x05\x0a\x82\x00hi",
        # ints: one byte, several bytes, the most negative, a non-minimal varint
        b"\x0a\x01k\x12\x02\x18\x05",
        b"\x0a\x01k\x12\x03\x18\xac\x02",
        b"\x0a\x01k\x12\x0b\x18" + b"\x80" * 9 + b"\x01",
        b"\x0a\x01k\x12\x03\x18\x85\x00",
        # an empty string, an empty AnyValue
        b"\x0a\x01k\x12\x02\x0a\x00",
        b"\x0a\x01k\x12\x00",
    ],
)
def test_unusual_layouts_decode_as_the_generated_class_does(raw: bytes) -> None:
    assert twins.attributes_from_wire([raw]) == generated(raw)


def test_a_repeated_key_keeps_its_last_value() -> None:
    raws = [serialized("k", "first"), serialized("other", 1), serialized("k", "last")]
    assert twins.attributes_from_wire(raws) == {"k": "last", "other": 1}


@pytest.mark.parametrize(
    "raw", [b"\x0a\x01\xff\x12\x03\x0a\x01a", b"\x0a\x01k\x12\x03\x0a\x01\xff"]
)
def test_invalid_utf8_is_a_decode_error_as_in_the_generated_classes(raw: bytes) -> None:
    with pytest.raises(DecodeError, match="UTF-8"):
        twins.attributes_from_wire([raw])


def test_mutable_values_are_never_shared_between_spans() -> None:
    raw = serialized("list", {"a": 1})
    first = twins.attributes_from_wire([raw])["list"]
    second = twins.attributes_from_wire([raw])["list"]
    assert first == second == {"a": 1}
    assert first is not second


def test_a_request_with_bad_utf8_in_an_attribute_is_rejected_whole() -> None:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = b"\x01" * 16, b"\x02" * 8
    span.attributes.add(key="k", value=PbAnyValue(bytes_value=b"\xff"))
    wire = bytearray(request.SerializeToString())
    # Turn the bytes_value (field 7) into a string_value (field 1) holding invalid UTF-8.
    wire[wire.index(b"\x3a\x01\xff")] = 0x0A
    with pytest.raises(DecodeError):
        ExportTraceServiceRequest.FromString(bytes(wire))  # the generated class refuses it
    with pytest.raises(DecodeError):
        proto_codec.decode_traces(bytes(wire))


def test_a_malformed_attribute_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        twins.attributes_from_wire([b"\x0a\x01k\x12\x04\x18\xac\x02"])  # value cut short


RARE_SETTERS: dict[str, Callable[[PbSpan], object]] = {
    "trace_state": lambda s: setattr(s, "trace_state", "k=v"),
    "dropped_attributes_count": lambda s: setattr(s, "dropped_attributes_count", 1),
    "events": lambda s: (s.events.add(name="a"), s.events.add(name="b")),
    "dropped_events_count": lambda s: setattr(s, "dropped_events_count", 2),
    "links": lambda s: (
        s.links.add(trace_id=b"\x03" * 16, span_id=b"\x04" * 8),
        s.links.add(trace_id=b"\x05" * 16, span_id=b"\x06" * 8),
    ),
    "dropped_links_count": lambda s: setattr(s, "dropped_links_count", 3),
}


@pytest.mark.parametrize("field", sorted(RARE_SETTERS))
def test_each_rare_span_field_is_detected_and_read_in_full(field: str) -> None:
    request = ExportTraceServiceRequest()
    scope_spans = request.resource_spans.add().scope_spans.add()
    for n in range(3):
        span = scope_spans.spans.add(trace_id=b"\x01" * 16, span_id=bytes([n + 1]) * 8)
        span.attributes.add(key="n", value=PbAnyValue(int_value=n))
    RARE_SETTERS[field](scope_spans.spans[1])
    wire = request.SerializeToString()
    scanned = twins.ScanTraceRequest.FromString(wire).resource_spans[0].scope_spans[0].spans
    assert [s.WhichOneof("rare") for s in scanned] == [None, field, None]
    plain, special, last = proto_codec.decode_traces(wire).records
    expected = ExportTraceServiceRequest.FromString(wire).resource_spans[0].scope_spans[0]
    assert len(special.events) == len(expected.spans[1].events)
    assert len(special.links) == len(expected.spans[1].links)
    assert special.trace_state == expected.spans[1].trace_state
    assert special.dropped_links_count == expected.spans[1].dropped_links_count
    assert special.dropped_events_count == expected.spans[1].dropped_events_count
    assert special.dropped_attributes_count == expected.spans[1].dropped_attributes_count
    assert (plain.attributes, special.attributes, last.attributes) == ({"n": 0}, {"n": 1}, {"n": 2})
    assert plain.events == ()
    assert plain.links == ()
    assert last.trace_state == ""


def _three_spans(middle: Callable[[PbSpan], object]) -> bytes:
    request = ExportTraceServiceRequest()
    scope_spans = request.resource_spans.add().scope_spans.add()
    for n in range(3):
        scope_spans.spans.add(trace_id=b"\x01" * 16, span_id=bytes([n + 1]) * 8)
    middle(scope_spans.spans[1])
    return request.SerializeToString()


@pytest.mark.parametrize(
    ("code", "message"), [(1, ""), (2, "boom"), (2, "é" * 150), (0, "why unset")]
)
def test_a_status_is_read_without_the_full_twin(code: int, message: str) -> None:
    def set_status(span: PbSpan) -> None:
        span.status.code = code  # type: ignore[assignment]
        span.status.message = message

    wire = _three_spans(set_status)
    scanned = twins.ScanTraceRequest.FromString(wire).resource_spans[0].scope_spans[0].spans
    assert [s.WhichOneof("rare") for s in scanned] == [None, None, None]
    for _ in range(2):  # the second time from the table of known statuses (when short)
        plain, special, last = proto_codec.decode_traces(wire).records
        assert (int(special.status.code), special.status.message) == (code, message)
        assert plain.status is last.status is UNSET_STATUS


def test_an_empty_status_is_the_unset_status() -> None:
    (_, special, _) = proto_codec.decode_traces(
        _three_spans(lambda s: s.status.SetInParent())
    ).records
    assert special.status == UNSET_STATUS


def test_an_unknown_status_code_rejects_that_span_only() -> None:
    def set_status(span: PbSpan) -> None:
        span.status.code = 7  # type: ignore[assignment]

    decoded = proto_codec.decode_traces(_three_spans(set_status))
    assert len(decoded.records) == 2
    assert decoded.rejected == 1
    assert "spans[1].status.code: unknown status code 7" in decoded.error_message
