"""A real ``otel-bridge observe`` of the plain OpenTelemetry agent with a ``graph`` and a
``postgres`` exporter on one evidence pipeline: ``otel-bridge graph --db`` gives back graph.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

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
    run_id: observed-run
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
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    return subprocess.run(
        [sys.executable, "-m", "otel_bridge", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


@pytest.mark.slow
def test_observe_into_postgres_reads_back_graph_json(pg_url: str, tmp_path: Path) -> None:
    """The graph read back by run id (graph rows), and by task (replayed observations), equals
    the graph exporter's graph.json of the same stream, and the run directory's graph.json;
    raw observations and spans are in their partitioned tables, the run row has its service
    (from the spans) and task."""
    config = tmp_path / "store.yaml"
    config.write_text(CONFIG.format(url=pg_url))
    observed = _cli(
        "observe",
        "-c",
        str(config),
        "-o",
        str(tmp_path / "run"),
        "--no-progress",
        "--",
        sys.executable,
        str(REPO / "examples" / "plain_otel_agent.py"),
        cwd=tmp_path,
    )
    assert observed.returncode == 0, observed.stderr
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
    assert spans is not None and spans[0] > 0
    assert stored is not None and stored[0] == expected["summary"]["observations"]
    assert run == ("plain-otel-agent", "plain-agent-demo")
