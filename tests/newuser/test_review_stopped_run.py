"""Ctrl-C in the middle of ``observe``, and a run with no model call: each says what happened.

Met as a new user: Ctrl-C while the agent's tool ran. ``observe`` passed SIGINT on to the
agent, kept what was accepted (the agent's spans flushed on exit, the run directory verifies)
and exited 130 without saying why (it now says it passed SIGINT on), and the review said "no
sentence of the assistant's text after its first action mentions a path, a command, a check
outcome or a number", as if the agent had answered with nothing checkable: it had not answered
at all. And ``review`` of a run whose spans hold no model, agent or tool span printed "no agent
session in this run" but wrote a ``review.md`` holding only the record counts. A real
``observe`` of real OpenTelemetry SDK agents, interrupted the way a terminal does it (SIGINT to
``observe``'s process group).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from cli_support import run_cli
from waiting import wait_until

from otel_bridge.review.claims import NO_LATER_TEXT
from otel_bridge.review.render import NO_SESSION

AGENT = """
import json, subprocess, sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "slow-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")
with tracer.start_as_current_span("invoke_agent slow") as agent:
    agent.set_attribute("gen_ai.operation.name", "invoke_agent")
    with tracer.start_as_current_span("chat scripted") as chat:
        chat.set_attribute("gen_ai.operation.name", "chat")
        parts = [{"type": "text", "content": "I will write started.txt, then wait."}]
        out = [{"role": "assistant", "parts": parts, "finish_reason": "tool_calls"}]
        chat.set_attribute("gen_ai.output.messages", json.dumps(out))
    with tracer.start_as_current_span("execute_tool run_command") as call:
        call.set_attribute("gen_ai.operation.name", "execute_tool")
        call.set_attribute("gen_ai.tool.name", "run_command")
        command = "echo > started.txt; sleep 60"
        call.set_attribute("gen_ai.tool.call.arguments", json.dumps({"command": command}))
        subprocess.run(command, shell=True)
    with tracer.start_as_current_span("chat scripted") as chat:
        chat.set_attribute("gen_ai.operation.name", "chat")
        parts = [{"type": "text", "content": "Done: started.txt is written."}]
        out = [{"role": "assistant", "parts": parts, "finish_reason": "stop"}]
        chat.set_attribute("gen_ai.output.messages", json.dumps(out))
"""

PLAIN = """
import subprocess
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "nightly-job"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
with provider.get_tracer("newuser").start_as_current_span("nightly"):
    subprocess.run(["true"])
provider.shutdown()
"""


DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)
"""Exec this interpreter with the remaining arguments, SIGINT at its default action as in a
terminal (a test run started in the background inherits it ignored)."""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


def test_ctrl_c_during_a_tool_keeps_the_run_and_the_review_says_no_answer_came(
    tmp_path: Path,
) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    observe = subprocess.Popen(
        [sys.executable, "-c", DEFAULT_SIGINT, "-m", "otel_bridge", "observe", "-o", "run", "--",
         sys.executable, "agent.py"],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # its own group, as a terminal's foreground job
    )  # fmt: skip
    try:
        wait_until((tmp_path / "started.txt").exists, 120, "the tool to start")
        os.killpg(observe.pid, signal.SIGINT)  # Ctrl-C: observe passes it on to the agent
        out, err = observe.communicate(timeout=120)
    finally:
        if observe.poll() is None:
            os.killpg(observe.pid, signal.SIGKILL)
            observe.wait()
    assert observe.returncode == 130, err
    assert "exit code 130 (after SIGINT, passed on to the command)" in err, err
    run = tmp_path / "run"
    verified = run_cli("verify", str(run), env=_env())
    assert verified.returncode == 0, verified.stdout + verified.stderr
    doc = json.loads((run / "review.json").read_text(encoding="utf-8"))
    (session,) = doc["sessions"]
    assert session["no_claims"] == NO_LATER_TEXT, session
    assert [t["label"] for t in doc["evidence"] if t["type"] == "tool_call"], doc["evidence"]
    assert f"No claims: {NO_LATER_TEXT}." in (run / "review.md").read_text(encoding="utf-8")
    assert f"no claims ({NO_LATER_TEXT})" in out + err


def test_review_md_of_a_run_with_no_agent_session_says_so(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(PLAIN, encoding="utf-8")
    done = run_cli("observe", "-o", "run", "--", sys.executable, "job.py", cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    sentence = NO_SESSION[0].upper() + NO_SESSION[1:] + "."
    review = (tmp_path / "run" / "review.md").read_text(encoding="utf-8")
    assert sentence in review, review  # the review observe wrote
    done = run_cli("review", "run", "-o", "again", cwd=tmp_path, env=_env())
    assert done.returncode == 0, done.stderr
    assert NO_SESSION in done.stdout
    assert sentence in (tmp_path / "again" / "review.md").read_text(encoding="utf-8")
