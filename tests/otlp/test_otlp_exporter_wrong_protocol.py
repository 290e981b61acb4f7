"""An OTLP/HTTP exporter pointed at an OTLP/gRPC endpoint (a gRPC port given where HTTP was
expected, as ``observe``'s forwarding can when it must guess a user's protocol).

The gRPC server answers HTTP/1.1 with HTTP/2 frames; the failure must say that in words (it
printed the raw frame bytes onto the terminal) and stay retryable. A real gRPC receiver.
"""

from __future__ import annotations

from otlp_fixtures import StartReceiver

from otel_bridge.exporters.otlp.config import HttpExporterConfig
from otel_bridge.exporters.otlp.transport import HttpTransport


def test_http_exporter_to_a_grpc_endpoint_says_so(start_receiver: StartReceiver) -> None:
    """The message names the protocol mismatch and is printable; nothing arrives."""
    running = start_receiver(http=False)
    transport = HttpTransport(HttpExporterConfig(endpoint=f"http://{running.grpc_target}"))
    try:
        result = transport.send("traces", b"")  # an empty ExportTraceServiceRequest
    finally:
        transport.close()
    assert not result.ok
    assert result.retryable
    assert "answered with HTTP/2 frames" in result.message
    assert "OTLP/gRPC endpoint" in result.message
    assert result.message.isprintable()
    assert running.sink.spans == []
