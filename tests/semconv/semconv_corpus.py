"""Load the recorded and specified spans of ``tests/testdata/semconv`` (see its README)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from otel_bridge.model import AnyValue, Resource, Scope, Span, SpanEvent, SpanKind, Status
from otel_bridge.otlp.json_codec import decode_traces

CORPUS = Path(__file__).resolve().parents[1] / "testdata" / "semconv"

RECORDED = ("openai_v2.json", "openai_v2_latest.json", "openinference.json", "openllmetry.json")
"""OTLP/JSON written by ``generate.py`` from the real instrumentors."""


def load(name: str) -> tuple[Span, ...]:
    """The spans of one corpus file (OTLP/JSON, or the Vercel AI SDK fixture's own format)."""
    path = CORPUS / name
    if name.startswith("vercel_"):
        return _vercel(json.loads(path.read_text()))
    decoded = decode_traces(path.read_bytes())
    assert decoded.rejected == 0, decoded.error_message
    return decoded.records


def _nanos(pair: list[int]) -> int:
    return pair[0] * 1_000_000_000 + pair[1]


def _value(value: Any) -> AnyValue:
    if isinstance(value, list):
        return tuple(_value(v) for v in value)
    return value  # type: ignore[no-any-return]


def _vercel(items: list[dict[str, Any]]) -> tuple[Span, ...]:
    """Arize's recorded Vercel AI SDK spans: ``ReadableSpan`` dumps with no kind and no parent.

    The AI SDK's spans are INTERNAL (its tracer sets no kind); each fixture span is a root of its
    own trace. One resource and scope stand for the Node.js process that recorded them.
    """
    resource = Resource(attributes={"service.name": "vercel-ai-sdk-fixtures"})
    scope = Scope(name="ai")
    out: list[Span] = []
    for item in items:
        ctx = item["spanContext"]
        out.append(
            Span(
                resource=resource,
                scope=scope,
                trace_id=bytes.fromhex(ctx["traceId"]),
                span_id=bytes.fromhex(ctx["spanId"]),
                name=item["name"],
                start_time_unix_nano=_nanos(item["startTime"]),
                end_time_unix_nano=_nanos(item["endTime"]),
                attributes={k: _value(v) for k, v in item["attributes"].items()},
                events=tuple(
                    SpanEvent(
                        name=e["name"],
                        time_unix_nano=_nanos(e["time"]),
                        attributes={k: _value(v) for k, v in e["attributes"].items()},
                    )
                    for e in item["events"]
                ),
                kind=SpanKind.INTERNAL,
                status=Status(),
            )
        )
    return tuple(out)
