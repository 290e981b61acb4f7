"""Each unlinked tool call's line in ``report.md`` says its own reason, not a generic one.

A new user's plain OpenTelemetry SDK agent ran four tool calls no process was linked to: a
shell command with ``;``, a command that never ran, a ``write_file`` with no command, and a
command with a redirection (which the report called a chain or pipe). The
report said the same "ran inside the agent's own process, or ... matched nothing
unambiguously" for each, while the correlator had recorded why (as counts in summary.json:
``skip.unsupported_command.control_operator``, ``skip.no_candidate``). The correlator now sets
the reason on each skipped call's node (``correlate.skip``), and the report says it in words.
"""

from __future__ import annotations

import json
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

resource = Resource.create({"service.name": "why-agent", "process.pid": os.getpid()})
provider = TracerProvider(resource=resource)
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")


def tool(name, call_id, command=None, run=None):
    with tracer.start_as_current_span(f"execute_tool {name}") as call:
        call.set_attribute("gen_ai.operation.name", "execute_tool")
        call.set_attribute("gen_ai.tool.name", name)
        call.set_attribute("gen_ai.tool.call.id", call_id)
        if command is not None:
            call.set_attribute("gen_ai.tool.call.arguments", json.dumps({"command": command}))
        if run is not None:
            run()


with tracer.start_as_current_span("invoke_agent why") as agent:
    agent.set_attribute("gen_ai.operation.name", "invoke_agent")
    agent.set_attribute("gen_ai.agent.name", "why")
    chained = "echo hi > a.txt; true"
    tool("run_command", "call-1", chained, lambda: subprocess.run(["sh", "-c", chained]))
    tool("run_command", "call-2", "ls /no-such-dir-for-otel-bridge")  # the tool never ran it
    tool("write_file", "call-3", None, lambda: open("b.txt", "w").write("x"))
    redirect = "echo hi > c.txt"
    tool("run_command", "call-4", redirect, lambda: subprocess.run(["sh", "-c", redirect]))
provider.shutdown()
"""


def test_each_unlinked_call_says_its_own_reason(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    run = observed_run(tmp_path, sys.executable, "agent.py")
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert summary["correlation"]["skip.unsupported_command.control_operator"] == 2, summary
    assert summary["correlation"]["skip.no_candidate"] == 1, summary
    report = (run / "report.md").read_text(encoding="utf-8")
    lines = {x.split(" ", 3)[2]: x for x in report.splitlines() if x.startswith("- run_command")}
    lines |= {x.split(" ", 3)[2]: x for x in report.splitlines() if x.startswith("- write_file")}
    # a redirection is no chain or pipe: the words say which operators (they named only those)
    for call in ("(call-1)", "(call-4)"):
        assert "its command chains, pipes or redirects commands (a shell operator" in lines[call]
        assert "or a redirection such as `>`" in lines[call]
    assert "none running its command started while it ran" in lines["(call-2)"]
    assert "with no command there is nothing to match a process against" in lines["(call-3)"]
    for line in lines.values():
        assert "matched nothing unambiguously" not in line, report
