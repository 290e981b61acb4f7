"""Two gateways behind one endpoint: ``reuse_port`` lets two otlp receivers bind one port
(``SO_REUSEPORT``) and the kernel spreads the connections over them; without it the second
receiver cannot start. Real gRPC and HTTP clients, one new connection per request."""

from __future__ import annotations

import http.client

import grpc
import pytest
from otlp_fixtures import make_span

from otel_bridge.component import CreateSettings, Host
from otel_bridge.errors import StartupError
from otel_bridge.model import Batch
from otel_bridge.otlp import proto_codec
from otel_bridge.receivers.otlp import OtlpReceiver, factory
from otel_bridge.receivers.otlp.config import (
    GrpcConfig,
    HttpConfig,
    OtlpReceiverConfig,
    Protocols,
)
from otel_bridge.testing import RecordingConsumer, free_port

CONNECTIONS = 24
"""Requests, each on its own connection: all on one receiver has odds of 2**-23 (the kernel
hashes each connection's 4-tuple)."""


def receiver(
    grpc_port: int, http_port: int, *, reuse_port: bool
) -> tuple[OtlpReceiver, RecordingConsumer]:
    """A started otlp receiver on the two ports, and its sink."""
    config = OtlpReceiverConfig(
        protocols=Protocols(
            grpc=GrpcConfig(endpoint=f"127.0.0.1:{grpc_port}", reuse_port=reuse_port),
            http=HttpConfig(endpoint=f"127.0.0.1:{http_port}", reuse_port=reuse_port),
        )
    )
    sink = RecordingConsumer()
    made = factory.create(CreateSettings(id="otlp"), config, sink)
    assert isinstance(made, OtlpReceiver)
    made.start(Host())
    return made, sink


def request(i: int) -> bytes:
    """A serialized ExportTraceServiceRequest of one span."""
    message = proto_codec.encode_traces(Batch(spans=(make_span(i),)).spans)
    data: bytes = message.SerializeToString()
    return data


def test_two_receivers_share_one_port_and_the_kernel_spreads_connections() -> None:
    grpc_port, http_port = free_port(), free_port()
    pair = [receiver(grpc_port, http_port, reuse_port=True) for _ in range(2)]
    try:
        for i in range(CONNECTIONS):  # gRPC: a new channel (connection) per call
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                call = channel.unary_unary(
                    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                    request_serializer=None,
                    response_deserializer=None,
                )
                call(request(i), timeout=30)
        for i in range(CONNECTIONS, 2 * CONNECTIONS):  # HTTP: a new connection per request
            conn = http.client.HTTPConnection("127.0.0.1", http_port, timeout=30)
            conn.request(
                "POST", "/v1/traces", request(i), {"Content-Type": "application/x-protobuf"}
            )
            assert conn.getresponse().status == 200
            conn.close()
    finally:
        for r, _ in pair:
            r.shutdown()
    names = [{s.name for s in sink.spans} for _, sink in pair]
    assert names[0].isdisjoint(names[1])  # each request reached one receiver
    assert names[0] | names[1] == {f"span-{i}" for i in range(2 * CONNECTIONS)}
    assert all(names)  # both took some


def test_without_reuse_port_a_second_receiver_cannot_bind() -> None:
    grpc_port, http_port = free_port(), free_port()
    first, _ = receiver(grpc_port, http_port, reuse_port=False)
    try:
        with pytest.raises(StartupError, match="cannot listen"):
            receiver(grpc_port, http_port, reuse_port=False)
    finally:
        first.shutdown()
