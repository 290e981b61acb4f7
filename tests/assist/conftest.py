"""The examples' scripted model server as its own process, and tests/review's run builder."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from assist_support import Serve

TESTS = Path(__file__).resolve().parents[1]
MODEL_SERVER = TESTS.parent / "examples" / "model_server.py"
sys.path.insert(0, str(TESTS / "review"))  # review_support: small run directories


def _url_line(process: subprocess.Popen[str], timeout: float = 20.0) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith("MODEL_SERVER_URL="):
            return line.split("=", 1)[1].strip()
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"the model server printed no URL within {timeout}s")


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[Serve]:
    """Start ``examples/model_server.py`` answering every request with one text (the first
    step of its script: each assist request is a new conversation); returns its base URL."""
    started: list[subprocess.Popen[str]] = []

    def serve(answer: str) -> str:
        script = tmp_path / f"script-{len(started)}.json"
        script.write_text(json.dumps({"model": "scripted", "steps": [{"content": answer}]}))
        process = subprocess.Popen(
            [sys.executable, str(MODEL_SERVER), "--script", str(script)],
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(process)
        return _url_line(process)

    yield serve
    for process in started:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()
