"""Issue 12, reproduction 3: three ``observe`` runs at once under CPU load, no mislabel.

Three ``otel-bridge observe`` runs of ``examples/plain_otel_agent.py`` (its ``sleep 0.3`` and
``cp`` tool calls are short-lived children) start together while two busy processes load both
cores. In every run's ``graph.json`` each child of the agent is named by what it executed
(``cp (pid)``, ``sleep (pid)``) with its own argv, or its argv is unknown (None, the node then
named by what is known of it, at worst its pid), never the parent's image; an unknown argv is
counted where a reader sees it (the process plane's state in ``report.md``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_bridge import rundir
from otel_bridge.testing import cpu_load

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plain_otel_agent.py"
RUNS = 3


def observe(work: Path) -> subprocess.Popen[str]:
    """``python -m otel_bridge observe`` of the plain agent, writing ``work/run``."""
    work.mkdir()
    argv = [sys.executable, "-m", "otel_bridge", "observe", "-o", str(work / "run")]
    argv += ["--no-progress", "--", sys.executable, str(EXAMPLE)]
    return subprocess.Popen(
        argv, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def children_of_agent(doc: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The agent's process node and the process nodes it spawned."""
    nodes = {n["id"]: n for n in doc["nodes"]}
    agent_ids = {
        e["target"]
        for e in doc["edges"]
        if e["relation"] == "correlated_with_process" and e["source"].startswith("agent:")
    }
    assert len(agent_ids) == 1, agent_ids
    agent = nodes[next(iter(agent_ids))]
    spawned = [
        nodes[e["target"]]
        for e in doc["edges"]
        if e["relation"] == "spawned" and e["source"] == agent["id"]
    ]
    return agent, [n for n in spawned if n["kind"] == "process"]


@pytest.mark.slow
def test_three_concurrent_observe_runs_never_mislabel_children(tmp_path: Path) -> None:
    """Every child of every run: its own image and argv, or argv unknown and said so."""
    with cpu_load():
        procs = [observe(tmp_path / f"w{i}") for i in range(RUNS)]
        errors = [p.communicate(timeout=300)[1] for p in procs]
    results = [(p.returncode, err) for p, err in zip(procs, errors, strict=True)]
    unknown_total = 0
    for i, (code, err) in enumerate(results):
        assert code == 0, err
        run = tmp_path / f"w{i}" / "run"
        doc = json.loads((run / rundir.GRAPH).read_text())
        agent, children = children_of_agent(doc)
        agent_argv = agent["facts"]["argv"]
        assert agent_argv[-1] == str(EXAMPLE)
        assert len(children) >= 2, f"run {i}: the sleep and cp children were not seen"
        for child in children:
            argv = child["facts"]["argv"]
            assert argv != agent_argv, f"run {i}: {child['label']} carries the agent's argv"
            assert not child["label"].startswith("python"), f"run {i}: {child['label']}"
            name = child["label"].split(" (")[0]
            if argv is None:  # unknown (the child exited before its image was read): said so
                unknown_total += 1
                report = (run / "report.md").read_text()
                assert "argv could not be read" in report, f"run {i}: unknown argv unsaid"
                assert name in ("sleep", "cp", str(child["facts"]["pid"])), child["label"]
            else:
                assert name in ("sleep", "cp"), f"run {i}: {child['label']}"
                assert argv[0] == name, f"run {i}: {child['label']} ran {argv}"
    print(f"children with unknown argv over {RUNS} runs: {unknown_total}")
