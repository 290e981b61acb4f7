"""A client that sends spans to an agent and keeps receipts of what the agent acknowledged.

    python fleet_load.py ENDPOINT RECEIPTS

Until a line arrives on stdin, it makes 10 root spans with the OpenTelemetry SDK and exports them
with the SDK's OTLP/HTTP exporter to ENDPOINT (``http://host:port``); when the export succeeds
(the agent answered 200: its pipeline took them), their span ids (hex) are appended to RECEIPTS
and ``acked N`` (the running total) goes to stderr; a failed export (the agent is down) is
``failed`` and its spans are not retried. Exits 0 after the line.
"""

from __future__ import annotations

import sys
import threading

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult


class Collect(SpanProcessor):
    """Keeps ended spans until taken."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        """Keep it."""
        self.spans.append(span)

    def take(self) -> list[ReadableSpan]:
        """The spans kept so far, forgotten here."""
        out, self.spans = self.spans, []
        return out


def main(endpoint: str, receipts: str) -> int:
    """Send until told to stop (see the module docstring)."""
    stop = threading.Event()

    def wait_for_line() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_line, daemon=True).start()
    collect = Collect()
    provider = TracerProvider(resource=Resource.create({"service.name": "fleet-load"}))
    provider.add_span_processor(collect)
    tracer = provider.get_tracer("fleet-load")
    exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=2)
    acked = 0
    n = 0
    with open(receipts, "a", encoding="ascii") as out:
        while not stop.is_set():
            for _ in range(10):
                n += 1
                with tracer.start_as_current_span(f"load.{n}"):
                    pass
            batch = collect.take()
            if exporter.export(batch) is SpanExportResult.SUCCESS:
                out.writelines(f"{s.context.span_id:016x}\n" for s in batch if s.context)
                out.flush()
                acked += len(batch)
                print(f"acked {acked}", file=sys.stderr, flush=True)
            else:
                print("failed", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
