"""A real ``otel-bridge observe`` of the plain OpenTelemetry agent with a ``graph`` and a
``postgres`` exporter on one evidence pipeline: ``otel-bridge graph --db`` gives back graph.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import run_cli

psycopg = pytest.importorskip("psycopg", reason="needs the postgres extra")

REPO = Path(__file__).resolve().parents[2]
CONFIG = """
receivers:
  otlp:
    protocols:
      grpc: {{endpoint: "127.0.0.1:0"}}
      http: {{endpoint: "127.0.0.1:0"}}
  host:
processors:
  redact:
  normalize:
  correlate:
  grade:
exporters:
  graph:
    output: store-graph.json
    flush_interval: 0
    run: {{runtime_reads: folded}}
  postgres:
    endpoint: {url}
    run_id: {run_id}
    task: plain-agent-demo
    flush_interval: 0.5
    run: {{runtime_reads: folded}}
service:
  pipelines:
    evidence:
      receivers: [otlp, host]
      processors: [redact, normalize, correlate, grade]
      exporters: [graph, postgres]
"""


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command line with this checkout's package first on its path (300 s: an observe)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    return run_cli(*args, cwd=cwd, env=env, timeout=300)


def _observe_into(pg_url: str, tmp_path: Path, run_id: str, out: str) -> None:
    """``observe`` of the plain example into the store as run ``run_id``, run directory ``out``."""
    config = tmp_path / f"{out}.yaml"
    config.write_text(CONFIG.format(url=pg_url, run_id=run_id))
    observed = _cli(
        "observe",
        "-c",
        str(config),
        "-o",
        str(tmp_path / out),
        "--no-progress",
        "--",
        sys.executable,
        str(REPO / "examples" / "plain_otel_agent.py"),
        cwd=tmp_path,
    )
    assert observed.returncode == 0, observed.stderr


@pytest.mark.slow
def test_observe_into_postgres_reads_back_graph_json(pg_url: str, tmp_path: Path) -> None:
    """The graph read back by run id (graph rows), and by task (replayed observations), equals
    the graph exporter's graph.json of the same stream, and the run directory's graph.json;
    raw observations and spans are in their partitioned tables, the run row has its service
    (from the spans) and task."""
    _observe_into(pg_url, tmp_path, "observed-run", "run")
    expected = json.loads((tmp_path / "run" / "store-graph.json").read_text())
    assert expected["summary"]["observations"] > 0
    assert {"sem", "os"} <= set(expected["summary"]["nodes_by_channel"])
    read = _cli("graph", "--db", pg_url, "--run", "observed-run", "--json", cwd=tmp_path)
    assert read.returncode == 0, read.stderr
    assert json.loads(read.stdout) == expected
    by_task = _cli("graph", "--db", pg_url, "--task", "plain-agent-demo", "--json", cwd=tmp_path)
    assert by_task.returncode == 0, by_task.stderr
    assert json.loads(by_task.stdout) == expected
    run_graph = json.loads((tmp_path / "run" / "graph.json").read_text())
    # observe's own evidence pipeline (redact, normalize, correlate, grade) saw the same stream
    assert run_graph == expected
    with psycopg.connect(pg_url) as conn:
        spans = conn.execute("SELECT count(*), min(service) FROM ob_spans").fetchone()
        stored = conn.execute("SELECT count(*) FROM ob_observations").fetchone()
        run = conn.execute("SELECT service, task FROM ob_runs").fetchone()
    assert spans is not None
    assert spans[0] > 0
    assert stored is not None
    assert stored[0] == expected["summary"]["observations"]
    assert run == ("plain-otel-agent", "plain-agent-demo")

    _readers_from_the_store(pg_url, tmp_path)


def _readers_from_the_store(pg_url: str, tmp_path: Path) -> None:
    """review, compare and view read the stored run (written back as a run directory); compare
    refuses one run and compares the task's two runs once a second is stored."""
    reviewed = _cli(
        "review",
        "--db",
        pg_url,
        "--run",
        "observed-run",
        "--quiet",
        "-o",
        str(tmp_path / "db-review"),
        cwd=tmp_path,
    )
    assert reviewed.returncode == 0, reviewed.stderr
    verified = _cli("verify", str(tmp_path / "db-review"), cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    original = _cli(
        "review", str(tmp_path / "run"), "--quiet", "-o", str(tmp_path / "rv"), cwd=tmp_path
    )
    assert original.returncode == 0, original.stderr
    stored_review = json.loads((tmp_path / "db-review" / "review.json").read_text())
    run_review = json.loads((tmp_path / "rv" / "review.json").read_text())
    # The same review but for the run metadata only observe knows (its command, exit code,
    # its own run id and directory).
    assert stored_review["run"]["id"] == "observed-run"
    for review in (stored_review, run_review):
        for field in ("id", "dir", "command", "exit_code"):
            review["run"].pop(field)
    assert stored_review == run_review
    assert stored_review["records"]["os_event"] > 0

    def compare_task() -> subprocess.CompletedProcess[str]:
        args = ("--db", pg_url, "--task", "plain-agent-demo", "-o", str(tmp_path / "cmp"))
        return _cli("compare", *args, "--no-ablation", cwd=tmp_path)

    # compare needs two runs: the one stored run is read (written back and loaded) and the
    # comparison refused, nothing written
    compared = compare_task()
    assert compared.returncode == 2, compared.stderr
    assert "the store's runs selected are 1 run: select two or more" in compared.stderr
    assert not (tmp_path / "cmp").exists()
    # a second run of the task: now the task's two runs are compared from the store
    _observe_into(pg_url, tmp_path, "observed-run-2", "run2")
    compared = compare_task()
    assert compared.returncode == 0, compared.stderr
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert sorted(r["id"] for r in doc["runs"]) == ["observed-run", "observed-run-2"]
    assert all(r["metrics"]["tool_calls"] for r in doc["runs"]), doc["runs"]
    page = tmp_path / "view.html"
    viewed = _cli(
        "view", "--db", pg_url, "--run", "observed-run", "--export", str(page), cwd=tmp_path
    )
    assert viewed.returncode == 0, viewed.stderr
    assert "plain-otel-agent" in page.read_text()
