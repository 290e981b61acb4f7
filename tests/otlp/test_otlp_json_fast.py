"""The fast OTLP/JSON span path (``json_fast``) against the readable reference (``_span``).

The fast path must decide nothing on its own: for every document, decoding with it gives exactly
the records, rejection count, partial-success message or request error of the reference path
alone; and every span it takes equals, value for value and type for type, what the reference
reads. The corpus is every span field (and attribute, event, link and status field) set to each
of a pool of awkward values, and random combinations of those changes; the same for log
records (``json_fast.log`` against ``json_codec._log``); and the JSON parse (msgspec, then
``json.loads`` for what it refuses) against ``json.loads`` alone.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.errors import DecodeError
from otel_bridge.model import Resource, Scope
from otel_bridge.otlp import json_codec, json_fast
from otel_bridge.receivers.otlp.peer import transport_peer

TRACE = "0af7651916cd43dd8448eb211c80319c"
SPAN = "b7ad6b7169203331"
PEER = transport_peer("http/json", "127.0.0.1", 54321, 4318)

AWKWARD: list[Any] = [
    None,
    "",
    0,
    1,
    -1,
    3,
    7,
    2**31,
    2**32 - 1,
    2**32,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63) - 1,
    1.0,
    1.5,
    1e21,
    float("nan"),
    float("inf"),
    True,
    False,
    "0",
    "1",
    "3",
    " 12 ",
    "1_000",
    "+5",
    "-5",
    "1e3",
    "1.0",
    "0x10",
    "\u0661\u0662",  # Arabic-Indic digits: int() reads them
    "\u00a012\u2003",  # Unicode spaces around digits
    "18446744073709551616",
    "NaN",
    "Infinity",
    "abc",
    "é",
    "\ud800",
    "a\udfffb",
    TRACE,
    TRACE.upper(),
    TRACE[:-1],
    TRACE + "0",
    TRACE[:-1] + "g",
    "0a f7651916cd43dd8448eb211c80319c",
    "0af7651916cd43dd 8448eb211c8031 ",  # 32 characters, 15 bytes: fromhex skips spaces
    "0" * 32,
    SPAN,
    SPAN.upper(),
    SPAN[:-1] + " ",
    "b7ad6b71 692033 ",
    "0" * 16,
    "b7ad6b716920333\u0661",
    [],
    [1],
    {},
    {"code": 2},
    {"code": 5, "message": "x"},
    {"stringValue": "s"},
]

VALUES: list[Any] = [
    None,
    {},
    {"stringValue": "s"},
    {"stringValue": ""},
    {"stringValue": "é"},
    {"stringValue": "\ud800"},
    {"stringValue": None},
    {"stringValue": 1},
    {"intValue": "5"},
    {"intValue": 5},
    {"intValue": "9223372036854775808"},
    {"intValue": 1e21},
    {"intValue": " 7 "},
    {"intValue": "7.0"},
    {"intValue": True},
    {"boolValue": True},
    {"boolValue": 1},
    {"boolValue": None},
    {"doubleValue": 1.5},
    {"doubleValue": 2},
    {"doubleValue": "2.5"},
    {"doubleValue": "NaN"},
    {"doubleValue": True},
    {"bytesValue": "AQI="},
    {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}]}},
    {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": False}}]}},
    {"string_value": "snake"},
    {"int_value": "3"},
    {"unknown": 1},
    {"unknown": 1, "stringValue": "after"},
    {"stringValue": None, "intValue": "4"},
    {"stringValue": "a", "intValue": "4"},
    "not an object",
    [],
]

SPAN_KEYS = [
    "traceId",
    "spanId",
    "parentSpanId",
    "traceState",
    "flags",
    "name",
    "kind",
    "startTimeUnixNano",
    "endTimeUnixNano",
    "attributes",
    "droppedAttributesCount",
    "events",
    "droppedEventsCount",
    "links",
    "droppedLinksCount",
    "status",
    "trace_id",
    "span_id",
    "parent_span_id",
    "trace_state",
    "start_time_unix_nano",
    "end_time_unix_nano",
    "dropped_attributes_count",
    "dropped_events_count",
    "dropped_links_count",
    "unknownField",
]
EVENT_KEYS = ["timeUnixNano", "name", "attributes", "droppedAttributesCount", "time_unix_nano"]
LINK_KEYS = [
    "traceId",
    "spanId",
    "traceState",
    "attributes",
    "droppedAttributesCount",
    "flags",
    "trace_id",
    "span_id",
    "dropped_attributes_count",
]
STATUS_KEYS = ["code", "message"]


def valid_span() -> dict[str, Any]:
    """A span of the usual shape with every part the fast path reads."""
    return {
        "traceId": TRACE,
        "spanId": SPAN,
        "parentSpanId": "00f067aa0ba902b7",
        "traceState": "k=v",
        "flags": 1,
        "name": "chat gpt-4o",
        "kind": 3,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": 1700000000000000500,
        "attributes": [
            {"key": "s", "value": {"stringValue": "text"}},
            {"key": "i", "value": {"intValue": "101"}},
            {"key": "b", "value": {"boolValue": True}},
            {"key": "d", "value": {"doubleValue": 0.5}},
        ],
        "droppedAttributesCount": 2,
        "events": [
            {"timeUnixNano": "1700000000000000100", "name": "e", "attributes": []},
        ],
        "droppedEventsCount": "1",
        "links": [{"traceId": TRACE, "spanId": SPAN, "attributes": [], "flags": 256}],
        "droppedLinksCount": 0,
        "status": {"code": 2, "message": "boom"},
    }


def document(*spans: Any) -> dict[str, Any]:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]}
    scope = {"name": "lib", "version": "1"}
    return {
        "resourceSpans": [
            {"resource": resource, "scopeSpans": [{"scope": scope, "spans": list(spans)}]}
        ]
    }


def outcome(decode: Any, body: bytes | Mapping[str, Any]) -> tuple[Any, ...]:
    """What decoding ``body`` gives, in a form that tells ``1`` from ``1.0`` and ``True``."""
    try:
        decoded = decode(body)
    except DecodeError as exc:
        return ("error", type(exc).__name__, str(exc))
    return ("ok", repr(decoded.records), decoded.rejected, decoded.error_message)


def reference(body: bytes | Mapping[str, Any]) -> Any:
    """The decode without the fast path: the body parsed by ``json.loads``
    (``json_codec.load_body``), every span read by ``json_codec._span``."""
    return _reference_decode(body)  # as deep in the stack as ``decode_traces`` calls ``_decode``


def _reference_decode(body: bytes | Mapping[str, Any]) -> Any:
    return json_codec._decode(body, json_codec._TRACES, json_codec._span, PEER)


def fast(body: bytes | Mapping[str, Any]) -> Any:
    return json_codec.decode_traces(body, PEER)


def assert_same(doc: dict[str, Any]) -> None:
    """The fast decode equals the reference, given as an object and as JSON text."""
    assert outcome(fast, doc) == outcome(reference, doc)
    text = json.dumps(doc).encode("utf-8", "surrogatepass")
    assert outcome(fast, text) == outcome(reference, text)
    for item in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        assert_span_same(item)


def assert_span_same(item: Any) -> None:
    """The fast path takes a span only when the reference reads it, and reads it the same."""
    resource, scope = Resource(), Scope()
    try:
        taken = json_fast.span(item, resource, scope)
    except json_fast.SLOW:
        return
    assert repr(taken) == repr(json_codec._span(item, "p", resource, scope))


def with_field(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """The valid span with the field at ``path`` (keys and indexes) set to ``value``."""
    span = valid_span()
    target: Any = span
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return span


def test_the_usual_span_takes_the_fast_path_and_equals_the_reference() -> None:
    item = valid_span()
    taken = json_fast.span(item, Resource(), Scope())
    assert repr(taken) == repr(json_codec._span(item, "p", Resource(), Scope()))
    assert taken.attributes == {"s": "text", "i": 101, "b": True, "d": 0.5}
    assert_same(document(item, valid_span()))


@pytest.mark.parametrize("key", SPAN_KEYS)
def test_each_span_field_with_each_awkward_value(key: str) -> None:
    for value in AWKWARD:
        assert_same(document(with_field((key,), value), valid_span()))
    span = valid_span()
    span.pop(key, None)
    assert_same(document(span))


@pytest.mark.parametrize(
    "path",
    [("events", 0, k) for k in EVENT_KEYS]
    + [("links", 0, k) for k in LINK_KEYS]
    + [("status", k) for k in STATUS_KEYS]
    + [("attributes", 0, "key"), ("attributes", 0, "value"), ("attributes", 1)],
)
def test_each_nested_field_with_each_awkward_value(path: tuple[Any, ...]) -> None:
    for value in AWKWARD:
        assert_same(document(with_field(path, value)))


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_each_attribute_value_shape(value: Any) -> None:
    for path in [
        ("attributes", 0, "value"),
        ("events", 0, "attributes"),
        ("links", 0, "attributes"),
    ]:
        kv = [{"key": "a", "value": value}] if path[0] != "attributes" else value
        assert_same(document(with_field(path, kv)))


def test_json_text_the_object_form_cannot_spell() -> None:
    """NaN literals, integers over the digit limit, duplicate keys, a lone surrogate key."""
    span = json.dumps(valid_span())
    bodies = [
        span.replace('"flags": 1', '"flags": NaN'),
        span.replace('"flags": 1', '"flags": 1' + "0" * 5000),
        span.replace('"kind": 3', '"kind": 3, "kind": 1'),
        span.replace('"kind": 3', '"kind": 3, "kind": 99'),
        span.replace('{"key": "s"', '{"key": "\\ud800"'),
        span.replace('"doubleValue": 0.5', '"doubleValue": -Infinity'),
        span.replace('"intValue": "101"', '"intValue": 1' + "0" * 5000),
    ]
    for text in bodies:
        body = ('{"resourceSpans":[{"scopeSpans":[{"spans":[' + text + "]}]}]}").encode()
        assert outcome(fast, body) == outcome(reference, body)


_field_path = st.one_of(
    st.sampled_from(SPAN_KEYS).map(lambda k: (k,)),
    st.sampled_from(EVENT_KEYS).map(lambda k: ("events", 0, k)),
    st.sampled_from(LINK_KEYS).map(lambda k: ("links", 0, k)),
    st.sampled_from(STATUS_KEYS).map(lambda k: ("status", k)),
    st.just(("attributes", 0, "value")),
)
_change = st.tuples(_field_path, st.sampled_from(AWKWARD + VALUES))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(_change, max_size=4), min_size=1, max_size=4))
def test_random_combinations_of_changes(spans: list[list[tuple[tuple[Any, ...], Any]]]) -> None:
    items = []
    for changes in spans:
        span = valid_span()
        for path, value in changes:
            target: Any = span
            try:
                for step in path[:-1]:
                    target = target[step]
                target[path[-1]] = copy.deepcopy(value)
            except (KeyError, IndexError, TypeError):
                continue  # an earlier change replaced the container
        items.append(span)
    assert_same(document(*items))


PARSE_TEXTS = [
    b'{"a": 1' + b"0" * 5000 + b"}",
    b'{"a": -' + b"1" * 4300 + b"}",
    b'{"a": 18446744073709552000, "b": -9223372036854775809, "c": 1e21}',
    b'{"a": NaN, "b": Infinity, "c": -Infinity}',
    b'{"a": 1e400, "b": 1e-400, "c": -0.0, "d": 4.9e-324}',
    b'{"a": "\\ud800", "b": "\\ud800\\udc00", "c": "\\u0000"}',
    b'{"a": "\xed\xa0\x80"}',
    b'{"a": "\xff"}',
    b'{"a": "\xc0\xaf"}',
    b'\xef\xbb\xbf{"a": 1}',
    '{"a": "é"}'.encode("utf-16"),
    '{"a": "é"}'.encode("utf-32-le"),
    b'{"a": 1, "b": 2, "a": 3}',
    b'{"a": [1,]}',
    b'{"a": "\t"}',
    b'{"a": 01}',
    b'{"a": 1} x',
    b" \n{}\r\n",
    b"[]",
    b'"text"',
    b"",
]


@pytest.mark.parametrize("text", PARSE_TEXTS, ids=repr)
def test_the_fast_parse_equals_json_loads(text: bytes) -> None:
    """msgspec's parse gives ``json.loads``' object, or leaves the body to it."""
    for body in (text, text.decode("utf-8", "surrogatepass") if _utf8(text) else text):
        parsed = json_codec.parse_fast(body)
        if parsed is not None:
            assert parse_outcome(body, parsed) == parse_outcome(body)


def _utf8(text: bytes) -> bool:
    try:
        text.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True


def parse_outcome(body: bytes | str, parsed: Any = None) -> tuple[Any, ...]:
    """``json.loads``' object (``load_body``), or ``parsed`` when given; or the error."""
    try:
        return ("ok", repr(json_codec.load_body(body) if parsed is None else parsed))
    except DecodeError as exc:
        return ("error", str(exc))


