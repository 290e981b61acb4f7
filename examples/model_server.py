"""A small OpenAI-compatible chat-completions server on loopback, answering from a script.

The examples need a model that asks for tool calls, offline and deterministically. This server
speaks the subset of the OpenAI HTTP API that real clients (the ``openai`` package, AutoGen's
``OpenAIChatCompletionClient``, plain ``urllib``) use: ``POST /v1/chat/completions``, streaming or
not, and ``GET /v1/models``. Every answer is a real HTTP response over a real loopback socket, so
the OS plane sees a real connection from the agent to the model endpoint.

A script is a JSON document ``{"model": NAME, "steps": [STEP, ...]}``. A request is answered with
the step whose index is the number of assistant messages already in the conversation, so one
script drives one conversation: the first request gets step 0, the request that carries the
assistant's tool calls and their results gets step 1, and so on. A step is either
``{"content": TEXT}`` or ``{"tool_calls": [{"name": TOOL, "arguments": {...}}, ...]}``. Past the
last step the server answers ``"done"``.

Run ``python examples/model_server.py [--script FILE] [--port 0]``: it prints one line
``MODEL_SERVER_URL=http://127.0.0.1:<port>/v1`` once it listens, then serves until interrupted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

URL_PREFIX = "MODEL_SERVER_URL="
"""What the server prints before its base URL, so a launcher can find the line."""

DEFAULT_MODEL = "scripted-model"

BUILTIN_SCRIPT: dict[str, Any] = {
    "model": DEFAULT_MODEL,
    "steps": [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 0.3"}}]},
        {
            "tool_calls": [
                {
                    "name": "write_file",
                    "arguments": {
                        "path": "agent-notes.txt",
                        "content": "observed by otel-bridge\n",
                    },
                }
            ]
        },
        {
            "tool_calls": [
                {
                    "name": "run_command",
                    "arguments": {"command": "cp agent-notes.txt agent-notes.bak"},
                }
            ]
        },
        {"content": "The command ran and the notes are written and copied."},
    ],
}
"""The script used without ``--script``: a command, a file write, a copy, a final answer."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One scripted tool call."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Step:
    """One scripted assistant turn: text, or tool calls (optionally with text)."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Script:
    """A parsed script: the model name it reports and its steps."""

    model: str
    steps: tuple[Step, ...]
    final: Step = field(default_factory=lambda: Step(content="done"))

    def step_for(self, messages: Sequence[Mapping[str, Any]]) -> Step:
        """The step answering a conversation: indexed by its count of assistant messages."""
        index = sum(1 for m in messages if m.get("role") == "assistant")
        return self.steps[index] if index < len(self.steps) else self.final


def parse_script(data: Mapping[str, Any]) -> Script:
    """Validate a script document and build a :class:`Script`. Raises ``ValueError``."""
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ValueError("script: 'steps' must be a non-empty list")
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps):
        if not isinstance(raw, dict):
            raise ValueError(f"script: steps[{i}] must be an object")
        if "tool_calls" in raw:
            calls = raw["tool_calls"]
            if not isinstance(calls, list) or not calls:
                raise ValueError(f"script: steps[{i}].tool_calls must be a non-empty list")
            parsed: list[ToolCall] = []
            for j, call in enumerate(calls):
                if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                    raise ValueError(f"script: steps[{i}].tool_calls[{j}] needs a string 'name'")
                arguments = call.get("arguments", {})
                if not isinstance(arguments, dict):
                    raise ValueError(f"script: steps[{i}].tool_calls[{j}].arguments: not an object")
                parsed.append(ToolCall(name=call["name"], arguments=arguments))
            text = raw.get("content")  # text said alongside the calls (a plan), optional
            steps.append(
                Step(content=text if isinstance(text, str) else None, tool_calls=tuple(parsed))
            )
        elif isinstance(raw.get("content"), str):
            steps.append(Step(content=raw["content"]))
        else:
            raise ValueError(f"script: steps[{i}] needs 'content' (string) or 'tool_calls'")
    model = data.get("model", DEFAULT_MODEL)
    if not isinstance(model, str):
        raise ValueError("script: 'model' must be a string")
    return Script(model=model, steps=tuple(steps))


def load_script(path: str | Path | None) -> Script:
    """The script in ``path`` (JSON), or the built-in one when ``path`` is None."""
    if path is None:
        return parse_script(BUILTIN_SCRIPT)
    with open(path, encoding="utf-8") as f:
        return parse_script(json.load(f))


class _Counter:
    """Thread-safe id source, so ids are unique per server and readable in traces."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = itertools.count(1)

    def take(self) -> int:
        with self._lock:
            return next(self._next)


