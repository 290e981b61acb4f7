"""``review -o DIR`` never overwrites an earlier review without being told to.

As ``observe -o`` refuses a non-empty directory unless ``--replace``, ``review -o`` refuses an
output directory that holds an earlier review (exit 2, one line naming the files, nothing
changed); ``--replace`` discards it (and only its files). ``review RUN_DIR`` without ``-o``
still rewrites the run directory's own review, as documented.
"""

from __future__ import annotations

from pathlib import Path

from cli_support import observed_run, run_cli, same_imports_env


def review(*args: str) -> tuple[int, str]:
    done = run_cli("review", "--quiet", *args, env=same_imports_env())
    return done.returncode, done.stderr


def test_an_earlier_review_is_refused_then_replaced(tmp_path: Path) -> None:
    run = observed_run(tmp_path, "true")
    out = tmp_path / "rv"
    assert review(str(run), "-o", str(out)) == (0, "")
    (out / "review.md").write_text("earlier\n")
    (out / "review-audit.jsonl").write_text("{}\n")  # an earlier model pass's file
    (out / "notes.txt").write_text("mine\n")
    code, stderr = review(str(run), "-o", str(out))
    assert code == 2
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert "holds an earlier review (review.json, review.md, review-records.jsonl, " in stderr
    assert "or --replace to discard this earlier review" in stderr
    assert (out / "review.md").read_text() == "earlier\n"
    assert review(str(run), "-o", str(out), "--replace") == (0, "")
    assert (out / "review.md").read_text() != "earlier\n"
    assert not (out / "review-audit.jsonl").exists()
    assert (out / "notes.txt").read_text() == "mine\n"
    assert review(str(run)) == (0, "")  # into RUN_DIR itself: rewritten, as before
