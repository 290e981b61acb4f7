"""What a new user types after ``observe``: the run directory it printed, given to the readers.

``observe`` prints ``run dir: DIR``; ``view`` and ``review`` take DIR, so ``graph`` and
``export`` take it too (its graph.json). A filter value that matches nothing in the graph (a
typo such as ``--kind proces``) is said on stderr rather than answered with a silent empty
table, and ``review`` given the graph.json says it wants the directory. One real ``observe``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_cli


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("observed")
    done = run_cli("observe", "-o", "run", "--", "sh", "-c", "echo x > out.txt", cwd=work)
    assert done.returncode == 0, done.stderr
    return work / "run"


def test_graph_and_export_take_the_run_directory(run_dir: Path) -> None:
    """``graph DIR`` reads DIR/graph.json; ``export DIR`` converts it."""
    done = run_cli("graph", str(run_dir), "--kind", "process", "--json", cwd=run_dir)
    assert done.returncode == 0, done.stderr
    nodes = json.loads(done.stdout)["nodes"]
    assert nodes
    assert {n["kind"] for n in nodes} == {"process"}
    out = run_dir.parent / "prov.json"
    done = run_cli("export", str(run_dir), "--format", "prov", "-o", str(out), cwd=run_dir)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["activity"]


def test_a_directory_without_a_graph_is_one_clear_error(tmp_path: Path) -> None:
    """Not a run directory: exit 2 and one line, no traceback."""
    done = run_cli("graph", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"otel-bridge: {tmp_path}: a directory without graph.json (not a run directory)"
    )


def test_a_filter_value_absent_from_the_graph_is_said(run_dir: Path) -> None:
    """A misspelt kind answers empty, and stderr names it and the kinds that are there."""
    done = run_cli("graph", str(run_dir), "--kind", "proces", "--relation", "executed", cwd=run_dir)
    assert done.returncode == 0, done.stderr
    assert "nodes (0)" in done.stdout
    assert "no kind 'proces' in this graph (" in done.stderr
    assert "process" in done.stderr.split("no kind 'proces' in this graph (", 1)[1]
    assert "relation 'executed'" not in done.stderr  # present: nothing said


def test_review_of_the_graph_file_asks_for_the_directory(run_dir: Path) -> None:
    """``review DIR/graph.json`` says to give the directory (it said 'graph.json has no
    graph.json')."""
    done = run_cli("review", str(run_dir / "graph.json"), cwd=run_dir)
    assert done.returncode == 2
    assert "is not a run directory (give the directory)" in done.stderr


@pytest.mark.parametrize("fmt", ["prov", "graphml", "json"])
def test_export_refuses_an_output_that_would_lose_evidence(run_dir: Path, fmt: str) -> None:
    """``export -o`` a directory (it raised IsADirectoryError), the graph being exported, or a
    file in the run directory (``export RUN --format prov -o RUN/graph.json`` replaced the run's
    graph, and any new file there fails ``verify``): one clear line, nothing written, the run
    still verifies."""
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    targets = {
        str(run_dir): "is a directory; -o names the file to write",
        str(run_dir / "graph.json"): "is the graph being exported",
        str(run_dir / "graph.prov.json"): f"is inside the run directory {run_dir}",
    }
    for target, said in targets.items():
        done = run_cli("export", str(run_dir), "--format", fmt, "-o", target, cwd=run_dir)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"otel-bridge: {target}: {said}"), done.stderr
        assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before
    assert run_cli("verify", str(run_dir), cwd=run_dir).returncode == 0