def _message(step: Step, call_ids: Iterator[str]) -> dict[str, Any]:
    if not step.tool_calls:
        return {"role": "assistant", "content": step.content or ""}
    return {
        "role": "assistant",
        "content": step.content,
        "tool_calls": [
            {
                "id": next(call_ids),
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))},
            }
            for c in step.tool_calls
        ],
    }


def completion(
    step: Step, *, model: str, request_id: str, call_ids: Iterator[str]
) -> dict[str, Any]:
    """A non-streaming ``chat.completion`` object answering with ``step``."""
    message = _message(step, call_ids)
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if step.tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def completion_chunks(
    step: Step, *, model: str, request_id: str, call_ids: Iterator[str]
) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed answer with ``step``."""
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None, usage: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": request_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if usage:
            out["usage"] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        return out

    message = _message(step, call_ids)
    chunks = [chunk({"role": "assistant", "content": ""}, None)]
    if step.tool_calls:
        for index, call in enumerate(message["tool_calls"]):
            chunks.append(chunk({"tool_calls": [{"index": index, **call}]}, None))
        chunks.append(chunk({}, "tool_calls", usage=True))
    else:
        chunks.append(chunk({"content": message["content"]}, None))
        chunks.append(chunk({}, "stop", usage=True))
    return chunks


class ScriptedModelServer(ThreadingHTTPServer):
    """An HTTP server answering chat completions from a :class:`Script`."""

    daemon_threads = True

    def __init__(self, script: Script, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__((host, port), _Handler)
        self.script = script
        self.requests = _Counter()
        self.calls = _Counter()

    @property
    def port(self) -> int:
        """The bound TCP port."""
        return int(self.server_address[1])

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ``http://127.0.0.1:<port>/v1``."""
        host = self.server_address[0]
        host = host.decode() if isinstance(host, bytes) else str(host)
        return f"http://{host}:{self.port}/v1"


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a model server that logs every request would flood the examples' output."""

    def _send_json(self, status: int, body: Mapping[str, Any], request_id: str = "") -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        if request_id:
            self.send_header("x-request-id", request_id)
        self.end_headers()
        self.wfile.write(payload)

    def _error(self, status: int, message: str) -> None:
        self._send_json(status, {"error": {"message": message, "type": "invalid_request_error"}})

    def do_GET(self) -> None:
        """``GET /v1/models``: the one scripted model."""
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            model = {"id": self.server.script.model, "object": "model", "owned_by": "examples"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        """``POST /v1/chat/completions``: the scripted step for this conversation."""
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route {self.path}")
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as exc:
            self._error(400, f"body is not JSON: {exc}")
            return
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list):
            self._error(400, "'messages' must be a list")
            return
        script = self.server.script
        step = script.step_for([m for m in messages if isinstance(m, dict)])
        request_id = f"chatcmpl-{self.server.requests.take()}"
        call_ids = (f"call_{self.server.calls.take()}" for _ in itertools.count())
        model = str(body.get("model") or script.model)
        if body.get("stream"):
            chunks = completion_chunks(step, model=model, request_id=request_id, call_ids=call_ids)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.send_header("x-request-id", request_id)
            self.end_headers()
            for c in chunks:
                self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True
            return
        answer = completion(step, model=model, request_id=request_id, call_ids=call_ids)
        self._send_json(200, answer, request_id)


def serve_in_thread(script: Script, host: str = "127.0.0.1", port: int = 0) -> ScriptedModelServer:
    """Start a server on a daemon thread and return it; call ``shutdown()`` to stop it."""
    server = ScriptedModelServer(script, host, port)
    threading.Thread(target=server.serve_forever, name="model-server", daemon=True).start()
    return server


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry: serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", help="JSON script file (default: the built-in script)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default: %(default)s)")
    parser.add_argument("--port", type=int, default=0, help="TCP port, 0 for any (default: 0)")
    args = parser.parse_args(argv)
    try:
        script = load_script(args.script)
    except (OSError, ValueError) as exc:
        print(f"model_server: {exc}", file=sys.stderr)
        return 2
    import signal

    server = ScriptedModelServer(script, args.host, args.port)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"{URL_PREFIX}{server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
