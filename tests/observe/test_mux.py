"""The OTLP protocol mux: one port, the real SDK exporters of both transports, raw JSON.

The receiver is the real ``otlp`` receiver on its own gRPC and HTTP ports; the clients are the
OpenTelemetry SDK's own gRPC and HTTP/protobuf span exporters given nothing but the mux's URL,
and a plain HTTP/JSON POST (the Python SDK has no JSON exporter).
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator

import pytest
from waiting import wait_until

from otel_bridge.component import CreateSettings, Host
from otel_bridge.otlp.mux import H2_PREFACE, ProtocolMux, Upstream, is_http2
from otel_bridge.receivers.otlp import OtlpReceiver, factory
from otel_bridge.receivers.otlp.config import GrpcConfig, HttpConfig, OtlpReceiverConfig, Protocols
from otel_bridge.testing import RecordingConsumer

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the gRPC exporter")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter


@pytest.fixture
def served() -> Iterator[tuple[OtlpReceiver, RecordingConsumer, ProtocolMux]]:
    """A real receiver on two ports behind a mux."""
    config = OtlpReceiverConfig(
        protocols=Protocols(
            grpc=GrpcConfig(endpoint="127.0.0.1:0"), http=HttpConfig(endpoint="127.0.0.1:0")
        )
    )
    sink = RecordingConsumer()
    receiver = factory.create(CreateSettings(id="otlp"), config, sink)
    assert isinstance(receiver, OtlpReceiver)
    receiver.start(Host())
    assert receiver.grpc_port is not None
    assert receiver.http_port is not None
    mux = ProtocolMux(
        grpc=Upstream("127.0.0.1", receiver.grpc_port),
        http=Upstream("127.0.0.1", receiver.http_port),
    )
    yield receiver, sink, mux
    mux.stop()
    receiver.shutdown()


def _span_names(sink: RecordingConsumer) -> list[str]:
    return [s.name for b in sink.batches for s in b.spans]


def _export(exporter: SpanExporter, name: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("mux-test").start_as_current_span(name):
        pass
    provider.shutdown()


def test_preface_detection() -> None:
    """The HTTP/2 preface (and a prefix of it) is gRPC; HTTP/1.1 methods are not."""
    assert is_http2(H2_PREFACE)
    assert is_http2(b"PRI ")
    assert not is_http2(b"POST /v1/traces HTTP/1.1\r\n")
    assert not is_http2(b"PUT ")
    assert not is_http2(b"PR")


def test_both_sdk_exporters_and_json_reach_the_receiver_through_one_port(
    served: tuple[OtlpReceiver, RecordingConsumer, ProtocolMux],
) -> None:
    """The gRPC and HTTP/protobuf SDK exporters, given only the mux URL, and an HTTP/JSON post
    are all received; the mux counts which server each connection went to."""
    _, sink, mux = served
    _export(GrpcSpanExporter(endpoint=mux.url, insecure=True), "via-grpc")
    _export(HttpSpanExporter(endpoint=f"{mux.url}/v1/traces"), "via-http")
    body = {
        "resourceSpans": [
            {
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": "0af7651916cd43dd8448eb211c80319c",
                                "spanId": "b7ad6b7169203331",
                                "name": "via-json",
                                "kind": 1,
                                "startTimeUnixNano": "1",
                                "endTimeUnixNano": "2",
                            }
                        ]
                    }
                ]
            }
        ]
    }
    conn = http.client.HTTPConnection("127.0.0.1", mux.port, timeout=10)
    conn.request("POST", "/v1/traces", json.dumps(body), {"Content-Type": "application/json"})
    assert conn.getresponse().status == 200
    conn.close()
    assert sorted(_span_names(sink)) == ["via-grpc", "via-http", "via-json"]
    assert mux.wait_idle(10)
    assert mux.connections["grpc"] >= 1
    assert mux.connections["http"] >= 2
    assert mux.connections["unroutable"] == 0


def test_idle_after_clients_leave_and_unroutable_counted(
    served: tuple[OtlpReceiver, RecordingConsumer, ProtocolMux],
) -> None:
    """A client that connects and leaves without a byte is counted as unroutable; an open
    connection keeps the mux busy until it closes."""
    _, _, mux = served
    with socket.create_connection(("127.0.0.1", mux.port)):
        pass
    wait_until(lambda: mux.connections["unroutable"] == 1, 10, "the empty connection")
    held = socket.create_connection(("127.0.0.1", mux.port))
    held.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
    wait_until(lambda: mux.open_connections == 1, 10, "the held connection")
    assert not mux.wait_idle(0.05)
    held.close()
    assert mux.wait_idle(10)


def test_only_grpc_served_refuses_http_clients_cleanly() -> None:
    """Without an HTTP upstream an HTTP client's connection is closed, and counted."""
    config = OtlpReceiverConfig(protocols=Protocols(grpc=GrpcConfig(endpoint="127.0.0.1:0")))
    sink = RecordingConsumer()
    receiver = factory.create(CreateSettings(id="otlp"), config, sink)
    assert isinstance(receiver, OtlpReceiver)
    receiver.start(Host())
    assert receiver.grpc_port is not None
    mux = ProtocolMux(grpc=Upstream("127.0.0.1", receiver.grpc_port), http=None)
    try:
        _export(GrpcSpanExporter(endpoint=mux.url, insecure=True), "grpc-only")
        conn = http.client.HTTPConnection("127.0.0.1", mux.port, timeout=10)

        def post() -> None:
            conn.request("POST", "/v1/traces", b"{}", {"Content-Type": "application/json"})
            conn.getresponse()

        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            post()
        conn.close()
        assert _span_names(sink) == ["grpc-only"]
        assert mux.wait_idle(10)
        assert mux.connections["unroutable"] == 1
    finally:
        mux.stop()
        receiver.shutdown()
