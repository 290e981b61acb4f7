"""The compare view's per-run metrics are a table a user reads, not JSON text.

A new user's comparison of two real runs showed each run's metrics as one line of raw text
(``cost=null, endpoints_as={"attempted":0,"connected":1}, ...``). They are now a table with a
row per metric and a column per run: null is "unknown", a nested object's keys are rows of
their own below it, numbers are right-aligned. Real ``observe``, ``compare`` and ``view
--export``, read in Chromium.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import observed_run, run_cli, same_imports_env

from viewer.viewer_support import wait_ready

pytestmark = pytest.mark.slow

AGENT = """
import json, os, subprocess
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "metrics-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")
with tracer.start_as_current_span("execute_tool run_command") as call:
    call.set_attribute("gen_ai.operation.name", "execute_tool")
    call.set_attribute("gen_ai.tool.name", "run_command")
    call.set_attribute("gen_ai.tool.call.arguments", json.dumps({"command": "true"}))
    subprocess.run(["true"], check=True)
provider.shutdown()
"""


def test_metrics_are_a_table_with_unknowns_and_nested_rows(page: Any, tmp_path: Path) -> None:
    runs = []
    for name in ("a", "b"):
        work = tmp_path / name
        work.mkdir()
        (work / "agent.py").write_text(AGENT, encoding="utf-8")
        runs.append(str(observed_run(work, sys.executable, "agent.py")))
    env = same_imports_env()
    out = tmp_path / "cmp"
    done = run_cli("compare", *runs, "-o", str(out), "--no-ablation", env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    metrics = [r["metrics"] for r in doc["runs"]]
    html = tmp_path / "compare.html"
    done = run_cli("view", str(out / "compare.json"), "--export", str(html), env=env)
    assert done.returncode == 0, done.stderr
    page.goto(html.as_uri())
    wait_ready(page)
    assert "=" not in page.inner_text("#ob-runs tbody")  # no key=value text
    heads = page.eval_on_selector_all("#ob-runs thead th", "ths => ths.map(t => t.innerText)")
    assert heads[0] == "metric"
    assert [h.split("\n")[0] for h in heads[1:]] == [r["id"] for r in doc["runs"]]
    rows = page.eval_on_selector_all(
        "#ob-runs tbody tr",
        "trs => trs.map(tr => [tr.dataset.metric, [...tr.cells].map(c => c.innerText.trim())])",
    )
    table = dict(rows)
    for metric in ("cost", "score"):  # null in both runs: said as unknown
        assert all(m[metric] is None for m in metrics), metrics
        assert table[metric] == [metric, "unknown", "unknown"], table
    # a nested object: a row naming it, then a row per key, indented below it
    assert table["endpoints_as"] == ["endpoints_as", "", ""], table
    for key in ("attempted", "connected"):
        values = [str(m["endpoints_as"][key]) for m in metrics]
        assert table[f"endpoints_as.{key}"] == [key, *values], table
    assert table["tokens.input"] == ["input", "unknown", "unknown"], table
    indent = "e => parseFloat(getComputedStyle(e).paddingLeft)"
    top = page.eval_on_selector('#ob-runs tr[data-metric="endpoints_as"] th', indent)
    below = page.eval_on_selector('#ob-runs tr[data-metric="endpoints_as.connected"] th', indent)
    assert below > top
    assert table["tool_calls"] == ["tool_calls", "1", "1"], table
    align = page.eval_on_selector(
        '#ob-runs tr[data-metric="tool_calls"] td', "e => getComputedStyle(e).textAlign"
    )
    assert align == "right"
