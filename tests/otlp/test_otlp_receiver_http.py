"""The otlp receiver over HTTP: the real SDK exporters, hand-written JSON, errors and limits."""

from __future__ import annotations

import gzip
import http.client
import json
import urllib.error
import urllib.request
import zlib
from typing import Any

import pytest
from google.rpc import status_pb2  # type: ignore[import-untyped]
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from otlp_fixtures import Running, StartReceiver, make_span

from otel_bridge.errors import RefusedError
from otel_bridge.otlp import proto_codec
from otel_bridge.testing import RecordingConsumer

TRACE_HEX = "5b8efff798038103d269b633813fc60c"
SPAN_HEX = "eee19b7ec3c1b174"


def post(
    url: str,
    body: bytes,
    content_type: str = "application/json",
    encoding: str | None = None,
    method: str = "POST",
) -> tuple[int, dict[str, str], bytes]:
    """Send one request with urllib; status, headers and body, errors included."""
    headers = {"Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def json_request(*spans: dict[str, Any]) -> bytes:
    """An OTLP/JSON trace request carrying ``spans``."""
    return json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]
                    },
                    "scopeSpans": [{"scope": {"name": "s"}, "spans": list(spans)}],
                }
            ]
        }
    ).encode()


def json_span(**fields: Any) -> dict[str, Any]:
    """A valid OTLP/JSON span with ``fields`` overriding."""
    return {
        "traceId": TRACE_HEX,
        "spanId": SPAN_HEX,
        "name": "op",
        "kind": 3,
        "startTimeUnixNano": "1000",
        "endTimeUnixNano": "2000",
        "attributes": [
            {"key": "count", "value": {"intValue": "9007199254740993"}},
            {
                "key": "cfg",
                "value": {
                    "kvlistValue": {
                        "values": [
                            {
                                "key": "list",
                                "value": {"arrayValue": {"values": [{"doubleValue": 0.5}]}},
                            }
                        ]
                    }
                },
            },
        ],
        **fields,
    }


def test_sdk_http_span_exporter_delivers_spans(start_receiver: StartReceiver) -> None:
    """Spans from the SDK's OTLP/HTTP exporter (gzip) arrive with ids and attributes intact."""
    running = start_receiver(grpc=False)
    provider = TracerProvider()
    exporter = OTLPSpanExporter(
        endpoint=f"{running.http_url}/v1/traces", compression=Compression.Gzip
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("op", attributes={"k": "v"}) as span:
        pass
    provider.shutdown()
    (got,) = running.sink.spans
    assert got.span_id == span.get_span_context().span_id.to_bytes(8, "big")
    assert got.attributes == {"k": "v"}


def test_sdk_http_log_exporter_delivers_log_records(start_receiver: StartReceiver) -> None:
    """Log records from the SDK's OTLP/HTTP log exporter arrive."""
    running = start_receiver(grpc=False)
    provider = LoggerProvider()
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{running.http_url}/v1/logs"))
    )
    provider.get_logger("l").emit(body={"k": [1, 2]}, event_name="file.open")
    provider.shutdown()
    (log,) = running.sink.logs
    assert log.body == {"k": (1, 2)}
    assert log.event_name == "file.open"


def test_hand_written_json_body_is_accepted(start_receiver: StartReceiver) -> None:
    """A hand-written OTLP/JSON body with hex ids, int64 strings and nested values is decoded."""
    running = start_receiver(grpc=False)
    status, headers, body = post(f"{running.http_url}/v1/traces", json_request(json_span()))
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {}
    (span,) = running.sink.spans
    assert span.trace_id.hex() == TRACE_HEX
    assert span.attributes == {"count": 9007199254740993, "cfg": {"list": (0.5,)}}


