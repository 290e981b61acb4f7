"""Scripted offline tasks for ``otel-bridge compare``: a data pipeline and a coding task.

No model: the plan of each *variant* is fixed, so a run is reproducible and the dependencies
between its tool calls are known in advance (``gold.json`` lists them, written by hand from the
plans below). Every tool call is an OpenTelemetry GenAI ``execute_tool`` span carrying
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments`` and
``gen_ai.tool.call.result`` (JSON), and runs one real subprocess (``python -c``) that reads and
writes real files in the work directory; ``otel_bridge.instrument`` gives that subprocess the
tool span's ``TRACEPARENT``. The root ``invoke_agent`` span carries the outcome score as
``gen_ai.evaluation.score.value``.

Each run writes a *receipt* (``receipt.json`` in the work directory): the tool calls it made, in
order, with their ids, and the score. Tests compare what otel-bridge reports with it.

Run: ``otel-bridge observe -- python examples/compare/task.py --task pipeline --variant detour
--workdir DIR``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import example_support as support
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

SERVICE_NAME = "compare-task"
AGENT_NAME = "scripted-agent"

tracer = trace.get_tracer("otel-bridge.examples.compare")

# The subprocess each tool runs: (code, argv) -> a JSON result on stdout. Files pass between
# calls through the work directory; values pass through the arguments.
PROGRAMS: dict[str, str] = {
    "fetch_data": """
import csv, json, sys
out = sys.argv[1]
rows = [("north", 120.5), ("south", 80.25), ("east", 99.0), ("north", 10.0), ("west", 42.0)]
with open(out, "w", newline="") as f:
    w = csv.writer(f); w.writerow(["region", "amount"]); w.writerows(rows)
print(json.dumps({"path": out, "rows": len(rows), "columns": ["region", "amount"]}))
""",
    "clean_data": """
import csv, json, sys
src, out = sys.argv[1], sys.argv[2]
with open(src, newline="") as f:
    rows = [r for r in csv.DictReader(f) if float(r["amount"]) >= 20]
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, ["region", "amount"]); w.writeheader(); w.writerows(rows)
print(json.dumps({"cleaned": out, "kept": len(rows)}))
""",
    "inspect_data": """
import csv, json, sys
with open(sys.argv[1], newline="") as f:
    n = sum(1 for _ in csv.DictReader(f))
print(json.dumps({"row_count": n}))
""",
    "lookup_rate": """
import json, sys
print(json.dumps({"currency": sys.argv[1], "rate": 1.0825}))
""",
    "aggregate": """
import csv, json, sys
src, out, rate, fail = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
if fail:
    print(json.dumps({"error": "aggregation worker timed out"})); sys.exit(3)
totals = {}
with open(src, newline="") as f:
    for r in csv.DictReader(f):
        totals[r["region"]] = totals.get(r["region"], 0.0) + float(r["amount"]) * rate
with open(out, "w") as f:
    json.dump(totals, f, sort_keys=True)
print(json.dumps({"summary_file": out, "grand_total": round(sum(totals.values()), 2)}))
""",
    "write_report": """
import json, sys
summary, total, out = sys.argv[1], sys.argv[2], sys.argv[3]
with open(summary) as f:
    totals = json.load(f)
with open(out, "w") as f:
    f.write("# Sales by region\\n\\n")
    for k in sorted(totals):
        f.write(f"- {k}: {totals[k]:.2f}\\n")
    f.write(f"\\nGrand total: {total}\\n")
print(json.dumps({"report": out}))
""",
    "write_code": """
import json, sys
out, fixed = sys.argv[1], sys.argv[2] == "1"
body = "def add(a, b):\\n    return a + b\\n" if fixed else "def add(a, b):\\n    return a - b\\n"
with open(out, "w") as f:
    f.write(body)
print(json.dumps({"module": out, "functions": ["add"]}))
""",
    "search_docs": """
import json, sys
print(json.dumps({"hits": ["operator precedence", "unittest basics"], "query": sys.argv[1]}))
""",
    "run_tests": """
import importlib.util, json, sys
mod_path, log = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("m", mod_path)
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
cases = [((1, 2), 3), ((2, 2), 4), ((0, 5), 5)]
failed = [c for c in cases if m.add(*c[0]) != c[1]]
with open(log, "w") as f:
    f.write(f"{len(cases) - len(failed)} passed, {len(failed)} failed\\n")
print(json.dumps({"test_log": log, "passed": len(cases) - len(failed), "failed": len(failed)}))
""",
    "lint": """
import json, sys
with open(sys.argv[1]) as f:
    long_lines = sum(1 for line in f if len(line) > 79)
print(json.dumps({"lint_warnings": long_lines}))
""",
    "package": """
import json, sys, zipfile
out, files = sys.argv[1], sys.argv[2:]
with zipfile.ZipFile(out, "w") as z:
    for p in files:
        z.write(p, arcname=p.rsplit("/", 1)[-1])
