"""Poison OTLP/JSON is refused at the edge with a path, and loses nothing accepted.

Reproductions from the reliability issue: a lone surrogate in a span name (answered 200 before,
then it killed the graph exporter's flush thread), an integer literal over the interpreter's
4,300-digit limit and JSON nested about 1,000 deep (both answered 500 before). A string that is
not valid Unicode and JSON too deep to parse fail the whole request (400, as invalid UTF-8 fails
a protobuf request); poison inside one span's fields rejects that span alone (partial success
naming its field path).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from otlp_fixtures import StartReceiver

from otel_bridge.errors import DecodeError
from otel_bridge.otlp import json_codec
from otel_bridge.otlp.json_read import MAX_VALUE_DEPTH

TRACE = "5b8efff798038103d269b633813fc60c"


def _body(name_json: str, span_id: str = "eee19b7ec3c1b174", attrs: str = "[]") -> bytes:
    span = f'{{"traceId":"{TRACE}","spanId":"{span_id}","name":{name_json},"attributes":{attrs}}}'
    return ('{"resourceSpans":[{"scopeSpans":[{"spans":[' + span + "]}]}]}").encode()


def _nested(depth: int) -> str:
    value = '{"stringValue":"leaf"}'
    for _ in range(depth):
        value = '{"arrayValue":{"values":[' + value + "]}}"
    return '[{"key":"deep","value":' + value + "}]"


def _post(url: str, body: bytes) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


WHOLE_REQUEST = {
    "lone surrogate in a name": (_body('"ok \\ud800 end"'), "spans[0].name: not valid Unicode"),
    "lone surrogate in an attribute key": (
        _body('"n"', attrs='[{"key":"\\udfff","value":{"stringValue":"v"}}]'),
        "attributes[0].key: not valid Unicode",
    ),
    "lone surrogate in an attribute value": (
        _body('"n"', attrs='[{"key":"k","value":{"stringValue":"\\ud83d"}}]'),
        "attributes[0].value.stringValue: not valid Unicode",
    ),
    "JSON nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000, "body: JSON nested too deeply"),
}
ONE_SPAN = {
    "integer literal over 4,300 digits": (
        _body("1" + "0" * 5000),
        "spans[0].name: expected a string, got an integer literal of 5001 digits",
    ),
    "integer literal over 4,300 digits as an attribute's intValue": (
        _body('"n"', attrs='[{"key":"k","value":{"intValue":-' + "9" * 4400 + "}}]"),
        "attributes[0].value.intValue: expected a 64-bit integer, got an integer literal of 4400",
    ),
    "decimal string over 4,300 digits as a timestamp": (
        _body('"n"').replace(b'"name"', b'"startTimeUnixNano":"' + b"7" * 4400 + b'","name"'),
        "spans[0].startTimeUnixNano: expected an unsigned 64-bit integer, got '777",
    ),
    "attribute value nested past the limit": (
        _body('"n"', attrs=_nested(MAX_VALUE_DEPTH + 2)),
        f"nested deeper than {MAX_VALUE_DEPTH} levels",
    ),
}


@pytest.mark.parametrize("case", sorted(WHOLE_REQUEST))
def test_poison_json_is_a_decode_error_naming_where(case: str) -> None:
    """The decoder raises DecodeError (never another exception) with the reason."""
    body, expected = WHOLE_REQUEST[case]
    with pytest.raises(DecodeError) as info:
        json_codec.decode_traces(body)
    assert expected in str(info.value)


@pytest.mark.parametrize("case", sorted(ONE_SPAN))
def test_poison_in_one_span_rejects_that_span_naming_where(case: str) -> None:
    """The decoder rejects the poisoned span (never another exception) with the reason."""
    body, expected = ONE_SPAN[case]
    decoded = json_codec.decode_traces(body)
    assert (decoded.records, decoded.rejected) == ((), 1)
    assert expected in decoded.error_message


def test_valid_non_ascii_and_nesting_within_the_limit_are_kept() -> None:
    """Real Unicode (a surrogate *pair* escape, accents) and nesting at the limit decode."""
    decoded = json_codec.decode_traces(_body('"caf\\u00e9 \\ud83d\\ude00"', attrs=_nested(10)))
    (span,) = decoded.records
    assert span.name == "café 😀"
    value = span.attributes["deep"]
    for _ in range(10):
        assert isinstance(value, tuple)
        (value,) = value
    assert value == "leaf"


def test_poison_requests_are_answered_and_accepted_spans_stay(
    start_receiver: StartReceiver,
) -> None:
    """Between good requests, poison gets 400 (whole request) or a partial success naming the
    rejected span, and the good spans all arrive."""
    running = start_receiver(grpc=False)
    url = f"{running.http_url}/v1/traces"
    poison = sorted({**WHOLE_REQUEST, **ONE_SPAN}.items())
    good = [_body(f'"good-{i}"', span_id=f"{i + 1:016x}") for i in range(len(poison) + 1)]
    assert _post(url, good[0])[0] == 200
    for i, (case, (body, expected)) in enumerate(poison):
        status, answer = _post(url, body)
        if case in WHOLE_REQUEST:
            assert status == 400, case
            assert expected in str(answer.get("message")), (case, answer)
        else:
            assert status == 200, case
            partial = answer["partialSuccess"]
            assert isinstance(partial, dict)
            assert partial["rejectedSpans"] == "1", (case, answer)
            assert expected in partial["errorMessage"], (case, answer)
        assert _post(url, good[i + 1])[0] == 200
    assert sorted(s.name for s in running.sink.spans) == sorted(
        f"good-{i}" for i in range(len(good))
    )