def test_json_logs_are_accepted(start_receiver: StartReceiver) -> None:
    """An OTLP/JSON logs body posted to /v1/logs is decoded."""
    running = start_receiver(grpc=False)
    document = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {
                                "timeUnixNano": "5",
                                "eventName": "process.exit",
                                "body": {"stringValue": "bye"},
                                "traceId": TRACE_HEX,
                            }
                        ]
                    }
                ]
            }
        ]
    }
    status, _, _ = post(f"{running.http_url}/v1/logs", json.dumps(document).encode())
    assert status == 200
    (log,) = running.sink.logs
    assert (log.event_name, log.body, log.time_unix_nano) == ("process.exit", "bye", 5)


def test_json_bodies_not_of_the_otlp_shape_get_400_naming_the_field(
    start_receiver: StartReceiver,
) -> None:
    """Bad JSON, a non-object, envelopes of the wrong type and invalid Unicode fail the whole
    request: 400 with the field path, nothing kept."""
    running = start_receiver(grpc=False)
    url = f"{running.http_url}/v1/traces"
    cases = {
        b"{oops": "body is not valid JSON",
        b"[1, 2]": "body: expected a JSON object, got an array",
        b'{"resourceSpans": {}}': "resourceSpans: expected an array, got an object",
        b'{"resourceSpans": [{"scopeSpans": [{"spans": 5}]}]}': (
            "resourceSpans[0].scopeSpans[0].spans: expected an array, got a number"
        ),
        json_request(json_span(), json_span(name="\\ud800")).replace(b"\\\\", b"\\"): (
            "spans[1].name: not valid Unicode"
        ),
    }
    for request_body, expected in cases.items():
        status, headers, body = post(url, request_body)
        assert status == 400
        assert headers["Content-Type"] == "application/json"
        assert expected in json.loads(body)["message"]
    assert running.counter("requests_malformed") == len(cases)
    assert running.sink.spans == []


def test_a_malformed_json_span_is_rejected_alone(start_receiver: StartReceiver) -> None:
    """One good span and one with ``"traceId": "bad"`` (or another malformed field): 200, the
    bad span in partialSuccess with its path, the good one kept. The SDK drops a request
    answered 400 whole, so a 400 here would lose the good span."""
    running = start_receiver(grpc=False)
    url = f"{running.http_url}/v1/traces"
    cases: dict[str, tuple[Any, str]] = {
        "traceId": (
            json_span(traceId="bad"),
            "resourceSpans[0].scopeSpans[0].spans[1].traceId: expected 32 hex characters, got 3",
        ),
        "short traceId": (json_span(traceId=TRACE_HEX[:-1]), "spans[1].traceId: expected 32 hex"),
        "spanId": (json_span(spanId="g" * 16), "spans[1].spanId: invalid hex character 'g'"),
        "name": (json_span(name=5), "spans[1].name: expected a string, got a number"),
        "kind": (json_span(kind="SERVER"), "spans[1].kind: expected an integer enum value"),
        "time": (json_span(startTimeUnixNano="soon"), "spans[1].startTimeUnixNano: expected"),
        "not an object": ("span", "spans[1]: expected an object, got a string"),
    }
    for case, (bad, expected) in cases.items():
        status, headers, body = post(url, json_request(json_span(name=case), bad))
        assert status == 200, case
        assert headers["Content-Type"] == "application/json"
        partial = json.loads(body)["partialSuccess"]
        assert partial["rejectedSpans"] == "1", case
        assert expected in partial["errorMessage"], case
    assert [s.name for s in running.sink.spans] == list(cases)
    assert running.counter("spans_rejected") == len(cases)
    assert running.counter("requests_malformed") == 0


def test_malformed_protobuf_gets_400_protobuf_status(start_receiver: StartReceiver) -> None:
    """Bytes that are not protobuf get a 400 with a protobuf google.rpc.Status."""
    running = start_receiver(grpc=False)
    status, headers, body = post(
        f"{running.http_url}/v1/traces", b"\x0a\xff\xff", "application/x-protobuf"
    )
    assert status == 400
    assert headers["Content-Type"] == "application/x-protobuf"
    message = status_pb2.Status.FromString(body).message
    assert "cannot decode ExportTraceServiceRequest" in message