print(json.dumps({"archive": out, "members": len(files)}))
""",
}


class Agent:
    """Runs tool calls as spans and keeps the receipt."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.calls: list[dict[str, Any]] = []

    def path(self, name: str) -> str:
        """An absolute path in the work directory."""
        return str(self.workdir / name)

    def call(self, tool: str, arguments: dict[str, Any], argv: list[str]) -> dict[str, Any]:
        """One ``execute_tool`` span running ``PROGRAMS[tool]`` with ``argv``; its JSON result."""
        call_id = f"call_{len(self.calls) + 1}"
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.arguments": json.dumps(arguments, sort_keys=True),
        }
        with tracer.start_as_current_span(f"execute_tool {tool}", attributes=attributes) as span:
            done = subprocess.run(
                [sys.executable, "-B", "-c", PROGRAMS[tool], *argv],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
            result: dict[str, Any] = json.loads(done.stdout or "{}")
            span.set_attribute("gen_ai.tool.call.result", json.dumps(result, sort_keys=True))
            if done.returncode != 0:
                span.set_status(Status(StatusCode.ERROR, f"exit code {done.returncode}"))
        self.calls.append({"id": call_id, "tool": tool, "exit_code": done.returncode})
        return result


def pipeline(agent: Agent, variant: str) -> float:
    """fetch -> clean -> (inspect) -> rate -> aggregate (retry) -> report."""
    raw = agent.call("fetch_data", {"dataset": "sales_q3"}, [agent.path("raw.csv")])
    source = raw["path"]
    if variant != "skip":
        cleaned = agent.call(
            "clean_data",
            {"source": source, "output": agent.path("clean.csv")},
            [source, agent.path("clean.csv")],
        )
        source = cleaned["cleaned"]
    if variant == "detour":
        agent.call("inspect_data", {"table": source}, [source])
    rate = agent.call("lookup_rate", {"currency": "EUR"}, ["EUR"])["rate"]
    args = {"source": source, "rate": rate}
    argv = [source, agent.path("summary.json"), str(rate)]
    if variant == "retry":
        agent.call("aggregate", args, [*argv, "1"])
    summary = agent.call("aggregate", args, [*argv, "0"])
    agent.call(
        "write_report",
        {"summary_file": summary["summary_file"], "grand_total": summary["grand_total"]},
        [summary["summary_file"], str(summary["grand_total"]), agent.path("report.md")],
    )
    return {"base": 1.0, "detour": 0.9, "skip": 0.6, "retry": 0.8}[variant]


def coding(agent: Agent, variant: str) -> float:
    """write -> (search) -> test -> (rewrite, retest) -> (lint) -> package."""
    module = agent.path("calc.py")
    written = agent.call(
        "write_code", {"module": "calc.py"}, [module, "0" if variant == "retry" else "1"]
    )
    if variant == "detour":
        agent.call("search_docs", {"query": "python add function tests"}, ["python add"])
    log = agent.path("test.log")
    tested = agent.call("run_tests", {"target": written["module"]}, [written["module"], log])
    if variant == "retry":
        written = agent.call("write_code", {"module": "calc.py", "fix": "use +"}, [module, "1"])
        tested = agent.call("run_tests", {"target": written["module"]}, [written["module"], log])
    if variant != "skip":
        agent.call("lint", {"file": written["module"]}, [written["module"]])
    agent.call(
        "package",
        {"files": [written["module"], tested["test_log"]]},
        [agent.path("dist.zip"), written["module"], tested["test_log"]],
    )
    return {"base": 1.0, "detour": 0.95, "skip": 0.7, "retry": 0.75}[variant]


def main(argv: list[str] | None = None) -> int:
    """Run one task variant under one ``invoke_agent`` span; write the receipt."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=("pipeline", "coding"), required=True)
    parser.add_argument("--variant", choices=("base", "detour", "skip", "retry"), default="base")
    parser.add_argument("--workdir", required=True, help="directory for the task's files")
    parser.add_argument("--session", help="gen_ai.conversation.id to state on the agent span")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    agent = Agent(workdir)
    with support.setup_tracing(SERVICE_NAME):
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.agent.id": AGENT_NAME,
        }
        if args.session:
            attributes["gen_ai.conversation.id"] = args.session
        with tracer.start_as_current_span(
            f"invoke_agent {AGENT_NAME}", attributes=attributes
        ) as root:
            score = (
                pipeline(agent, args.variant)
                if args.task == "pipeline"
                else coding(agent, args.variant)
            )
            root.set_attribute("gen_ai.evaluation.score.value", score)
    receipt = {"task": args.task, "variant": args.variant, "calls": agent.calls, "score": score}
    (workdir / "receipt.json").write_text(json.dumps(receipt, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
