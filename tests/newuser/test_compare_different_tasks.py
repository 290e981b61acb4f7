"""``compare`` of runs that share no step says they may not be runs of one task.

Met as a new user: ``compare`` of a run of one agent and a run of another (different tasks)
printed ``compared 2 runs: 2 tools, 5 joined nodes, 5 detours`` and listed every step of both
as a "detour", as if the runs had wandered off one shared path. Nothing is refused (what a
task is, compare cannot know), but when no step of one run joins a step of another it is said.
Real ``observe`` runs of real OpenTelemetry SDK agents, the real command line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cli_support import observed_run, run_cli

from otel_bridge.compare.report import NOTHING_SHARED

AGENT = """
import json, subprocess, sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "task-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")
with tracer.start_as_current_span("invoke_agent task") as agent:
    agent.set_attribute("gen_ai.operation.name", "invoke_agent")
    for tool, argv in json.loads(sys.argv[1]):
        with tracer.start_as_current_span("execute_tool " + tool) as call:
            call.set_attribute("gen_ai.operation.name", "execute_tool")
            call.set_attribute("gen_ai.tool.name", tool)
            call.set_attribute("gen_ai.tool.call.arguments", json.dumps({"argv": argv}))
            subprocess.run(argv, check=True)
provider.shutdown()
"""

LIST = '[["list_files", ["ls"]], ["count", ["true"]]]'
DATE = '[["read_clock", ["date"]], ["tell_host", ["uname"]]]'


def _run(tmp_path: Path, name: str, steps: str) -> Path:
    work = tmp_path / name
    work.mkdir()
    (work / "agent.py").write_text(AGENT, encoding="utf-8")
    return observed_run(work, sys.executable, "agent.py", steps)


def test_runs_sharing_no_step_are_said_to_be_maybe_of_different_tasks(tmp_path: Path) -> None:
    a, b, c = _run(tmp_path, "a", LIST), _run(tmp_path, "b", LIST), _run(tmp_path, "c", DATE)
    done = run_cli("compare", str(a), str(c), "-o", str(tmp_path / "ac"))
    assert done.returncode == 0, done.stderr
    assert NOTHING_SHARED in done.stderr
    assert f"Note: {NOTHING_SHARED}." in (tmp_path / "ac" / "compare.md").read_text()
    done = run_cli("compare", str(a), str(b), "-o", str(tmp_path / "ab"))
    assert done.returncode == 0, done.stderr
    assert NOTHING_SHARED not in done.stderr
    assert NOTHING_SHARED not in (tmp_path / "ab" / "compare.md").read_text()