def test_protobuf_partial_success(start_receiver: StartReceiver) -> None:
    """A bad span in a protobuf body is reported in partial_success, the rest accepted."""
    running = start_receiver(grpc=False)
    request = proto_codec.encode_traces([make_span(1), make_span(2)])
    request.resource_spans[0].scope_spans[0].spans[0].span_id = b"\x01" * 9
    status, headers, body = post(
        f"{running.http_url}/v1/traces", request.SerializeToString(), "application/x-protobuf"
    )
    assert status == 200
    assert headers["Content-Type"] == "application/x-protobuf"
    response = ExportTraceServiceResponse.FromString(body)
    assert response.partial_success.rejected_spans == 1
    assert "spans[0].spanId: expected 8 bytes, got 9" in response.partial_success.error_message
    assert [s.name for s in running.sink.spans] == ["span-2"]


def test_json_partial_success(start_receiver: StartReceiver) -> None:
    """A JSON body with an all-zero trace id gets partialSuccess with rejectedSpans as a string."""
    running = start_receiver(grpc=False)
    body_bytes = json_request(json_span(), json_span(traceId="0" * 32))
    status, _, body = post(f"{running.http_url}/v1/traces", body_bytes)
    assert status == 200
    partial = json.loads(body)["partialSuccess"]
    assert partial["rejectedSpans"] == "1"
    assert "must not be all zeros" in partial["errorMessage"]


def test_gzip_and_deflate_bodies(start_receiver: StartReceiver) -> None:
    """gzip, zlib deflate and raw deflate bodies are all decompressed."""
    running = start_receiver(grpc=False)
    url = f"{running.http_url}/v1/traces"
    raw = json_request(json_span())
    raw_deflate = zlib.compressobj(wbits=-15)
    deflated_raw = raw_deflate.compress(raw) + raw_deflate.flush()
    assert post(url, gzip.compress(raw), encoding="gzip")[0] == 200
    assert post(url, zlib.compress(raw), encoding="deflate")[0] == 200
    assert post(url, deflated_raw, encoding="deflate")[0] == 200
    assert len(running.sink.spans) == 3
    status, _, body = post(url, b"not gzip at all", encoding="gzip")
    assert status == 400
    assert "not valid gzip" in json.loads(body)["message"]


def test_body_over_content_length_limit_is_413(start_receiver: StartReceiver) -> None:
    """A Content-Length over max_request_body_size is refused with 413 before reading."""
    running = start_receiver(grpc=False, max_request_body_size=1000)
    status, _, body = post(f"{running.http_url}/v1/traces", b"{" + b" " * 2000 + b"}")
    assert status == 413
    assert "exceeds the limit of 1000 bytes" in json.loads(body)["message"]
    assert running.counter("requests_too_large") == 1


def test_gzip_bomb_is_413_without_inflating_it(start_receiver: StartReceiver) -> None:
    """A small gzip body that inflates past the limit is stopped at the limit: 413."""
    running = start_receiver(grpc=False, max_request_body_size=64 * 1024)
    bomb = gzip.compress(b"\0" * (50 * 1024 * 1024))
    assert len(bomb) < 64 * 1024
    status, _, body = post(f"{running.http_url}/v1/traces", bomb, encoding="gzip")
    assert status == 413
    assert "decompressed body exceeds" in json.loads(body)["message"]


def test_unsupported_content_type_is_415(start_receiver: StartReceiver) -> None:
    """A Content-Type other than protobuf or JSON is 415; so is an unknown Content-Encoding."""
    running = start_receiver(grpc=False)
    url = f"{running.http_url}/v1/traces"
    assert post(url, b"x", "text/plain")[0] == 415
    assert post(url, b"{}", encoding="br")[0] == 415


