"""``report.md`` names the files a path watcher saw change, and keeps each argv on its line.

A plain user without ptrace gets the ``portable`` backend: its file plane is a watcher of the
working directory, which sees a file change but not which process made it (``observed_change``,
session -> file). The report said only "the file plane was degraded": the files the workload
wrote were in graph.json and nowhere in the report, so a new user read "nothing written". An
argv holding a newline (a ``sh -c`` or ``python -c`` script) broke its "Not linked" item and
the report's title over several lines, the later ones read as stray text. Both are fixed: the
files are one item, said to be linked to no process, and an argv is shown on one line.
"""

from __future__ import annotations

from pathlib import Path

from cli_support import observed_run

SCRIPT = "echo watched > changed.txt\nsleep 0.5"


def test_watched_changes_are_reported_and_argv_stays_on_one_line(tmp_path: Path) -> None:
    run = observed_run(tmp_path, "sh", "-c", SCRIPT, options=("--backend", "portable"))
    assert (tmp_path / "changed.txt").exists()
    report = (run / "report.md").read_text(encoding="utf-8")
    lines = report.splitlines()
    watched = [line for line in lines if f"{tmp_path}/changed.txt" in line]
    assert len(watched) == 1, report
    assert watched[0].startswith("- "), report
    assert "does not know which process changed them" in watched[0], report
    # nothing of the run directory the collector itself writes is said to be the workload's
    assert str(run) not in watched[0], report
    (root,) = [line for line in lines if line.startswith("- pid") and "`sh -c " in line]
    assert "`sh -c echo watched > changed.txt sleep 0.5`" in root, report
    assert not any(line.startswith("sleep 0.5") for line in lines), report
