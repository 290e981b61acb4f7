"""The fleet tests' workload: a TCP server and client, traced with the OpenTelemetry SDK only.

    python fleet_app.py server ADDRESS PORT [LABEL]   # serve two connections, then exit
    python fleet_app.py client ADDRESS PORT [LABEL]   # connect after a line on stdin, then exit

Both print ``ready <pid>`` once set up. The client's span ``client.call`` puts its W3C context on
the wire (the first line it sends); the server continues that trace with ``server.handle``. The
client holds the connection 1 s so socket scans on both hosts see it, then prints
``local <address> <port>`` (its end of the 4-tuple). LABEL is ignored: it is there for the
host receiver's selectors. Spans go to ``OTEL_EXPORTER_OTLP_ENDPOINT``
over OTLP/HTTP; with ``OTEL_SDK_DISABLED=true`` nothing is traced (a control process).
"""

from __future__ import annotations

import os
import socket
import sys
import time

from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


def provider(service: str) -> TracerProvider:
    """A provider exporting each span as it ends (none when the SDK is disabled)."""
    tp = TracerProvider(resource=Resource.create({"service.name": service}))
    if os.environ.get("OTEL_SDK_DISABLED") != "true":
        tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    return tp


def server(address: str, port: int, connections: int = 2) -> int:
    """Serve ``connections`` connections in turn: continue each client's trace (when it sent
    one), answer, wait for the client to close."""
    tp = provider("fleet-server")
    tracer = tp.get_tracer("fleet-app")
    with socket.create_server((address, port)) as listener:
        print(f"ready {os.getpid()}", flush=True)
        for _ in range(connections):
            conn, _ = listener.accept()
            with conn:
                line = conn.makefile("r").readline().strip()
                carrier = {"traceparent": line} if line.startswith("00-") else {}
                ctx = propagate.extract(carrier)
                kind = trace.SpanKind.SERVER
                with tracer.start_as_current_span("server.handle", context=ctx, kind=kind):
                    conn.sendall(b"ok\n")
                conn.recv(1)  # the client's close
    tp.shutdown()
    return 0


def client(address: str, port: int) -> int:
    """Wait for the go-ahead, call the server inside ``client.call``, hold 1 s, report."""
    tp = provider("fleet-client")
    tracer = tp.get_tracer("fleet-app")
    print(f"ready {os.getpid()}", flush=True)
    sys.stdin.readline()
    with tracer.start_as_current_span("client.call", kind=trace.SpanKind.CLIENT):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        with socket.create_connection((address, port)) as conn:
            local = conn.getsockname()
            conn.sendall((carrier.get("traceparent", "-") + "\n").encode())
            assert conn.makefile("r").readline().strip() == "ok"
            time.sleep(1.0)  # a sampling observer (scans every 10 ms) sees it on both ends
    tp.shutdown()
    print(f"local {local[0]} {local[1]}", flush=True)
    return 0


if __name__ == "__main__":
    role, address, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.exit(server(address, port) if role == "server" else client(address, port))
