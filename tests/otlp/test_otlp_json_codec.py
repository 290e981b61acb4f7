"""Tests of the hand-written OTLP/JSON codec (hex ids, int64 strings, integer enums)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from otlp_fixtures import RESOURCE, SCOPE, make_span

from otel_bridge.errors import DecodeError
from otel_bridge.model import LogRecord, SpanEvent, SpanKind, SpanLink, StatusCode
from otel_bridge.otlp import json_codec

TRACE_HEX = "5B8EFFF798038103D269B633813FC60C"
SPAN_HEX = "EEE19B7EC3C1B174"


def body(span: dict[str, Any], **resource_spans: Any) -> dict[str, Any]:
    """A request with one resource, one scope and ``span``."""
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "a"}}]
                },
                "scopeSpans": [{"scope": {"name": "lib"}, "spans": [span]}],
                **resource_spans,
            }
        ]
    }


def minimal(**fields: Any) -> dict[str, Any]:
    """A minimal valid span object, with ``fields`` overriding."""
    return {"traceId": TRACE_HEX, "spanId": SPAN_HEX, "name": "op", **fields}


def decode_error(document: Any) -> str:
    """The message of the DecodeError decoding ``document`` raises."""
    with pytest.raises(DecodeError) as info:
        json_codec.decode_traces(json.dumps(document).encode())
    return str(info.value)


def rejection(span: dict[str, Any]) -> str:
    """The partial-success message of a request with ``span`` then a valid span: the valid one
    must be kept and ``span`` rejected alone."""
    document = body(span)
    document["resourceSpans"][0]["scopeSpans"][0]["spans"].append(minimal(name="kept"))
    decoded = json_codec.decode_traces(json.dumps(document).encode())
    assert [s.name for s in decoded.records] == ["kept"]
    assert decoded.rejected == 1
    return decoded.error_message


def test_hand_written_body_decodes_hex_ids_int64_strings_and_nested_values() -> None:
    """A spec-shaped body decodes with hex ids, string int64s and nested AnyValues."""
    span = minimal(
        parentSpanId="0102030405060708",
        kind=2,
        startTimeUnixNano="1544712660000000000",
        endTimeUnixNano=1544712661000000000,
        attributes=[
            {"key": "i", "value": {"intValue": "-9223372036854775808"}},
            {"key": "n", "value": {"intValue": 7}},
            {"key": "d", "value": {"doubleValue": "Infinity"}},
            {"key": "b", "value": {"boolValue": True}},
            {"key": "raw", "value": {"bytesValue": "AP8="}},
            {"key": "empty", "value": {}},
            {
                "key": "nested",
                "value": {
                    "kvlistValue": {
                        "values": [
                            {
                                "key": "list",
                                "value": {
                                    "arrayValue": {
                                        "values": [{"stringValue": "x"}, {"intValue": "1"}]
                                    }
                                },
                            }
                        ]
                    }
                },
            },
        ],
        events=[{"timeUnixNano": "5", "name": "ev", "attributes": []}],
        links=[{"traceId": TRACE_HEX.lower(), "spanId": SPAN_HEX, "flags": 1}],
        status={"code": 2, "message": "bad"},
    )
    decoded = json_codec.decode_traces(json.dumps(body(span)))
    (s,) = decoded.records
    assert s.trace_id == bytes.fromhex(TRACE_HEX)
    assert s.span_id == bytes.fromhex(SPAN_HEX)
    assert s.parent_span_id == bytes.fromhex("0102030405060708")
    assert s.kind is SpanKind.SERVER
    assert s.start_time_unix_nano == 1544712660000000000
    assert s.end_time_unix_nano == 1544712661000000000
    assert s.attributes == {
        "i": -(2**63),
        "n": 7,
        "d": math.inf,
        "b": True,
        "raw": b"\x00\xff",
        "empty": None,
        "nested": {"list": ("x", 1)},
    }
    assert s.events == (SpanEvent(time_unix_nano=5, name="ev"),)
    assert s.links == (
        SpanLink(trace_id=bytes.fromhex(TRACE_HEX), span_id=bytes.fromhex(SPAN_HEX), flags=1),
    )
    assert s.status.code is StatusCode.ERROR
    assert s.resource.attributes == {"service.name": "a"}
    assert s.scope.name == "lib"


def test_snake_case_keys_are_accepted_like_the_collector() -> None:
    """Proto field names (trace_id, resource_spans, ...) decode like lowerCamelCase keys."""
    document = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": TRACE_HEX,
                                "span_id": SPAN_HEX,
                                "start_time_unix_nano": "3",
                                "attributes": [{"key": "a", "value": {"string_value": "b"}}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    (s,) = json_codec.decode_traces(document).records
    assert s.start_time_unix_nano == 3
    assert s.attributes == {"a": "b"}


def test_unknown_fields_are_ignored() -> None:
    """Unknown keys are ignored, as the specification requires of receivers."""
    decoded = json_codec.decode_traces(body(minimal(futureField={"x": 1}), futureTop=3))
    assert len(decoded.records) == 1


@pytest.mark.parametrize(
    ("span", "expected"),
    [
        (
            minimal(traceId=TRACE_HEX[:-1]),
            "resourceSpans[0].scopeSpans[0].spans[0].traceId: expected 32 hex characters, got 31",
        ),
        (
            minimal(spanId="zz" * 8),
            "resourceSpans[0].scopeSpans[0].spans[0].spanId: invalid hex character 'z'",
        ),
        (
            minimal(traceId="W47/95gDgQPSabYzgT/GDA=="),
            "resourceSpans[0].scopeSpans[0].spans[0].traceId: expected 32 hex characters, got 24",
        ),
        (minimal(traceId=None), "spans[0].traceId: expected 32 hex characters, got 0"),
        (minimal(traceId=5), "spans[0].traceId: expected a hex string, got a number"),
        (minimal(kind="SPAN_KIND_SERVER"), "spans[0].kind: expected an integer enum value"),
        (minimal(startTimeUnixNano="soon"), "spans[0].startTimeUnixNano: expected an unsigned"),
        (minimal(startTimeUnixNano="-1"), "spans[0].startTimeUnixNano: -1 is out of range"),
        (minimal(name=["x"]), "spans[0].name: expected a string, got an array"),
        (minimal(attributes={"a": 1}), "spans[0].attributes: expected an array, got an object"),
        (
            minimal(attributes=[{"key": "a", "value": {"intValue": "1.5"}}]),
            "spans[0].attributes[0].value.intValue: expected a 64-bit integer, got '1.5'",
        ),
        (
            minimal(attributes=[{"key": "a", "value": {"boolValue": "true"}}]),
            "spans[0].attributes[0].value.boolValue: expected a boolean, got a string",
        ),
        (
            minimal(attributes=[{"key": "a", "value": {"bytesValue": "!!"}}]),
            "spans[0].attributes[0].value.bytesValue: expected base64 data",
        ),
        (
            minimal(links=[{"traceId": TRACE_HEX, "spanId": "abc"}]),
            "spans[0].links[0].spanId: expected 16 hex characters, got 3",
        ),
        (minimal(events=[{"timeUnixNano": True}]), "events[0].timeUnixNano: expected an unsigned"),
    ],
)
def test_a_malformed_field_rejects_its_span_naming_the_path_and_the_problem(
    span: dict[str, Any], expected: str
) -> None:
    """Each malformed field rejects its span alone, and the message says where and what."""
    assert expected in rejection(span)


def test_a_span_that_is_not_an_object_is_rejected_alone() -> None:
    """A span slot holding a string is one rejected span, named by its index."""
    assert "spans[0]: expected an object, got a string" in rejection("op")  # type: ignore[arg-type]


def test_envelope_errors_fail_the_request_naming_the_path() -> None:
    """Wrong container types around the spans (their count unknown) fail the whole request."""
    assert decode_error({"resourceSpans": {}}) == "resourceSpans: expected an array, got an object"
    assert "resourceSpans[0].scopeSpans[0]: expected an object, got a number" in decode_error(
        {"resourceSpans": [{"scopeSpans": [1]}]}
    )
    assert "resourceSpans[0].scopeSpans[0].spans: expected an array, got a number" in decode_error(
        {"resourceSpans": [{"scopeSpans": [{"spans": 5}]}]}
    )
    assert "resourceSpans[1]: expected an object, got an array" in decode_error(
        {"resourceSpans": [{}, []]}
    )


def test_a_bad_resource_or_scope_rejects_the_spans_under_it() -> None:
    """A malformed resource or scope rejects its spans, counted; other groups are kept."""
    good = {"scopeSpans": [{"spans": [minimal(name="kept")]}]}
    document = {
        "resourceSpans": [
            {"resource": {"attributes": 3}, "scopeSpans": [{"spans": [minimal(), minimal()]}]},
            good,
            {"scopeSpans": [{"scope": {"name": 7}, "spans": [minimal()]}, *good["scopeSpans"]]},
        ]
    }
    decoded = json_codec.decode_traces(document)
    assert [s.name for s in decoded.records] == ["kept", "kept"]
    assert decoded.rejected == 3
    assert decoded.error_message == (
        "rejected 3 invalid spans: resourceSpans[0].resource.attributes: expected an array, got a"
        " number (all 2 spans of resourceSpans[0] rejected); resourceSpans[2].scopeSpans[0].scope"
        ".name: expected a string, got a number (all 1 spans of resourceSpans[2].scopeSpans[0]"
        " rejected)"
    )


def test_the_message_names_five_rejections_and_counts_the_rest() -> None:
    """Past five named problems the message says how many more records were rejected."""
    spans = [minimal(traceId="bad")] * 4 + [minimal(name="kept")]
    document = {
        "resourceSpans": [
            {"resource": {"attributes": 3}, "scopeSpans": [{"spans": [minimal()] * 3}]},
            {"scopeSpans": [{"spans": spans}]},
        ]
    }
    decoded = json_codec.decode_traces(document)
    assert (len(decoded.records), decoded.rejected) == (1, 7)
    assert decoded.error_message.endswith(
        "resourceSpans[1].scopeSpans[0].spans[3].traceId: expected 32 hex characters, got 3"
    )
    spans = [minimal(traceId="bad")] * 7
    decoded = json_codec.decode_traces(body(minimal(traceId="bad"), scopeSpans=[{"spans": spans}]))
    assert decoded.error_message.endswith(
        "spans[4].traceId: expected 32 hex characters, got 3; and 2 more"
    )


def test_bad_json_and_non_objects_are_decode_errors() -> None:
    """Text that is not JSON, or JSON that is not an object, cannot be a request."""
    with pytest.raises(DecodeError, match="not valid JSON"):
        json_codec.decode_traces(b"{not json")
    with pytest.raises(DecodeError, match="expected a JSON object"):
        json_codec.decode_traces(b"[1, 2]")
    with pytest.raises(DecodeError, match="not valid JSON"):
        json_codec.decode_logs(b"\xff\xfe")


def test_well_formed_but_invalid_spans_are_partial_rejections() -> None:
    """Zero ids and unknown enum values reject just that span, like the protobuf path."""
    document = body(minimal())
    spans = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans.append(minimal(traceId="0" * 32))
    spans.append(minimal(kind=42))
    spans.append(minimal(status={"code": 9}))
    decoded = json_codec.decode_traces(document)
    assert len(decoded.records) == 1
    assert decoded.rejected == 3
    assert "spans[1].traceId: must not be all zeros" in decoded.error_message
    assert "spans[2].kind: unknown span kind 42" in decoded.error_message


def test_span_to_dict_writes_spec_shaped_json() -> None:
    """A single span encodes with hex ids, string int64s, integer enums and camelCase keys."""
    out = json_codec.span_to_dict(make_span(1))
    assert out["traceId"] == ("01" * 15) + "01"
    assert out["spanId"] == ("01" * 7) + "02"
    assert out["parentSpanId"] == "09" * 8
    assert out["kind"] == 3
    assert out["startTimeUnixNano"] == "1700000000000000001"
    assert out["status"] == {"code": 2, "message": "boom"}
    attrs = {kv["key"]: kv["value"] for kv in out["attributes"]}
    assert attrs["i"] == {"intValue": str(-(2**63))}
    assert attrs["bytes"] == {"bytesValue": "AP8="}
    assert attrs["kv"] == {
        "kvlistValue": {
            "values": [
                {
                    "key": "inner",
                    "value": {
                        "kvlistValue": {
                            "values": [
                                {
                                    "key": "deep",
                                    "value": {
                                        "arrayValue": {
                                            "values": [{"intValue": "1"}, {"intValue": "2"}]
                                        }
                                    },
                                }
                            ]
                        }
                    },
                }
            ]
        }
    }
    json.dumps(out, allow_nan=False)  # strictly valid JSON


def test_special_doubles_are_strings() -> None:
    """NaN and infinities are written as the proto3 JSON strings, never bare NaN."""
    values = json_codec.attributes_to_json({"a": math.nan, "b": -math.inf})
    assert values == [
        {"key": "a", "value": {"doubleValue": "NaN"}},
        {"key": "b", "value": {"doubleValue": "-Infinity"}},
    ]


def test_traces_round_trip_through_text() -> None:
    """encode_traces -> JSON text -> decode_traces returns equal spans."""
    spans = [make_span(1), make_span(2, kind=SpanKind.SERVER)]
    text = json.dumps(json_codec.encode_traces(spans))
    assert json_codec.decode_traces(text).records == tuple(spans)


def test_logs_round_trip_and_log_to_dict() -> None:
    """Log records round-trip; log_to_dict writes eventName, hex ids and the body."""
    log = LogRecord(
        resource=RESOURCE,
        scope=SCOPE,
        time_unix_nano=1,
        observed_time_unix_nano=2,
        severity_number=17,
        body="text",
        attributes={"process.pid": 9},
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        event_name="process.start",
    )
    out = json_codec.log_to_dict(log)
    assert out["eventName"] == "process.start"
    assert out["traceId"] == "01" * 16
    assert out["body"] == {"stringValue": "text"}
    assert out["severityNumber"] == 17
    text = json.dumps(json_codec.encode_logs([log]))
    assert json_codec.decode_logs(text).records == (log,)


def test_a_malformed_log_record_is_rejected_alone_naming_the_path() -> None:
    """Log records with a bad span id or a timestamp that is no number are rejected alone."""
    records = [{"spanId": "0102"}, {"eventName": "kept"}, {"timeUnixNano": "soon"}]
    document = {"resourceLogs": [{"scopeLogs": [{"logRecords": records}]}]}
    decoded = json_codec.decode_logs(json.dumps(document))
    assert [r.event_name for r in decoded.records] == ["kept"]
    assert decoded.error_message == (
        "rejected 2 invalid log records: "
        "resourceLogs[0].scopeLogs[0].logRecords[0].spanId: expected 16 hex characters, got 4; "
        "resourceLogs[0].scopeLogs[0].logRecords[2].timeUnixNano: expected an unsigned 64-bit"
        " integer, got 'soon'"
    )
    with pytest.raises(DecodeError, match=r"resourceLogs\[0\]\.scopeLogs: expected an array"):
        json_codec.decode_logs({"resourceLogs": [{"scopeLogs": {}}]})
