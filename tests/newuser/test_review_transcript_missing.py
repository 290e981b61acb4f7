"""``otel-bridge review --transcript FILE RUN_DIR`` with a FILE that cannot be read.

A mistyped transcript path ended in a ``FileNotFoundError`` traceback from deep in the importer
(exit 1). It is now one line naming the option and the path (exit 2), before anything is
written.
"""

from __future__ import annotations

from pathlib import Path

from cli_support import run_cli, same_imports_env


def test_an_unreadable_transcript_is_one_clear_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = same_imports_env()
    observed = run_cli("observe", "--no-review", "-o", str(run), "--", "true", env=env)
    assert observed.returncode == 0, observed.stderr
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run.iterdir())
    for bad in (tmp_path / "no-such-rollout.jsonl", tmp_path):  # missing, a directory
        done = run_cli("review", "--transcript", str(bad), str(run), env=env)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        assert f"cannot read --transcript {bad}: " in done.stderr, done.stderr
        assert sorted((p.name, p.stat().st_mtime_ns) for p in run.iterdir()) == before


def test_observe_refuses_an_unreadable_review_transcript_before_cmd_runs(tmp_path: Path) -> None:
    """``observe --review-transcript FILE``: a mistyped FILE ran CMD and then printed "review
    skipped: [Errno 2] ..."; it is refused before CMD runs (exit 2, no run directory)."""
    marker = tmp_path / "ran.txt"
    run = tmp_path / "run"
    missing = tmp_path / "no-such-rollout.jsonl"
    done = run_cli(
        "observe", "--review-transcript", str(missing), "-o", str(run), "--",
        "sh", "-c", f"echo ran > {marker}",
        env=same_imports_env(),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"cannot read --review-transcript {missing}: " in done.stderr, done.stderr
    assert not marker.exists()
    assert not run.exists()
