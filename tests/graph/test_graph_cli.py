"""`otel-bridge graph` and `otel-bridge export` on a real graph.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest
from cli_support import run_cli
from graph_scenario import scenario_graph

from otel_bridge.cli import main
from otel_bridge.graph import dump, load


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    """The scenario graph written to a file."""
    path = tmp_path / "graph.json"
    dump(scenario_graph(), path)
    return path


def test_table_lists_nodes_edges_and_coverage(
    graph_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without filters the table shows every node, edge and the coverage counts."""
    assert main(["graph", str(graph_file)]) == 0
    out = capsys.readouterr().out
    assert "nodes (" in out
    assert "RELATION" in out
    assert "correlated_with_process" in out
    assert "collection.network.degraded" in out


def test_filters_and_json(graph_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--relation/--causal/--grade filters; --json prints a valid graph document."""
    args = ["graph", str(graph_file), "--relation", "opened", "--relation", "spawned", "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {e["relation"] for e in doc["edges"]} == {"opened", "spawned"}
    assert main(["graph", str(graph_file), "--causal", "false", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {e["causal"] for e in doc["edges"]} == {False}
    assert main(["graph", str(graph_file), "--grade", "D", "--kind", "tool_call", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [e["relation"] for e in doc["edges"]] == ["correlated_with_process"]
    assert {n["kind"] for n in doc["nodes"]} == {"tool_call"}


def test_path_query(graph_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--path prints bounded paths with relations, or JSON; no path exits 1. A hop over an
    inferred link says so with its grade (it read as an observed link)."""
    args = ["graph", str(graph_file), "--path", "agent:agents:planner", "file:/tmp/data.txt"]
    assert main([*args, "--max-depth", "4"]) == 0
    out = capsys.readouterr().out
    assert "-[invoked]->" in out
    assert "-[correlated_with_process (inferred, D)]->" in out
    assert main([*args, "--max-depth", "4", "--json"]) == 0
    paths = json.loads(capsys.readouterr().out)["paths"]
    assert paths[0]["nodes"][0] == "agent:agents:planner"
    assert len(paths[0]["edges"]) == len(paths[0]["nodes"]) - 1
    assert main([*args, "--max-depth", "1"]) == 1
    assert "no path" in capsys.readouterr().out


def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing or invalid file, or an unknown node, is a one-line error and exit code 2."""
    assert main(["graph", str(tmp_path / "none.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "x"}')
    assert main(["graph", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("otel-bridge: graph.json does not match its schema")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("fmt", ["prov", "graphml", "json"])
def test_export_formats(graph_file: Path, tmp_path: Path, fmt: str) -> None:
    """export writes each format (mode 0600) and the result parses."""
    out = tmp_path / f"out.{fmt}"
    assert main(["export", str(graph_file), "--format", fmt, "-o", str(out)]) == 0
    assert out.stat().st_mode & 0o777 == 0o600
    if fmt == "prov":
        doc = json.loads(out.read_text())
        assert {"prefix", "agent", "activity", "entity"} <= set(doc)
    elif fmt == "graphml":
        assert nx.read_graphml(out, force_multigraph=True).number_of_nodes() > 0
    else:
        assert load(out) == load(graph_file)


@pytest.mark.parametrize("fmt", ["prov", "graphml", "json"])
def test_export_dash_writes_standard_output(graph_file: Path, tmp_path: Path, fmt: str) -> None:
    """``-o -`` writes the document to standard output, as Unix tools do (it used to write a
    file named ``-``), and the ``wrote`` line to standard error, so stdout pipes clean."""
    proc = run_cli("export", str(graph_file), "--format", fmt, "-o", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "-").exists()
    assert proc.stderr.startswith(f"wrote standard output ({fmt}, "), proc.stderr
    if fmt == "prov":
        assert {"prefix", "agent", "activity", "entity"} <= set(json.loads(proc.stdout))
    elif fmt == "graphml":
        graphml = tmp_path / "from-stdout.graphml"
        graphml.write_text(proc.stdout, encoding="utf-8")
        assert nx.read_graphml(graphml, force_multigraph=True).number_of_nodes() > 0
    else:
        out = tmp_path / "from-stdout.json"
        out.write_text(proc.stdout, encoding="utf-8")
        assert load(out) == load(graph_file)


def test_console_script_runs(graph_file: Path) -> None:
    """The installed entry point runs `graph --json` in a real subprocess."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_bridge",
            "graph",
            str(graph_file),
            "--kind",
            "agent",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert [n["kind"] for n in json.loads(proc.stdout)["nodes"]] == ["agent"]
