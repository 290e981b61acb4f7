"""Issue 11, reproduction 8: a first run that answers.

A real agent with three tool calls (``examples/plain_otel_agent.py``: ``sleep 0.3``, a file write
inside the agent, ``cp``) under ``observe``: the graph is small (interpreter and library reads
folded into one node per process), the agent's process is named by what it runs, not by the
gate, ``report.md`` says which tool call ran which process and wrote which file, and what could
not be linked, in plain words; ``-o`` refuses to overwrite a previous run unless ``--replace``.
Also: ``otel-bridge graph ... | head`` ends without a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from observe_support import observe_argv

from otel_bridge import rundir
from otel_bridge.graph import dump
from otel_bridge.graph.fold import KIND, runtime_read_class
from otel_bridge.graph.summary import summarize

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plain_otel_agent.py"


def _observe(
    tmp_path: Path, *cmd: str, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        observe_argv(tmp_path, *cmd, extra=extra),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _graph(tmp_path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((tmp_path / "run" / rundir.GRAPH).read_text())
    return doc


@pytest.mark.slow
def test_three_tool_calls_answer_in_the_report_and_a_small_graph(tmp_path: Path) -> None:
    """The plain agent's run: folded graph, agent labelled by its own image, report rows."""
    result = _observe(tmp_path, sys.executable, str(EXAMPLE))
    assert result.returncode == 0, result.stderr
    doc = _graph(tmp_path)
    kinds = doc["summary"]["nodes_by_kind"]
    assert kinds["tool_call"] == 3
    assert kinds[KIND] >= 1  # the interpreter's reads are one node per process
    assert doc["summary"]["nodes"] < 80, kinds  # was 579 with 561 .pyc/.so files
    files = [n["id"][5:] for n in doc["nodes"] if n["kind"] == "file"]
    assert not [f for f in files if f.endswith((".pyc", ".so"))]
    assert f"{tmp_path}/agent-notes.bak" in files  # written files are never folded
    agent_pids = {
        e["target"]
        for e in doc["edges"]
        if e["relation"] == "correlated_with_process" and e["source"].startswith("agent:")
    }
    assert len(agent_pids) == 1
    agent = next(n for n in doc["nodes"] if n["id"] in agent_pids)
    assert agent["label"].startswith("python")  # not "dash"/"sh": the gate exec'd the agent
    assert agent["facts"]["argv"][-1] == str(EXAMPLE)

    report = (tmp_path / "run" / "report.md").read_text()
    assert "| run_command (call_1): `sleep 0.3` |" in report
    assert "`sleep 0.3` | 0 | it inherited the call's trace context" in report
    assert f"{tmp_path}/agent-notes.bak (" in report  # cp's write, on cp's row
    assert "write_file (call_2) declared no command; no process was linked" in report
    assert "## Not linked, and why" in report
    assert "exact." not in report  # no counter jargon
    assert "skip." not in report
    assert "## Tool calls" in result.stderr  # printed too
    assert str(tmp_path / "run" / "report.md") in result.stderr

    # -o refuses the previous run; --replace replaces it, --keep-runtime-reads keeps the files
    again = _observe(tmp_path, "true")
    assert again.returncode == 2
    assert "not empty" in again.stderr
    assert "--replace" in again.stderr
    assert _graph(tmp_path)["summary"]["nodes_by_kind"]["tool_call"] == 3  # untouched
    cmd = (sys.executable, "-c", "import json")
    kept = _observe(tmp_path, *cmd, extra=("--replace", "--keep-runtime-reads"))
    assert kept.returncode == 0, kept.stderr
    doc = _graph(tmp_path)
    assert "tool_call" not in doc["summary"]["nodes_by_kind"]
    assert KIND not in doc["summary"]["nodes_by_kind"]
    assert any(
        n["kind"] == "file" and runtime_read_class(n["id"][5:]) == "python bytecode"
        for n in doc["nodes"]
    )


def test_replace_refuses_a_directory_that_is_not_a_run(tmp_path: Path) -> None:
    """``--replace`` never deletes a directory that holds no previous run."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "precious.txt").write_text("keep me")
    result = _observe(tmp_path, "true", extra=("--replace",))
    assert result.returncode == 2
    assert "not a run directory" in result.stderr
    assert (tmp_path / "run" / "precious.txt").read_text() == "keep me"


def test_graph_into_a_closed_pipe_ends_without_a_traceback(tmp_path: Path) -> None:
    """``otel-bridge graph FILE | head -1``: the reader leaves, the command ends quietly."""
    nodes: list[dict[str, Any]] = [
        {
            "id": f"file:/srv/data/{i:05d}.csv",
            "kind": "file",
            "label": f"/srv/data/{i:05d}.csv",
            "key": f"file:/srv/data/{i:05d}.csv",
            "facts": None,
            "channels": ["os"],
            "backends": ["linux"],
            "attrs": {},
            "first_seen": None,
            "last_seen": None,
            "logical_count": 1,
            "evidence_count": 1,
        }
        for i in range(1500)
    ]
    doc = {
        "format": "otel-bridge.graph",
        "version": 2,
        "run": {},
        "nodes": nodes,
        "edges": [],
        "summary": summarize(nodes, [], {}, {}, 1500),
    }
    dump(doc, tmp_path / "graph.json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge", "graph", str(tmp_path / "graph.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()  # what `head -1` does after its line
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err, err
    assert "BrokenPipe" not in err, err
