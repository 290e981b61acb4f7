"""``compare`` reads tokens and latency whichever instrumentor recorded the model calls.

Met as a new user: an agent on the real ``openai`` client instrumented by OpenInference, observed
three times and compared, showed ``tokens in/out unknown/unknown`` although every LLM span
stated ``llm.token_count.prompt``/``completion``, and a ``latency ms`` of its tool calls' extent
(10 ms) instead of its AGENT span's (200 ms): compare read only the GenAI ``gen_ai.usage.*`` and
``invoke_agent``. The agent as its instrumentor's users write it (OpenInference, OpenLLMetry
latest, and an older OpenLLMetry whose model spans state no ``gen_ai.operation.name``, only
``llm.request.type``), two model calls to the fake OpenAI server on loopback (which
answers 1 prompt and 1 completion token each), run twice under the real ``observe``.

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

AGENT = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[3])
from openai import OpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

port, convention = sys.argv[1], sys.argv[2]
provider = TracerProvider(resource=Resource.create({"service.name": "ls-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(provider)
if convention == "openinference":
    from openinference.instrumentation.openai import OpenAIInstrumentor
    agent = {"openinference.span.kind": "AGENT", "agent.name": "ls"}
    tool = {"openinference.span.kind": "TOOL", "tool.name": "run_command",
            "input.value": '{"command": "ls"}'}
else:
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    agent = {"traceloop.span.kind": "agent", "traceloop.entity.name": "ls"}
    tool = {"traceloop.span.kind": "tool", "traceloop.entity.name": "run_command"}
OpenAIInstrumentor().instrument()
tracer = trace.get_tracer("ls-agent")
client = OpenAI(base_url="http://127.0.0.1:" + port + "/v1", api_key="test")
ask = [{"role": "user", "content": "list the directory"}]
with tracer.start_as_current_span("ls", attributes=agent):
    client.chat.completions.create(model="scripted", messages=ask)
    with tracer.start_as_current_span("run_command", attributes=tool):
        subprocess.run(["ls"], check=True, capture_output=True)
    client.chat.completions.create(model="scripted", messages=ask)
provider.shutdown()
"""

SITES = {
    "openinference": (OPENINFERENCE, "openinference/instrumentation/openai"),
    "openllmetry": (OPENLLMETRY, "opentelemetry/instrumentation/openai"),
    "openllmetry_legacy": (OPENLLMETRY_LEGACY, "opentelemetry/instrumentation/openai"),
}
"""What each case installs, and a path that exists once it is installed."""

MARKS = {
    "openinference": "llm.token_count.prompt",
    "openllmetry": "gen_ai.operation.name",
    "openllmetry_legacy": "llm.request.type",
}
"""What makes each instrumentor's model span one, or states its tokens, in its own convention
(checked in the run's spans, so the case tests the convention it names)."""


@pytest.fixture
def model_port() -> Iterator[int]:
    """The fake OpenAI server."""
    with fake_openai("I listed it.") as port:
        yield port


def _agent_span_ms(run: Path) -> float:
    """The duration of the run's one agent span (named ``ls``), from ``sem.jsonl``."""
    for line in (run / "sem.jsonl").read_text(encoding="utf-8").splitlines():
        for resource in json.loads(line).get("resourceSpans", ()):
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    if span["name"] == "ls":
                        end, start = int(span["endTimeUnixNano"]), int(span["startTimeUnixNano"])
                        return (end - start) / 1e6
    raise AssertionError(f"no agent span in {run}")


@pytest.mark.parametrize("case", list(SITES))
def test_compare_reads_each_instrumentors_tokens_and_agent_span(
    tmp_path: Path, model_port: int, case: str
) -> None:
    site = pip_site(*SITES[case])
    convention = "openinference" if case == "openinference" else "openllmetry"
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    command = (sys.executable, "agent.py", str(model_port), convention, site)
    runs = []
    for name in ("a", "b"):
        done = run_cli(
            "observe", "--no-review", "-o", name, "--", *command, cwd=tmp_path, env=env,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        runs.append(tmp_path / name)
    assert MARKS[case] in (runs[0] / "sem.jsonl").read_text(encoding="utf-8")
    done = run_cli("compare", "a", "b", "-o", "cmp", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text(encoding="utf-8"))
    assert len(doc["runs"]) == 2
    for entry, run in zip(doc["runs"], runs, strict=True):
        metrics = entry["metrics"]
        assert metrics["tokens"] == {"input": 2, "output": 2}, metrics
        assert metrics["latency_ms"] == pytest.approx(_agent_span_ms(run), abs=0.01), metrics
    assert "| 2/2 |" in (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
