"""A fake OpenAI chat completions server on loopback, for agents using the real ``openai`` client.

:func:`fake_openai` serves ``POST /v1/chat/completions`` (any path, any model) in a thread of
the test's own process, answering one assistant message (``hello``, or the text it is given)
with token usage: what an instrumented client needs to record a complete ``chat`` span. The
test's process is not the observed agent, so its connections are not followed.
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


class _Server(ThreadingHTTPServer):
    answer = "hello"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

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
                        "message": {"role": "assistant", "content": self.server.answer},
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
def fake_openai(answer: str = "hello") -> Iterator[int]:
    """Serve the fake API on 127.0.0.1, every completion saying ``answer``; yields its port."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.answer = answer
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


OPENINFERENCE = (
    "openinference-instrumentation-openai==0.1.66",
    "openinference-instrumentation==0.1.72",
    "openinference-semantic-conventions==0.1.42",
)
"""OpenInference's OpenAI instrumentation and the two packages it needs, at the releases the
recorded corpus was made with (``tests/testdata/semconv/README.md``)."""

OPENLLMETRY = (
    "opentelemetry-instrumentation-openai==0.62.4",
    "opentelemetry-semantic-conventions-ai==0.5.1",
)
"""OpenLLMetry's (traceloop's) OpenAI instrumentation, latest release: it writes the GenAI
``gen_ai.input.messages`` / ``gen_ai.output.messages``."""

OPENLLMETRY_LEGACY = (
    "opentelemetry-instrumentation-openai==0.52.6",
    "opentelemetry-semantic-conventions-ai==0.4.16",
)
"""An OpenLLMetry release that writes the flattened ``gen_ai.prompt.<i>.*`` /
``gen_ai.completion.<i>.*`` attributes and ``llm.request.type`` instead."""


@functools.cache
def pip_site(packages: tuple[str, ...], probe: str) -> str:
    """A directory holding ``packages`` (``pip install --no-deps --target``, once per machine,
    kept in the temporary directory, named by the packages); ``pytest.skip`` when pip cannot get
    them. ``probe`` is a path inside the directory that exists once they are installed."""
    name = "-".join(p.replace("==", "-") for p in packages if "==" in p)[:120]
    site = Path(tempfile.gettempdir()) / f"otel-bridge-tests-{name}"
    if (site / probe).exists():
        return str(site)
    staging = Path(tempfile.mkdtemp(prefix="pip-site-", dir=site.parent))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(staging),
         *packages],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        pytest.skip(f"cannot install {' '.join(packages)}: {done.stderr.strip()[-300:]}")
    try:
        staging.rename(site)  # atomic: another test process may have won the race
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return str(site)


def openai_v2_site() -> str:
    """A directory holding :data:`OPENAI_V2` (:func:`pip_site`)."""
    site = Path(tempfile.gettempdir()) / "otel-bridge-tests-openai-v2-2.3b0"
    if (site / "opentelemetry" / "instrumentation" / "openai_v2").is_dir():
        return str(site)  # installed under this name by earlier runs
    return pip_site(OPENAI_V2, "opentelemetry/instrumentation/openai_v2")


def with_openai_v2(agent: str) -> str:
    """The agent's source, its first line putting :func:`openai_v2_site` on its path."""
    return f"import sys\nsys.path.insert(0, {openai_v2_site()!r})\n" + agent
