"""In Jaeger or Phoenix, a tool span no process was linked to says so, and why.

Met as a new user: in the backend, a tool span enrich looked for a process for and found none
carried no ``otel_bridge.*`` attribute at all, exactly like a span enrich never looked at (an
agent that was not followed, a span that is no tool call): nothing told "not linked" from "not
looked for", and the reason was only in report.md. ``enrich`` now puts
``otel_bridge.link.status=unlinked``, a stable ``otel_bridge.link.reason`` code and the words
of report.md (``otel_bridge.link.explanation``) on such a span; a linked span keeps its
``otel_bridge.bridge.*`` attributes. A real OpenTelemetry SDK agent under ``observe -c
configs/jaeger.yaml``, a recording OTLP/gRPC server standing in for Jaeger.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import REPO, observe
from otlp_recorder import RecordingTraceServer, attributes

from otel_bridge.linkreasons import NO_COMMAND, NO_COMMAND_WHY, WHY

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

AGENT = """
import json, subprocess
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "unlinked-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")


def tool(name, call_id, arguments, run=None):
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": json.dumps(arguments),
    }
    with tracer.start_as_current_span("execute_tool " + name, attributes=attrs):
        if run is not None:
            subprocess.run(run, shell=isinstance(run, str), check=True)


with tracer.start_as_current_span("invoke_agent unlinked") as agent:
    agent.set_attribute("gen_ai.operation.name", "invoke_agent")
    tool("run_command", "call_1", {"command": "sleep 0.3"}, ["sleep", "0.3"])
    tool("run_command", "call_2", {"command": "true | true"}, "true | true")
    tool("take_note", "call_3", {"text": "remember this"})
provider.shutdown()
"""

LINK = "otel_bridge.link."
BRIDGE = "otel_bridge.bridge."


@pytest.fixture
def jaeger() -> Iterator[RecordingTraceServer]:
    """The recording stand-in for Jaeger's OTLP/gRPC port."""
    server = RecordingTraceServer().start()
    yield server
    server.stop()


def test_an_unlinked_tool_span_says_it_was_not_linked_and_why(
    tmp_path: Path, jaeger: RecordingTraceServer
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text(AGENT)
    run = observe(
        [sys.executable, "agent.py"],
        run_dir=tmp_path / "run",
        cwd=work,
        config=REPO / "configs" / "jaeger.yaml",
        env={
            "JAEGER_ENDPOINT": f"127.0.0.1:{jaeger.port}",
            "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": "127.0.0.1:0",
            "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
        },
    )
    assert jaeger.wait_for(lambda r: len(r.span_named("execute_tool take_note")) == 1)
    by_call = {
        attributes(s.attributes)["gen_ai.tool.call.id"]: attributes(s.attributes)
        for _, s in jaeger.spans()
        if "gen_ai.tool.call.id" in attributes(s.attributes)
    }
    linked, piped, note = by_call["call_1"], by_call["call_2"], by_call["call_3"]
    assert BRIDGE + "method" in linked, linked  # linked: its bridge attributes, as before
    assert not any(k.startswith(LINK) for k in linked), linked
    reason = "unsupported_command.control_operator"
    assert piped[LINK + "status"] == "unlinked", piped
    assert piped[LINK + "reason"] == reason, piped
    assert piped[LINK + "explanation"] == WHY[reason], piped
    assert note[LINK + "status"] == "unlinked", note
    assert note[LINK + "reason"] == NO_COMMAND, note
    assert note[LINK + "explanation"] == NO_COMMAND_WHY, note
    for attrs in (piped, note):
        assert not any(k.startswith(BRIDGE) for k in attrs), attrs
    (agent,) = [s for _, s in jaeger.span_named("invoke_agent unlinked")]
    assert not any(k.startswith(LINK) for k in attributes(agent.attributes))  # no tool call
    report = (run.run_dir / "report.md").read_text()
    for words in (WHY[reason], NO_COMMAND_WHY):  # the same words as report.md
        assert words.replace("`", "") in report.replace("`", ""), report