def nested(depth: int) -> bytes:
    return b'{"resourceSpans": [], "x": ' + b"[" * depth + b"]" * depth + b"}"


def test_nesting_near_the_recursion_limit_is_refused_as_before() -> None:
    """msgspec is made to give up before ``json.loads`` does, so no body that the reference
    finds nested too deeply is accepted (and none it accepts is refused)."""
    lo, hi = 1, 100_000  # the deepest nesting the reference accepts here
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if outcome(reference, nested(mid))[0] == "ok" else (lo, mid - 1)
    seen = set()
    for depth in range(lo - 20, lo + 20):
        result = outcome(fast, nested(depth))
        assert result == outcome(reference, nested(depth)), depth
        seen.add(result[0])
    assert seen == {"ok", "error"}


LOG_KEYS = [
    "timeUnixNano",
    "observedTimeUnixNano",
    "severityNumber",
    "severityText",
    "body",
    "attributes",
    "droppedAttributesCount",
    "flags",
    "traceId",
    "spanId",
    "eventName",
    "time_unix_nano",
    "observed_time_unix_nano",
    "severity_number",
    "severity_text",
    "dropped_attributes_count",
    "trace_id",
    "span_id",
    "event_name",
]


def valid_log() -> dict[str, Any]:
    """A log record of the usual shape with every part the fast path reads."""
    return {
        "timeUnixNano": "1700000000000000000",
        "observedTimeUnixNano": 1700000000000000001,
        "severityNumber": 9,
        "severityText": "INFO",
        "body": {"stringValue": "started"},
        "attributes": [{"key": "process.pid", "value": {"intValue": "42"}}],
        "droppedAttributesCount": 0,
        "flags": 1,
        "traceId": TRACE,
        "spanId": SPAN,
        "eventName": "process.start",
    }


