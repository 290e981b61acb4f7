"""A standing collector's last line counts the requests it turned away.

Malformed OTLP requests (HTTP/JSON that is not JSON, HTTP/protobuf and gRPC bytes that are no
``ExportTraceServiceRequest``) each got a clear error back, but the collector's own summary said
``received 0 spans ... rejected 0`` as if nothing had come: its operator could not tell that a
sender was misconfigured. The line now counts them. Real clients: HTTP requests with
``urllib``, a gRPC call with ``grpcio``, to ``otel-bridge run -c configs/local.yaml``.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from standing_support import REPO, RunningCollector

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def post(port: int, body: bytes, content_type: str) -> int:
    """POST ``body`` to ``/v1/traces``; the HTTP status."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces", data=body, headers={"Content-Type": content_type}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_malformed_requests_are_counted_in_the_last_line(tmp_path: Path) -> None:
    env = {
        "OTEL_BRIDGE_GRAPH": str(tmp_path / "graph.json"),
        "OTEL_BRIDGE_RECORDS": str(tmp_path / "records.jsonl"),
    }
    collector = RunningCollector(REPO / "configs" / "local.yaml", tmp_path, env)
    try:
        assert post(collector.http_port, b'{"resourceSpans": ', "application/json") == 400
        assert post(collector.http_port, b"not protobuf", "application/x-protobuf") == 400
        with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
            export = channel.unary_unary(
                EXPORT, request_serializer=lambda b: b, response_deserializer=lambda b: b
            )
            with pytest.raises(grpc.RpcError) as refused:
                export(b"\xff\xff\xff not protobuf", timeout=10)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value
    finally:
        code = collector.stop()
    assert code == 0, collector.output
    last = [x for x in collector.output.splitlines() if "otel-bridge: up " in x][-1]
    assert "received 0 spans" in last, last
    assert "| requests not decoded 3" in last, last
