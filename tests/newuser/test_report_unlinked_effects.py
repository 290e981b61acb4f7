"""``report.md`` says what a process linked to no tool call changed, and what the agent did.

A new user's agent written against the plain OpenTelemetry SDK (no context propagation into
subprocesses) runs a shell command in a tool span and writes a file itself. Nothing links the
shell to the call (no ``TRACEPARENT``; a command with ``;`` is not bridged), so the report
listed it under "Not linked" with its argv and exit code only: the file the shell wrote and
the file the agent wrote, both observed, were nowhere in the report (only in graph.json). Each
unlinked process's line now names what it changed and reached; the agent's line what it
changed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cli_support import observed_run

AGENT = """
import subprocess
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "unlinked-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")
with tracer.start_as_current_span("invoke_agent unlinked") as agent:
    agent.set_attribute("gen_ai.operation.name", "invoke_agent")
    agent.set_attribute("gen_ai.agent.name", "unlinked")
    with tracer.start_as_current_span("execute_tool run_command") as call:
        command = "echo hi > from-shell.txt; true"
        call.set_attribute("gen_ai.operation.name", "execute_tool")
        call.set_attribute("gen_ai.tool.name", "run_command")
        call.set_attribute("gen_ai.tool.call.id", "call-1")
        call.set_attribute("gen_ai.tool.call.arguments", '{"command": "%s"}' % command)
        subprocess.run(["sh", "-c", command], check=True)
    with open("from-agent.txt", "w") as f:
        f.write("x")
provider.shutdown()
"""


def test_unlinked_processes_and_the_agent_say_what_they_changed(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    run = observed_run(tmp_path, sys.executable, "agent.py")
    assert (tmp_path / "from-shell.txt").exists()
    report = (run / "report.md").read_text(encoding="utf-8")
    lines = report.splitlines()
    shell = [line for line in lines if "`sh -c echo hi > from-shell.txt; true`" in line]
    assert len(shell) == 1, report
    assert "ran, but no tool call is linked to it; it changed " in shell[0], report
    assert f"{tmp_path}/from-shell.txt (" in shell[0], report
    # Its spans state no process.pid (the SDK's default resource): the agent's process is one
    # of the unlinked ones, or the line of the process that sent its spans.
    agent = [
        line
        for line in lines
        if line.startswith(("- pid", "Spans sent by pid")) and f"{sys.executable} agent.py`" in line
    ]
    assert len(agent) == 1, report
    assert f"{tmp_path}/from-agent.txt (" in agent[0], report