def reference_logs(body: bytes | Mapping[str, Any]) -> Any:
    return _reference_decode_logs(body)


def _reference_decode_logs(body: bytes | Mapping[str, Any]) -> Any:
    return json_codec._decode(body, json_codec._LOGS, json_codec._log, PEER)


def fast_logs(body: bytes | Mapping[str, Any]) -> Any:
    return json_codec.decode_logs(body, PEER)


def assert_logs_same(*records: Any) -> None:
    """The fast log decode equals the reference (documents and single records)."""
    doc = {"resourceLogs": [{"scopeLogs": [{"scope": {"name": "s"}, "logRecords": list(records)}]}]}
    assert outcome(fast_logs, doc) == outcome(reference_logs, doc)
    text = json.dumps(doc).encode("utf-8", "surrogatepass")
    assert outcome(fast_logs, text) == outcome(reference_logs, text)
    resource, scope = Resource(), Scope()
    for item in records:
        try:
            taken = json_fast.log(item, resource, scope)
        except json_fast.SLOW:
            continue
        assert repr(taken) == repr(json_codec._log(item, "p", resource, scope))


def test_the_usual_log_record_takes_the_fast_path() -> None:
    taken = json_fast.log(valid_log(), Resource(), Scope())
    assert (taken.body, taken.attributes, taken.event_name) == (
        "started",
        {"process.pid": 42},
        "process.start",
    )
    assert_logs_same(valid_log(), valid_log())


@pytest.mark.parametrize("key", LOG_KEYS)
def test_each_log_field_with_each_awkward_value(key: str) -> None:
    for value in AWKWARD:
        record = valid_log()
        record[key] = value
        assert_logs_same(record, valid_log())
    record = valid_log()
    record.pop(key, None)
    assert_logs_same(record)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_each_log_body_and_attribute_value_shape(value: Any) -> None:
    record = valid_log()
    record["body"] = value
    other = valid_log()
    other["attributes"] = [{"key": "a", "value": value}]
    assert_logs_same(record, other)
