"""``review`` says why a session has no claims.

Claims are read from the chat spans' ``gen_ai.output.messages``. The official OpenAI
instrumentation records no message content unless asked, and OpenInference writes
``llm.output_messages`` instead, so a new user's real agent got "no claims" from the review
with no word of why, as if the agent had said nothing checkable. The session now says why
(``no_claims`` in review.json, review.md, the printed summary). Two real OpenTelemetry SDK agents
under ``observe``: one whose chat span carries no content, one whose answer mentions nothing
checkable.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from cli_support import run_cli

from otel_bridge.review.claims import NO_MENTION, NO_TEXT

AGENT = """
import json, subprocess, sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "quiet-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")
answer = sys.argv[1]
with tracer.start_as_current_span("invoke_agent quiet") as agent:
    agent.set_attribute("gen_ai.operation.name", "invoke_agent")
    agent.set_attribute("gen_ai.agent.name", "quiet")
    with tracer.start_as_current_span("execute_tool run_command") as call:
        call.set_attribute("gen_ai.operation.name", "execute_tool")
        call.set_attribute("gen_ai.tool.name", "run_command")
        call.set_attribute("gen_ai.tool.call.id", "call-1")
        call.set_attribute("gen_ai.tool.call.arguments", json.dumps({"command": "true"}))
        subprocess.run(["true"])
    with tracer.start_as_current_span("chat scripted") as chat:
        chat.set_attribute("gen_ai.operation.name", "chat")
        chat.set_attribute("gen_ai.request.model", "scripted")
        if answer:
            parts = [{"type": "text", "content": answer}]
            out = [{"role": "assistant", "parts": parts, "finish_reason": "stop"}]
            chat.set_attribute("gen_ai.output.messages", json.dumps(out))
provider.shutdown()
"""


@pytest.mark.parametrize(
    ("answer", "why"), [("", NO_TEXT), ("All good, nothing else to do.", NO_MENTION)]
)
def test_a_session_without_claims_says_why(tmp_path: Path, answer: str, why: str) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = run_cli(
        "observe", "-o", "run", "--", sys.executable, "agent.py", answer, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    (session,) = json.loads((tmp_path / "run" / "review.json").read_text())["sessions"]
    assert session["no_claims"] == why
    assert f"No claims: {why}." in (tmp_path / "run" / "review.md").read_text()
    # printed after the report, on stderr (stdout is the command's own, here empty), in its
    # first clause: review.md has the whole reason (a new user met a 600-character paragraph
    # before observe's summary, mixed into the command's output)
    assert done.stdout == "", done.stdout
    first = why.split(": ", 1)[0]
    assert f"no claims ({first}" in done.stderr, done.stderr
    assert done.stderr.index("## Review (review.md)") > done.stderr.index("## Tool calls")
    (line,) = [x for x in done.stderr.splitlines() if "no claims" in x]
    assert len(line) < 250, line
