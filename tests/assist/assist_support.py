"""Shared by the assist tests: the examples' scripted model server as its own process.

Importing this module also puts ``tests/review`` on ``sys.path`` for its small run directories
(``review_support``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
MODEL_SERVER = TESTS.parent / "examples" / "model_server.py"
if str(TESTS / "review") not in sys.path:
    sys.path.insert(0, str(TESTS / "review"))

Serve = Callable[[str], str]
"""The ``model_server`` fixture: start a scripted server answering with a text; its base URL."""


def answer(value: Any) -> str:
    """A model answer holding ``value`` as JSON."""
    return json.dumps(value)


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


class ModelServers:
    """``examples/model_server.py`` processes, each answering every request with one text (the
    first step of its script: each assist request is a new conversation)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[subprocess.Popen[str]] = []

    def serve(self, text: str) -> str:
        """Start a server answering ``text``; its base URL."""
        script = self.directory / f"script-{len(self.started)}.json"
        script.write_text(json.dumps({"model": "scripted", "steps": [{"content": text}]}))
        process = subprocess.Popen(
            [sys.executable, str(MODEL_SERVER), "--script", str(script)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.started.append(process)
        return _url_line(process)

    def stop(self) -> None:
        """Stop every server started."""
        for process in self.started:
            process.terminate()
            process.wait(timeout=10)
            if process.stdout is not None:
                process.stdout.close()
