"""``review`` finds the claim a model's answer states, whichever instrumentor recorded the answer.

An agent traced as its instrumentor's users trace it: the real ``openai`` client instrumented by
OpenInference (``openinference-instrumentation-openai``: AGENT and TOOL spans of the application,
the instrumentor's LLM span with ``llm.output_messages.<i>.message.*``) or by OpenLLMetry
(traceloop's ``opentelemetry-instrumentation-openai``, the application's spans typed by
``traceloop.span.kind`` as its SDK's decorators type them; the latest release writes
``gen_ai.output.messages``, an older one the flattened ``gen_ai.completion.<i>.*`` on a span that
states only ``llm.request.type``). Its tool writes ``notes.txt`` in a child process, then it asks
the model, whose answer (the fake OpenAI server on loopback) says so. Under the real ``observe``,
the review reads that answer and supports its claim by the observed write.

Each instrumentor is installed from PyPI for the agent process only
(:func:`fake_openai.pip_site`); the test skips when pip cannot get it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import run_cli
from fake_openai import OPENINFERENCE, OPENLLMETRY, OPENLLMETRY_LEGACY, fake_openai, pip_site

pytest.importorskip("openai", reason="needs the openai client (the examples extra)")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

ANSWER = "I wrote notes.txt with the counts."

AGENT = """
import subprocess, sys
sys.path.insert(0, sys.argv[3])
from openai import OpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

port, convention = sys.argv[1], sys.argv[2]
provider = TracerProvider(resource=Resource.create({"service.name": "notes-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
if convention == "openinference":
    from openinference.instrumentation.openai import OpenAIInstrumentor
    agent = {"openinference.span.kind": "AGENT", "agent.name": "notes"}
    tool = {"openinference.span.kind": "TOOL", "tool.name": "write_notes"}
else:
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    agent = {"traceloop.span.kind": "agent", "traceloop.entity.name": "notes"}
    tool = {"traceloop.span.kind": "tool", "traceloop.entity.name": "write_notes"}
OpenAIInstrumentor().instrument()
tracer = trace.get_tracer("notes-agent")
client = OpenAI(base_url="http://127.0.0.1:" + port + "/v1", api_key="test")
with tracer.start_as_current_span("notes", attributes=agent):
    with tracer.start_as_current_span("write_notes", attributes=tool):
        subprocess.run([sys.executable, "-c", "open('notes.txt', 'w').write('3')"], check=True)
    client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "count the files into notes"}]
    )
provider.shutdown()
"""

SITES = {
    "openinference": (OPENINFERENCE, "openinference/instrumentation/openai"),
    "openllmetry": (OPENLLMETRY, "opentelemetry/instrumentation/openai"),
    "openllmetry_legacy": (OPENLLMETRY_LEGACY, "opentelemetry/instrumentation/openai"),
}
"""What each case installs, and a path that exists once it is installed."""

RECORDS = {
    "openinference": "llm.output_messages.0.message.content",
    "openllmetry": "gen_ai.output.messages",
    "openllmetry_legacy": "gen_ai.completion.0.content",
}
"""Where each instrumentor puts the answer (checked in the run's spans, so the case tests the
convention it names)."""


@pytest.fixture
def model_port() -> Iterator[int]:
    """The fake OpenAI server, answering :data:`ANSWER`."""
    with fake_openai(ANSWER) as port:
        yield port


@pytest.mark.parametrize("case", list(SITES))
def test_the_review_reads_the_answer_the_instrumentor_recorded(
    tmp_path: Path, model_port: int, case: str
) -> None:
    site = pip_site(*SITES[case])
    convention = "openinference" if case == "openinference" else "openllmetry"
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    command = (sys.executable, "agent.py", str(model_port), convention, site)
    done = run_cli("observe", "-o", "run", "--", *command, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    spans = "\n".join(p.read_text(encoding="utf-8") for p in run.glob("*.jsonl"))
    assert RECORDS[case] in spans, "the instrumentor did not record the answer where expected"
    doc = json.loads((run / "review.json").read_text(encoding="utf-8"))
    assert {c["text"]: c["status"] for c in doc["claims"]} == {ANSWER: "supported"}, doc
    (claim,) = doc["claims"]
    (mention,) = claim["mentions"]
    assert (mention["type"], mention["text"], mention["role"]) == ("path", "notes.txt", "written")
    (artifact,) = mention["evidence"]
    assert artifact.endswith("/notes.txt"), artifact
    assert f"{ANSWER}" in (run / "review.md").read_text(encoding="utf-8")
