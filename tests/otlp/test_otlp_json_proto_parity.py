"""The same content sent as OTLP/JSON and as OTLP/protobuf is accepted and rejected alike.

Each case puts one invalid span (or log record) beside valid ones, then sends the request three
ways to one running receiver: JSON over HTTP (hand-written in the shape of the OTLP/JSON examples:
hex ids, int64 strings, integer enums), protobuf over HTTP and protobuf over gRPC (the
``opentelemetry-proto`` messages the SDK exporters send; the SDK itself cannot make an invalid
id). Every way must keep the valid records and report the invalid one in ``partial_success``
under the same field path: a bad span costs only itself, whatever the encoding.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from otlp_fixtures import Running, StartReceiver

TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")
SPAN = bytes.fromhex("eee19b7ec3c1b174")


@dataclass(frozen=True)
class Content:
    """One span's content, encoding-neutral (ids as bytes, enums as numbers)."""

    name: str
    trace_id: bytes = TRACE
    span_id: bytes = SPAN
    parent_span_id: bytes = b""
    kind: int = 1
    status_code: int = 0
    link_span_id: bytes | None = None

    def to_json(self) -> dict[str, Any]:
        """The OTLP/JSON span object (an empty id is left out, as a JSON encoder omits it)."""
        out: dict[str, Any] = {
            "spanId": self.span_id.hex(),
            "name": self.name,
            "kind": self.kind,
            "startTimeUnixNano": "1700000000000000000",
            "endTimeUnixNano": "1700000000500000000",
            "attributes": [{"key": "n", "value": {"intValue": "7"}}],
            "status": {"code": self.status_code},
        }
        if self.trace_id:
            out["traceId"] = self.trace_id.hex()
        if self.parent_span_id:
            out["parentSpanId"] = self.parent_span_id.hex()
        if self.link_span_id is not None:
            out["links"] = [{"traceId": TRACE.hex(), "spanId": self.link_span_id.hex()}]
        return out

    def fill(self, pb: Any) -> None:
        """Set the fields of the protobuf ``Span`` ``pb``."""
        pb.trace_id, pb.span_id, pb.parent_span_id = (
            self.trace_id,
            self.span_id,
            self.parent_span_id,
        )
        pb.name, pb.kind, pb.status.code = self.name, self.kind, self.status_code
        pb.start_time_unix_nano = 1_700_000_000_000_000_000
        pb.end_time_unix_nano = 1_700_000_000_500_000_000
        attribute = pb.attributes.add()
        attribute.key, attribute.value.int_value = "n", 7
        if self.link_span_id is not None:
            link = pb.links.add()
            link.trace_id, link.span_id = TRACE, self.link_span_id


INVALID = {
    "trace id of 15 bytes": (Content("bad", trace_id=b"\x01" * 15), "traceId"),
    "span id of 9 bytes": (Content("bad", span_id=b"\x01" * 9), "spanId"),
    "no trace id": (Content("bad", trace_id=b""), "traceId"),
    "all-zero trace id": (Content("bad", trace_id=bytes(16)), "traceId: must not be all zeros"),
    "all-zero span id": (Content("bad", span_id=bytes(8)), "spanId: must not be all zeros"),
    "unknown span kind": (Content("bad", kind=42), "kind: unknown span kind 42"),
    "unknown status code": (Content("bad", status_code=9), "status.code: unknown status code 9"),
    "parent span id of 3 bytes": (Content("bad", parent_span_id=b"\x01" * 3), "parentSpanId"),
    "link span id of 7 bytes": (Content("bad", link_span_id=b"\x01" * 7), "links[0].spanId"),
}


def trace_requests(
    spans: list[Content],
) -> tuple[bytes, trace_service_pb2.ExportTraceServiceRequest]:
    """``spans`` in one resource and scope, as an OTLP/JSON body and as a protobuf request."""
    document = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "a"}}]
                },
                "scopeSpans": [{"scope": {"name": "lib"}, "spans": [s.to_json() for s in spans]}],
            }
        ]
    }
    request = trace_service_pb2.ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    attribute = resource_spans.resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", "a"
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "lib"
    for span in spans:
        span.fill(scope_spans.spans.add())
    return json.dumps(document).encode(), request


def post(url: str, body: bytes, content_type: str) -> tuple[int, bytes]:
    """POST ``body``; the status and the response body (errors included)."""
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": content_type}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@dataclass(frozen=True)
class Answer:
    """What one way of sending got back: HTTP-like status, rejected count and message."""

    status: int
    rejected: int
    message: str


