"""Under the strace backend, a CMD that cannot be executed does not list observe's gate.

``observe`` starts CMD behind a gate (``sh -c '{ IFS= read -r OTEL_EXPORTER_OTLP_ENDPOINT ...'
otel-bridge-gate FIFO CMD...``) that ``exec``-s CMD once the collector is ready. strace attaches
to that running root and reads it from /proc: when the exec failed (``/nonexistent``, exit
127), ``report.md`` listed the gate's script, with its FIFO's path, as a process that ran. The
``linux`` backend never did; the gate's argv is now left out of the snapshot (its identity
kept), so strace matches.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from cli_support import run_cli

OBSERVE = ("observe", "--no-review", "--backend", "strace")


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_a_cmd_that_cannot_run_does_not_list_the_gate(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = run_cli(*OBSERVE, "-o", str(run), "--", "/nonexistent", cwd=tmp_path, timeout=300)
    if "process:  available: strace" not in done.stdout + done.stderr:
        pytest.skip(f"the strace process plane is not available here: {done.stderr[-400:]}")
    assert done.returncode == 127, done.stderr
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "Exit code 127." in report
    assert "otel-bridge-gate" not in report, report
    assert "IFS= read" not in report, report
    # nor in the OS stream (the gate's open of its FIFO is a real observation, and stays)
    assert "IFS= read" not in (run / "os.jsonl").read_text(encoding="utf-8")


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_a_cmd_that_runs_is_named_by_its_own_argv(tmp_path: Path) -> None:
    """The gate's identity is kept: CMD's exec names the root process (and its exit)."""
    run = tmp_path / "run"
    argv = ("sh", "-c", "exit 3")
    done = run_cli(*OBSERVE, "-o", str(run), "--", *argv, cwd=tmp_path, env=dict(os.environ))
    if "process:  available: strace" not in done.stdout + done.stderr:
        pytest.skip(f"the strace process plane is not available here: {done.stderr[-400:]}")
    assert done.returncode == 3, done.stderr
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "`sh -c exit 3` (exit 3) ran, but no tool call is linked to it" in report, report
    assert "otel-bridge-gate" not in report, report
