"""OTLP/JSON decoding edge cases: int64 strings, base64 bytes, nested values, ids and enums."""

from __future__ import annotations

import base64
import json
import math
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.errors import DecodeError
from otel_bridge.model import AnyValue
from otel_bridge.otlp import json_codec

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"


def body_with(value: Any = None, **span_fields: Any) -> dict[str, Any]:
    """A trace request whose single span carries attribute ``a`` = ``value`` and ``span_fields``."""
    span: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": SPAN,
        "name": "op",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
    }
    if value is not None:
        span["attributes"] = [{"key": "a", "value": value}]
    span.update(span_fields)
    return {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}


def rejection(document: dict[str, Any]) -> str:
    """Why the single span of ``document`` was rejected (it must be, alone, not the request)."""
    decoded = json_codec.decode_traces(document)
    assert (decoded.records, decoded.rejected) == ((), 1), decoded
    return decoded.error_message


def decode_attr(value: dict[str, Any]) -> AnyValue:
    """The decoded value of attribute ``a``."""
    decoded = json_codec.decode_traces(body_with(value))
    assert decoded.rejected == 0, decoded
    return decoded.records[0].attributes["a"]


INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=100, deadline=None)
@given(n=INT64)
def test_int64_as_string_decodes_exactly(n: int) -> None:
    """Every int64 given as a decimal string decodes without float rounding."""
    assert decode_attr({"intValue": str(n)}) == n


@settings(max_examples=100, deadline=None)
@given(n=INT64)
def test_int64_encoder_writes_strings_that_decode_back(n: int) -> None:
    """The encoder writes intValue as a string and the decoder reads it back to the same int."""
    encoded = json_codec.any_value_to_json(n)
    assert encoded == {"intValue": str(n)}
    assert decode_attr(encoded) == n


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (str(2**63), str(2**63)),
        (str(-(2**63) - 1), str(-(2**63) - 1)),
        (18446744073709552000, "18446744073709552000"),  # the JS SDK's 2**64, a JSON number
        (1e21, str(10**21)),  # the JS SDK's 1e21, written 1e+21
        (-1e23, "-99999999999999991611392"),  # the exact value of the double
        ("1e+21", str(10**21)),
    ],
)
def test_int_value_outside_int64_is_kept_as_its_decimal_text(raw: Any, expected: str) -> None:
    """An intValue outside int64 (the OpenTelemetry JS SDK's OTLP/JSON exporter writes every
    integral number as one, however large) is kept as its decimal text, as the OpenTelemetry
    attribute mapping converts such an integer, and is written back as a ``stringValue``. It
    was a DecodeError, which refused the request with every span in it."""
    assert decode_attr({"intValue": raw}) == expected
    assert json_codec.any_value_to_json(expected) == {"stringValue": expected}


def test_a_wide_int_value_refuses_nothing_else_in_the_request() -> None:
    """The JS SDK's JSON for ``{"x.big": 2**64, "x.nan": NaN}`` next to an ordinary attribute:
    the span and every attribute are kept (``NaN`` arrives as ``null``: no value)."""
    attributes = (
        '[{"key":"x.big","value":{"intValue":18446744073709552000}},'
        '{"key":"x.e21","value":{"intValue":1e+21}},'
        '{"key":"x.nan","value":{"doubleValue":null}},'
        '{"key":"x.n","value":{"intValue":-5}}]'
    )
    named = '"name": "op"'
    text = json.dumps(body_with()).replace(named, f'{named}, "attributes": {attributes}')
    decoded = json_codec.decode_traces(text.encode())
    assert decoded.rejected == 0
    (span,) = decoded.records
    assert dict(span.attributes) == {
        "x.big": "18446744073709552000",
        "x.e21": str(10**21),
        "x.nan": None,
        "x.n": -5,
    }