def send_traces(running: Running, spans: list[Content]) -> dict[str, Answer]:
    """Send ``spans`` as JSON/HTTP, protobuf/HTTP and protobuf/gRPC; each way's answer."""
    body, request = trace_requests(spans)
    url = f"{running.http_url}/v1/traces"
    answers = {}
    status, raw = post(url, body, "application/json")
    partial = json.loads(raw).get("partialSuccess", {}) if status == 200 else {}
    answers["http/json"] = Answer(
        status, int(partial.get("rejectedSpans", 0)), partial.get("errorMessage", "")
    )
    status, raw = post(url, request.SerializeToString(), "application/x-protobuf")
    response = trace_service_pb2.ExportTraceServiceResponse.FromString(
        raw if status == 200 else b""
    )
    answers["http/protobuf"] = Answer(
        status, response.partial_success.rejected_spans, response.partial_success.error_message
    )
    with grpc.insecure_channel(running.grpc_target) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        response = stub.Export(request, timeout=10)
    answers["grpc"] = Answer(
        200, response.partial_success.rejected_spans, response.partial_success.error_message
    )
    return answers


@pytest.mark.parametrize("case", sorted(INVALID))
def test_an_invalid_span_is_rejected_alone_in_every_encoding(
    start_receiver: StartReceiver, case: str
) -> None:
    """One invalid span between two valid ones: 200, one rejected under its path, two kept."""
    invalid, field = INVALID[case]
    running = start_receiver()
    answers = send_traces(running, [Content("good-0"), invalid, Content("good-2")])
    where = f"resourceSpans[0].scopeSpans[0].spans[1].{field}"
    for way, answer in answers.items():
        assert (answer.status, answer.rejected) == (200, 1), (way, answer)
        assert where in answer.message, (way, answer)
    assert sorted(s.name for s in running.sink.spans) == ["good-0"] * 3 + ["good-2"] * 3
    assert running.counter("spans_rejected") == 3
    assert running.counter("spans_accepted") == 6


def test_every_invalid_span_in_one_request_is_counted_alike(start_receiver: StartReceiver) -> None:
    """All the invalid spans in one request: the same accepted and rejected counts each way."""
    running = start_receiver()
    spans = [Content("good-first"), *(c for c, _ in INVALID.values()), Content("good-last")]
    answers = send_traces(running, spans)
    assert {a.rejected for a in answers.values()} == {len(INVALID)}
    assert {a.status for a in answers.values()} == {200}
    shown = {way: a.message.split(": ", 1)[0] for way, a in answers.items()}
    assert set(shown.values()) == {f"rejected {len(INVALID)} invalid spans"}, shown
    assert running.counter("spans_accepted") == 2 * 3


def test_invalid_log_records_are_rejected_alone_in_both_encodings(
    start_receiver: StartReceiver,
) -> None:
    """Log records with a trace id of 15 bytes or a span id of 4: rejected alike, rest kept."""
    running = start_receiver()
    records = [("good-0", TRACE, SPAN), ("bad-1", b"\x01" * 15, b""), ("bad-2", b"", b"\x01" * 4)]
    document = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {
                                "timeUnixNano": "5",
                                "eventName": name,
                                "traceId": trace_id.hex(),
                                "spanId": span_id.hex(),
                            }
                            for name, trace_id, span_id in records
                        ]
                    }
                ]
            }
        ]
    }
    request = logs_service_pb2.ExportLogsServiceRequest()
    scope_logs = request.resource_logs.add().scope_logs.add()
    for name, trace_id, span_id in records:
        record = scope_logs.log_records.add()
        record.time_unix_nano, record.event_name = 5, name
        record.trace_id, record.span_id = trace_id, span_id
    url = f"{running.http_url}/v1/logs"
    status, raw = post(url, json.dumps(document).encode(), "application/json")
    assert status == 200
    partial = json.loads(raw)["partialSuccess"]
    status, raw = post(url, request.SerializeToString(), "application/x-protobuf")
    assert status == 200
    response = logs_service_pb2.ExportLogsServiceResponse.FromString(raw).partial_success
    with grpc.insecure_channel(running.grpc_target) as channel:
        stub = logs_service_pb2_grpc.LogsServiceStub(channel)  # type: ignore[no-untyped-call]
        over_grpc = stub.Export(request, timeout=10).partial_success
    assert partial["rejectedLogRecords"] == "2"
    assert response.rejected_log_records == over_grpc.rejected_log_records == 2
    for message in (partial["errorMessage"], response.error_message, over_grpc.error_message):
        assert "resourceLogs[0].scopeLogs[0].logRecords[1].traceId" in message
        assert "resourceLogs[0].scopeLogs[0].logRecords[2].spanId" in message
    assert [log.event_name for log in running.sink.logs] == ["good-0"] * 3
