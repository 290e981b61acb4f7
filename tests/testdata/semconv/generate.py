"""Record the spans real OpenAI instrumentors emit, as OTLP/JSON (run in a separate venv).

Usage (from the repository root, in a venv holding ``openai``, ``opentelemetry-sdk`` and the
instrumentor named by ``INSTRUMENTOR``)::

    python tests/testdata/semconv/generate.py openai-v2 tests/testdata/semconv/openai_v2.json

``INSTRUMENTOR`` is ``openai-v2`` (opentelemetry-instrumentation-openai-v2), ``openinference``
(openinference-instrumentation-openai) or ``openllmetry`` (OpenLLMetry's
opentelemetry-instrumentation-openai). The script starts ``examples/model_server.py`` on
loopback, makes with the real ``openai`` client one tool-calling chat completion, the follow-up
request carrying the tool result, and one streamed completion, then writes every finished span
as one OTLP/JSON ``ExportTraceServiceRequest`` (hex ids, integer enums, string 64-bit numbers).
The resource states ``process.pid`` as ``observe`` would see it, fixed to 4242 so the file is
stable across runs; times are real.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "examples"))

from model_server import BUILTIN_SCRIPT, parse_script, serve_in_thread  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

PID = 4242


def _instrument(name: str) -> None:
    if name == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import (  # type: ignore[import-not-found,unused-ignore]
            OpenAIInstrumentor,
        )

        OpenAIInstrumentor().instrument()
    elif name == "openinference":
        from openinference.instrumentation.openai import (
            OpenAIInstrumentor as OpenInferenceInstrumentor,
        )

        OpenInferenceInstrumentor().instrument()
    elif name == "openllmetry":
        from opentelemetry.instrumentation.openai import (  # type: ignore[import-not-found,unused-ignore]
            OpenAIInstrumentor as OpenLLMetryInstrumentor,
        )

        OpenLLMetryInstrumentor().instrument()
    else:
        raise SystemExit(f"unknown instrumentor {name!r}")


def _value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [_value(x) for x in v]}}
    return {"stringValue": str(v)}


def _attrs(attributes: Any) -> list[dict[str, Any]]:
    return [{"key": k, "value": _value(v)} for k, v in (attributes or {}).items()]


def _span(s: ReadableSpan) -> dict[str, Any]:
    ctx = s.context
    assert ctx is not None
    out: dict[str, Any] = {
        "traceId": f"{ctx.trace_id:032x}",
        "spanId": f"{ctx.span_id:016x}",
        "name": s.name,
        "kind": s.kind.value + 1,  # API enum INTERNAL=0 -> OTLP SPAN_KIND_INTERNAL=1
        "startTimeUnixNano": str(s.start_time),
        "endTimeUnixNano": str(s.end_time),
        "attributes": _attrs(s.attributes),
        "status": {"code": s.status.status_code.value},
    }
    if s.parent is not None:
        out["parentSpanId"] = f"{s.parent.span_id:016x}"
    if s.events:
        out["events"] = [
            {"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": _attrs(e.attributes)}
            for e in s.events
        ]
    return out


def _export(spans: tuple[ReadableSpan, ...]) -> dict[str, Any]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    resource: dict[str, Any] = {}
    for s in spans:
        resource = dict(s.resource.attributes)
        scope = s.instrumentation_scope
        key = (scope.name if scope else "", (scope.version or "") if scope else "")
        groups.setdefault(key, []).append(_span(s))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attrs(resource)},
                "scopeSpans": [
                    {"scope": {"name": n, "version": v}, "spans": group}
                    for (n, v), group in groups.items()
                ],
            }
        ]
    }


def main() -> int:
    name, target = sys.argv[1], Path(sys.argv[2])
    os.environ.setdefault("OPENAI_API_KEY", "sk-offline-not-a-key")
    resource = Resource.create(
        {"service.name": f"semconv-{name}", "process.pid": PID, "host.id": "corpus-host"}
    )
    provider = TracerProvider(resource=resource)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _instrument(name)
    import openai

    server = serve_in_thread(parse_script(BUILTIN_SCRIPT))
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-offline-not-a-key")
        tools: list[Any] = [
            {
                "type": "function",
                "function": {
                    "name": "run_command",
                    "description": "run a shell command",
                    "parameters": {
                        "type": "object",
                        "properties": {"command": {"type": "string"}},
                        "required": ["command"],
                    },
                },
            }
        ]
        messages: list[Any] = [{"role": "user", "content": "list the files"}]
        first = client.chat.completions.create(
            model="scripted-model", messages=messages, tools=tools
        )
        message = first.choices[0].message
        calls = message.tool_calls or []
        messages.append(message.model_dump(exclude_none=True))
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "a.txt"})
        client.chat.completions.create(model="scripted-model", messages=messages, tools=tools)
        stream = client.chat.completions.create(
            model="scripted-model",
            messages=[{"role": "user", "content": "hello"}],
            stream=True,
        )
        for _ in stream:
            pass
    finally:
        server.shutdown()
    provider.force_flush()
    target.write_text(json.dumps(_export(exporter.get_finished_spans()), indent=1) + "\n")
    print(f"{target}: {len(exporter.get_finished_spans())} spans")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
