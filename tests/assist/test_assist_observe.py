"""``observe --review-transcript FILE --review-model URL``: the review ``observe`` runs at its end
gets the inputs ``review --transcript`` and ``review --model`` take.

A real ``observe`` of a small command, the Codex rollout fixture (built from the documented
format, ``tests/testdata/codingagents/README.md``) and the examples' scripted model server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from assist_support import ModelServers, Serve, answer
from cli_support import run_cli

from otel_bridge.rundir import verify

TESTS = Path(__file__).resolve().parents[1]
ROLLOUT = TESTS / "testdata" / "codingagents" / "codex_rollout.jsonl"
REPO = TESTS.parent


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[Serve]:
    """Scripted model servers on loopback, stopped after the test."""
    servers = ModelServers(tmp_path)
    yield servers.serve
    servers.stop()


def _observe(tmp_path: Path, *extra: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    run = tmp_path / "run"
    argv = ["observe", "--no-progress", "-o", str(run), *extra, "--", sys.executable, "-c", "pass"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = run_cli(*argv, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return run, done


def _load(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return value


FINAL = "I fixed calc.py and ran `pytest -q`: all tests pass."
OPEN = "The fix changed 37 lines."
"""A final answer stating a number no tool result holds: unsupported, so the model is asked."""


def test_observe_passes_the_transcript_and_the_model_to_its_review(
    tmp_path: Path, model_server: Serve
) -> None:
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_text(ROLLOUT.read_text(encoding="utf-8").replace(FINAL, OPEN), encoding="utf-8")
    url = model_server(answer({"supports": [], "splits": []}))
    run, done = _observe(tmp_path, "--review-transcript", str(rollout), "--review-model", url)
    doc = _load(run / "review.json")
    # the transcript's session is reviewed: its prompt and final claim are there
    prompts = [n["text"] for n in doc["evidence"] if n["type"] == "user_message"]
    assert "Fix the failing test in calc.py" in prompts
    assert [(c["text"], c["status"]) for c in doc["claims"]] == [(OPEN, "unsupported")]
    # the model was asked (its exchange audited) and its outcome written beside the review
    result = _load(run / "review-assist.json")
    assert result["status"] == "ok", result
    exchanges = (run / "review-audit.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(exchanges) == 1
    assert json.loads(exchanges[0])["purpose"] == "review"
    assert (
        "review model model:default:" in done.stderr
    )  # after the report, not in the command's output
    assert verify(str(run)) == []  # the manifest covers the review files


def test_the_transcript_fixture_is_reviewed_against_what_observe_saw(tmp_path: Path) -> None:
    run, _ = _observe(tmp_path, "--review-transcript", str(ROLLOUT))
    doc = _load(run / "review.json")
    # the fixture claims a pytest run and a write this run never made
    assert [(c["text"], c["status"]) for c in doc["claims"]] == [(FINAL, "contradicted")]
    assert not (run / "review-assist.json").exists()  # no --review-model: no model asked


def test_without_the_options_no_model_is_asked_and_no_transcript_is_read(tmp_path: Path) -> None:
    run, _ = _observe(tmp_path)
    doc = _load(run / "review.json")
    assert doc["sessions"] == []
    assert not (run / "review-assist.json").exists()
    assert not (run / "review-audit.jsonl").exists()
