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

import os
import subprocess
import sys
from pathlib import Path

OBSERVE = (sys.executable, "-m", "otel_bridge", "observe", "--no-review", "--backend", "portable")
SCRIPT = "echo watched > changed.txt\nsleep 0.5"


def test_watched_changes_are_reported_and_argv_stays_on_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [*OBSERVE, "-o", str(run), "--", "sh", "-c", SCRIPT],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
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
