"""``compare`` given what is not a run directory says what to give instead.

Met as a new user: ``otel-bridge compare runs -o out`` (the folder holding the runs) answered
``cannot read runs/manifest.json: No such file or directory``, and a mistyped run directory or
a ``graph.json`` the same way, naming a file the user never mentioned. Real ``observe`` runs,
the real command line.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cli_support import observed_run, run_cli


def test_compare_names_what_is_wrong_with_each_path(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in ("a", "b"):
        work = tmp_path / f"work-{name}"
        work.mkdir()
        observed_run(work, sys.executable, "-c", "pass").rename(runs / name)
    expected = {
        str(runs): f"{runs} is not a run directory but holds 2 (a, b): give those",
        str(runs / "c"): f"{runs / 'c'}: no such run directory",
        str(runs / "a" / "graph.json"): "graph.json is a file: give the run directory",
        str(tmp_path): f"{tmp_path}: no manifest.json: not a run directory",
    }
    for given, message in expected.items():
        done = run_cli("compare", str(runs / "a"), given, "-o", str(tmp_path / "out"))
        assert done.returncode == 2, done.stderr
        assert message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # nothing written for a refused comparison
    done = run_cli("compare", str(runs / "a"), str(runs / "b"), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
