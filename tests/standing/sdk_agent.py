"""An agent instrumented with the OpenTelemetry SDK only, configured from the environment.

Started by the standing-collector tests as a plain subprocess (never by ``observe``). Its
resource comes from the SDK's own detectors (``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process,host``
gives ``process.pid`` and ``host.id``); spans go out through the SDK's OTLP exporter named by
``OTEL_EXPORTER_OTLP_PROTOCOL`` (``grpc`` or ``http/protobuf``) to ``OTEL_EXPORTER_OTLP_ENDPOINT``.

    python sdk_agent.py OUT_FILE PORT

It sends a first span, then waits for one line on standard input (the test's go-ahead, once
the collector follows it), writes OUT_FILE, holds a connection to 127.0.0.1:PORT for 1 s,
sends a second span and exits 0. With ``SDK_AGENT_NAME`` set, both spans are a GenAI agent's
(``invoke_agent``, ``gen_ai.agent.name``), so the graph has an agent for its pid to be linked to.
"""

from __future__ import annotations

import os
import socket
import sys
import time

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter


def exporter() -> SpanExporter:
    """The SDK's OTLP span exporter for the configured protocol."""
    if os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter()


def main(out_file: str, port: int) -> int:
    """Report, wait for the go-ahead, act (file, connection), report again."""
    provider = TracerProvider(resource=Resource.create())
    provider.add_span_processor(SimpleSpanProcessor(exporter()))
    tracer = provider.get_tracer("sdk-agent")
    name = os.environ.get("SDK_AGENT_NAME")
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name} if name else {}
    with tracer.start_as_current_span("agent.hello", attributes=attrs):
        pass
    print("reported", flush=True)
    sys.stdin.readline()
    with tracer.start_as_current_span("agent.act", attributes=attrs):
        with open(out_file, "w", encoding="utf-8") as f:
            f.write("written by the agent\n")
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(b"hello\n")
            # the workload: a connection that lives 1 s, as a model or tool call would, so a
            # sampling observer (socket scans every 10-20 ms) sees it with its process
            time.sleep(1.0)
    provider.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