@pytest.mark.parametrize(
    ("field", "value"), [("startTimeUnixNano", str(2**64)), ("droppedAttributesCount", 2**32)]
)
def test_other_integers_out_of_range_name_the_path(field: str, value: Any) -> None:
    """Integer fields other than an attribute's value keep their range: the span is rejected
    alone, naming the path."""
    assert re.search(
        rf"spans\[0\]\.{field}: .*out of range", rejection(body_with(**{field: value}))
    )


@pytest.mark.parametrize(
    ("raw", "expected"), [(7, 7), ("  12 ", 12), (3.0, 3), ("1e3", 1000), (None, None)]
)
def test_int_value_number_forms(raw: Any, expected: int | None) -> None:
    """intValue accepts JSON numbers, padded strings and integral exponent forms."""
    assert decode_attr({"intValue": raw}) == expected


@pytest.mark.parametrize("raw", [1.5, "1.5", "ten", True, [], {}])
def test_int_value_rejects_non_integers(raw: Any) -> None:
    """A fractional, textual, boolean or structured intValue is rejected with its path."""
    assert re.search(r"intValue", rejection(body_with({"intValue": raw})))


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=64))
def test_bytes_value_accepts_standard_urlsafe_and_unpadded_base64(data: bytes) -> None:
    """bytesValue decodes standard, URL-safe and unpadded base64 to the same bytes."""
    standard = base64.b64encode(data).decode()
    urlsafe = base64.urlsafe_b64encode(data).decode().rstrip("=")
    assert decode_attr({"bytesValue": standard}) == data
    assert decode_attr({"bytesValue": urlsafe}) == data


def test_bytes_value_encodes_as_standard_base64() -> None:
    """The encoder writes bytesValue in standard padded base64, as protobuf JSON does."""
    assert json_codec.any_value_to_json(b"\xfb\xff") == {"bytesValue": "+/8="}


@pytest.mark.parametrize("raw", ["not base64!", "a", 5])
def test_bytes_value_rejects_invalid_base64(raw: Any) -> None:
    """Data that is not base64 rejects its span at bytesValue."""
    assert re.search(r"bytesValue", rejection(body_with({"bytesValue": raw})))


def test_nested_kvlist_and_array_decode_recursively() -> None:
    """kvlistValue inside arrayValue inside kvlistValue decodes to dicts and tuples."""
    value = {
        "kvlistValue": {
            "values": [
                {
                    "key": "list",
                    "value": {
                        "arrayValue": {
                            "values": [
                                {"stringValue": "x"},
                                {"kvlistValue": {"values": [{"key": "n", "value": {}}]}},
                                {"arrayValue": {}},
                                {"doubleValue": "-Infinity"},
                            ]
                        }
                    },
                }
            ]
        }
    }
    decoded = decode_attr(value)
    assert isinstance(decoded, dict)
    items = decoded["list"]
    assert isinstance(items, tuple)
    assert items[:3] == ("x", {"n": None}, ())
    assert isinstance(items[3], float)
    assert math.isinf(items[3])
    assert items[3] < 0


def test_snake_case_nested_values_are_accepted() -> None:
    """Proto field names (array_value, kvlist_value, int_value) decode like camelCase ones."""
    value = {
        "kvlist_value": {
            "values": [{"key": "k", "value": {"array_value": {"values": [{"int_value": "5"}]}}}]
        }
    }
    assert decode_attr(value) == {"k": (5,)}


def test_nested_error_path_points_at_the_innermost_value() -> None:
    """A bad value deep in a kvlist is reported with its full nested path."""
    value = {
        "kvlistValue": {
            "values": [{"key": "k", "value": {"arrayValue": {"values": [{"boolValue": "yes"}]}}}]
        }
    }
    assert "kvlistValue.values[0].value.arrayValue.values[0].boolValue" in rejection(
        body_with(value)
    )


@pytest.mark.parametrize(
    ("trace_id", "message"),
    [
        ("0af7651916cd43dd8448eb211c80319", "expected 32 hex characters, got 31"),
        ("0af7651916cd43dd8448eb211c80319g", "invalid hex character 'g'"),
        (12, "expected a hex string"),
    ],
)
def test_bad_trace_ids_are_named(trace_id: Any, message: str) -> None:
    """A malformed traceId rejects its span, saying what is wrong."""
    assert re.search(message, rejection(body_with(traceId=trace_id)))