def test_wrong_method_is_405_and_unknown_path_404(start_receiver: StartReceiver) -> None:
    """GET on an OTLP path is 405 with Allow: POST; any other path is 404."""
    running = start_receiver(grpc=False)
    status, headers, _ = post(f"{running.http_url}/v1/traces", b"", method="PUT")
    assert status == 405
    assert headers["Allow"] == "POST"
    assert post(f"{running.http_url}/other", b"", method="DELETE")[0] == 404


def test_get_is_405(start_receiver: StartReceiver) -> None:
    """A GET on /v1/logs is 405."""
    running = start_receiver(grpc=False)
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{running.http_url}/v1/logs", timeout=5)
    assert info.value.code == 405
    info.value.close()


def test_unknown_path_is_404(start_receiver: StartReceiver) -> None:
    """POST to a path other than /v1/traces and /v1/logs is 404."""
    running = start_receiver(grpc=False)
    assert post(f"{running.http_url}/v1/metrics", b"{}")[0] == 404


def test_refusal_downstream_is_429_with_retry_after(start_receiver: StartReceiver) -> None:
    """When the next consumer refuses, the client gets 429 (throttled) with Retry-After; nothing
    is counted as accepted."""
    sink = RecordingConsumer(error=RefusedError("over the memory limit"))
    running = start_receiver(grpc=False, sink=sink, retry_after=3)
    status, headers, body = post(f"{running.http_url}/v1/traces", json_request(json_span()))
    assert status == 429
    assert headers["Retry-After"] == "3"
    assert "over the memory limit" in json.loads(body)["message"]
    assert running.counter("spans_refused") == 1
    assert running.counter("spans_accepted") == 0


def test_keep_alive_serves_several_requests_on_one_connection(
    start_receiver: StartReceiver,
) -> None:
    """HTTP/1.1 keep-alive: two requests on one connection both succeed."""
    running = start_receiver(grpc=False)
    _post_on_one_connection(running, 2)
    assert len(running.sink.spans) == 2


def _post_on_one_connection(running: Running, n: int) -> None:
    """``n`` JSON span requests on one kept-alive HTTP/1.1 connection, each answered 200."""
    conn = http.client.HTTPConnection("127.0.0.1", running.receiver.http_port, timeout=5)
    try:
        for _ in range(n):
            conn.request(
                "POST",
                "/v1/traces",
                body=json_request(json_span()),
                headers={"Content-Type": "application/json"},
            )
            response = conn.getresponse()
            response.read()
            assert response.status == 200
    finally:
        conn.close()


def test_accept_loop_wakes_only_for_connections_and_the_stop(
    start_receiver: StartReceiver,
) -> None:
    """The accepting loop sleeps until a connection or the stop: it does not poll (a standing
    collector stays idle), and a stop is seen at once instead of at the next poll."""
    running = start_receiver(grpc=False)
    server = running.receiver._http  # its loop's wake-up count
    assert server is not None
    _post_on_one_connection(running, 5)  # one connection, kept alive: the handler's requests
    assert len(running.sink.spans) == 5
    assert server.wakeups == 1  # the one accept; a polling loop wakes every poll interval
    running.receiver.shutdown()
    assert server.wakeups == 2  # the stop woke it, once
    server.stop()  # safe twice


def test_start_asks_no_resolver_for_the_hosts_name(start_receiver: StartReceiver) -> None:
    """``HTTPServer`` would look the bound address's name up (``socket.getfqdn``, a resolver
    query at every start, for CGI's ``SERVER_NAME`` only); the receiver's server keeps the
    address it bound, and serves as before."""
    running = start_receiver(grpc=False)
    server = running.receiver._http
    assert server is not None
    assert server._httpd.server_name == "127.0.0.1"  # getfqdn would have said "localhost"
    assert server._httpd.server_port == server.port
    status, _, _ = post(f"{running.http_url}/v1/traces", json_request(json_span()))
    assert status == 200
