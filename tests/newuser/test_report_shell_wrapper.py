"""The shell a tool ran its declared command in is shown with the call, not as unlinked.

A new user's agent tool ran ``subprocess.run("sleep 0.3", shell=True)`` under ``observe``. The
correlator linked ``sleep 0.3`` to the call (an inferred singleton bridge, grade D) and not its
parent ``/bin/sh -c sleep 0.3`` (the shell's argv matches no declared head or tail), and the
report listed that shell under "Not linked" ("no tool call is linked to it"), although its argv
is exactly ``sh -c <the declared command>`` and it forked the linked process. The report now
shows the shell in the call's rows, saying why (that argv and the fork record) and at the
weakest grade of the links it goes through: never stronger than the inferred bridge.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cli_support import observed_run

AGENT = """
import json
import os
import subprocess
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

resource = Resource.create({"service.name": "shell-agent", "process.pid": os.getpid()})
provider = TracerProvider(resource=resource)
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")

with tracer.start_as_current_span("invoke_agent shell") as agent:
    agent.set_attribute("gen_ai.operation.name", "invoke_agent")
    agent.set_attribute("gen_ai.agent.name", "shell")
    with tracer.start_as_current_span("execute_tool run_command") as call:
        call.set_attribute("gen_ai.operation.name", "execute_tool")
        call.set_attribute("gen_ai.tool.name", "run_command")
        call.set_attribute("gen_ai.tool.call.id", "call-1")
        call.set_attribute("gen_ai.tool.call.arguments", json.dumps({"command": "sleep 0.3"}))
        subprocess.run("sleep 0.3", shell=True, check=True)
provider.shutdown()
"""


def test_the_shell_running_the_declared_command_is_shown_with_the_call(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    run = observed_run(tmp_path, sys.executable, "agent.py")
    report = (run / "report.md").read_text(encoding="utf-8")
    tools, _, unlinked = report.partition("## Not linked, and why")
    assert "-c sleep 0.3`" not in unlinked, report
    rows = [r for r in tools.splitlines() if r.startswith("| ")][2:]
    shell = next(r for r in rows if "-c sleep 0.3`" in r)
    child = next(r for r in rows if "`sleep 0.3`" in r and "-c" not in r)
    assert rows.index(shell) < rows.index(child), report  # the parent first
    cells = [c.strip() for c in shell.strip("|").split("|")]
    child_cells = [c.strip() for c in child.strip("|").split("|")]
    assert child_cells[4] == "D", report
    assert "inferred" in child_cells[3], report
    # why: its argv is the declared command under `sh -c`, and it forked the linked process
    child_pid = child_cells[1].split()[1]
    assert "`sh -c` with the call's declared command" in cells[3], report
    assert f"the parent of pid {child_pid} (fork record)" in cells[3], report
    assert "whose link is inferred: a likely match, not proof" in cells[3], report
    assert cells[4] == "D", report  # never stronger than the inferred bridge it goes through
    assert cells[2] == "0", report  # its exit code