def test_uppercase_hex_ids_decode() -> None:
    """Hex ids are case-insensitive."""
    decoded = json_codec.decode_traces(body_with(traceId=TRACE.upper(), spanId=SPAN.upper()))
    assert decoded.records[0].trace_id.hex() == TRACE
    assert decoded.records[0].span_id.hex() == SPAN


def test_enum_names_are_rejected() -> None:
    """OTLP/JSON enums are integers only: a kind given by name rejects the span at kind."""
    assert re.search(
        r"kind: expected an integer enum value", rejection(body_with(kind="SPAN_KIND_SERVER"))
    )


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "2.5", 2, None])
def test_double_value_special_strings_and_numbers(raw: Any) -> None:
    """doubleValue takes numbers, numeric strings and the three special names."""
    decoded = decode_attr({"doubleValue": raw})
    if raw is None:
        assert decoded is None
    elif raw == "NaN":
        assert isinstance(decoded, float)
        assert math.isnan(decoded)
    else:
        assert decoded == float(raw)


@pytest.mark.parametrize("raw", ["nan", "inf", True, "x"])
def test_double_value_rejects_other_forms(raw: Any) -> None:
    """Lower-case nan/inf, booleans and words are not doubles."""
    assert re.search(r"doubleValue", rejection(body_with({"doubleValue": raw})))


def test_double_value_integer_past_the_double_range_rejects_that_span_alone() -> None:
    """An integer literal too large for a double (``1`` and 400 zeros) was an ``OverflowError``
    out of the decoder (HTTP 500, which an exporter retries, the whole batch with it); it
    rejects its span alone, named by path, and the next span of the request is kept."""
    document = body_with({"doubleValue": 0})
    good = dict(
        document["resourceSpans"][0]["scopeSpans"][0]["spans"][0], spanId="b7ad6b7169203332"
    )
    document["resourceSpans"][0]["scopeSpans"][0]["spans"].append(good)
    big = "1" + "0" * 400
    text = json.dumps(document).replace('{"doubleValue": 0}', '{"doubleValue": ' + big + "}", 1)
    decoded = json_codec.decode_traces(text.encode())
    assert decoded.rejected == 1
    assert [s.span_id.hex() for s in decoded.records] == ["b7ad6b7169203332"]
    assert "spans[0].attributes[0].value.doubleValue" in decoded.error_message
    assert "out of range for a double" in decoded.error_message


def test_timestamps_beyond_uint64_are_rejected() -> None:
    """A start time past the uint64 range rejects the span at startTimeUnixNano."""
    assert re.search(r"startTimeUnixNano", rejection(body_with(startTimeUnixNano=str(2**64))))


def test_null_sections_read_as_empty() -> None:
    """JSON null for lists, objects and list entries reads as the proto3 default, not an error."""
    body = {"resourceSpans": [{"resource": None, "scopeSpans": None}, None]}
    assert json_codec.decode_traces(body).records == ()
    assert json_codec.decode_traces({"resourceSpans": None}).records == ()
    decoded = json_codec.decode_traces(body_with(None, attributes=None, events=None, links=None))
    assert decoded.rejected == 0
    assert decoded.records[0].attributes == {}
    assert decoded.records[0].events == ()


def test_wrong_container_types_name_the_path() -> None:
    """A list where an object belongs (and vice versa) is an error at that exact path."""
    with pytest.raises(DecodeError, match=r"resourceSpans\[0\]\.scopeSpans: expected an array"):
        json_codec.decode_traces({"resourceSpans": [{"scopeSpans": {}}]})
    with pytest.raises(DecodeError, match=r"resourceSpans: expected an array, got an object"):
        json_codec.decode_traces({"resourceSpans": {}})
