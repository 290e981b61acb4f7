"""Fixtures of the viewer tests: a headless Chromium, a real observed run, screenshot folder."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from viewer.viewer_support import launch

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session (skips without playwright or chromium)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="the dev extra's playwright")
    with sync_api.sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page (1400x900) that fails the test on any script error."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert not errors, errors


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots are written (a test artifact under pytest's base temp directory)."""
    return tmp_path_factory.getbasetemp() / "viewer-screenshots"


def observe(
    run: Path, cwd: Path, command: list[str], timeout: float, env: dict[str, str] | None = None
) -> None:
    """``otel-bridge observe -o run -- command`` in ``cwd``; fails the fixture if it fails."""
    argv = [sys.executable, "-m", "otel_bridge", "observe", "-o", str(run), "--no-progress", "--"]
    subprocess.run(
        [*argv, *command], cwd=cwd, env=env, check=True, capture_output=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def observed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of a real ``observe`` of examples/plain_otel_agent.py."""
    base = tmp_path_factory.mktemp("observed")
    work = base / "work"
    work.mkdir()
    run = base / "run"
    observe(run, work, [sys.executable, str(REPO / "examples" / "plain_otel_agent.py")], 180)
    return run


REVIEW_SESSIONS = REPO / "examples" / "review"


@pytest.fixture(scope="session")
def reviewed_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run directory, workspace) of examples/review's analysis session under a real ``observe``.

    ``observe`` writes the run's ``review.json`` itself; the session's ground truth is
    ``examples/review/analysis.truth.json``.
    """
    pytest.importorskip("opentelemetry.exporter.otlp", reason="the examples extra")
    base = tmp_path_factory.mktemp("reviewed")
    work = base / "work"
    script = str(REVIEW_SESSIONS / "session.py")
    session = str(REVIEW_SESSIONS / "analysis.session.json")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, script, "prepare", session, str(work)], check=True, env=env, timeout=60
    )
    run = base / "run"
    observe(run, work, [sys.executable, script, "run", session], 300, env=env)
    return run, work.resolve()
