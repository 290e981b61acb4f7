"""A fake OpenAI chat completions server on loopback, for agents using the real ``openai`` client.

:func:`fake_openai` serves ``POST /v1/chat/completions`` (any path, any model) in a thread of
the test's own process, answering one assistant message with token usage: what an instrumented
client needs to record a complete ``chat`` span. The test's process is not the observed agent,
so its connections are not followed.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        answer = json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "hello"},
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def fake_openai() -> Iterator[int]:
    """Serve the fake API on 127.0.0.1; yields its port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


OPENAI_V2 = ("opentelemetry-instrumentation-openai-v2==2.3b0", "wrapt<2")
"""The official OpenAI instrumentation at the release that imports with this SDK, and the
``wrapt`` it needs (2.x breaks it): installed for the agent processes only, so the test
environment's own ``wrapt`` (which other instrumentations use) stays as it is."""


@functools.cache
def openai_v2_site() -> str:
    """A directory holding :data:`OPENAI_V2` (``pip install --target``, once per machine, kept
    in the temporary directory); ``pytest.skip`` when pip cannot get them."""
    site = Path(tempfile.gettempdir()) / "otel-bridge-tests-openai-v2-2.3b0"
    if (site / "opentelemetry" / "instrumentation" / "openai_v2").is_dir():
        return str(site)
    staging = Path(tempfile.mkdtemp(prefix="openai-v2-", dir=site.parent))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(staging),
         *OPENAI_V2],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"cannot install {' '.join(OPENAI_V2)}: {done.stderr.strip()[-300:]}")
    try:
        staging.rename(site)  # atomic: another test process may have won the race
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return str(site)


def with_openai_v2(agent: str) -> str:
    """The agent's source, its first line putting :func:`openai_v2_site` on its path."""
    return f"import sys\nsys.path.insert(0, {openai_v2_site()!r})\n" + agent
