"""Scripted agent sessions for the claim-to-evidence review (``otel-bridge review``).

A session file (``*.session.json`` next to this script) holds a workspace to prepare and one or
more sessions. Each session is a user task and a model script (the format of
``examples/model_server.py``); the bundled model server answers the agent from it, so the
assistant's messages, tool calls and final claim are fixed while everything the tools do is real:

* ``run_command`` runs the command as a subprocess (no shell) in the workspace;
* ``write_file`` pipes the content into ``tee PATH`` (a real process writes the real file);
* ``read_file`` runs ``cat PATH``.

The agent reports itself with the OpenTelemetry SDK and the GenAI semantic conventions:
``invoke_agent`` around a session, ``chat`` per model request with ``gen_ai.input.messages`` and
``gen_ai.output.messages`` (the JSON message format of the conventions: ``role`` and ``parts``),
and ``execute_tool`` per tool call with ``gen_ai.tool.call.id``, ``gen_ai.tool.call.arguments`` and
``gen_ai.tool.call.result``. ``otel_bridge.instrument`` gives each tool's subprocess the tool
span's ``TRACEPARENT``, so otel-bridge links call and process exactly.

A file with one session adopts the launcher's trace context (the session hangs under the
``otel-bridge observe`` span); a file with several starts each session as its own trace root, so
one run directory holds several sessions.

Usage (from the repository root)::

    python examples/review/session.py prepare examples/review/coding.session.json WORKDIR
    cd WORKDIR && otel-bridge observe -- python .../examples/review/session.py run \
        .../examples/review/coding.session.json

Each ``*.truth.json`` next to a session file is its ground truth, written by hand from the script
(what the agent claims and what its tools really do), independently of the review code.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import example_support as support
import model_server
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

SERVICE_NAME = "review-session-agent"
MAX_TURNS = 40

tracer = trace.get_tracer("otel-bridge.examples.review")


def prepare(session_file: Path, workdir: Path) -> None:
    """Create the session's workspace files under ``workdir`` (run this outside ``observe``)."""
    spec = json.loads(session_file.read_text(encoding="utf-8"))
    for rel, content in spec.get("workspace", {}).items():
        target = workdir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")


def to_semconv(message: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI chat message as a GenAI semantic-conventions message (``role`` and ``parts``)."""
    role = str(message.get("role", ""))
    parts: list[dict[str, Any]] = []
    if role == "tool":
        parts.append(
            {
                "type": "tool_call_response",
                "id": message.get("tool_call_id"),
                "response": message.get("content"),
            }
        )
    elif message.get("content"):
        parts.append({"type": "text", "content": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        parts.append(
            {
                "type": "tool_call",
                "id": call["id"],
                "name": function["name"],
                "arguments": json.loads(function.get("arguments") or "{}"),
            }
        )
    return {"role": role, "parts": parts}


def run_tool(name: str, arguments: dict[str, Any]) -> tuple[int, str]:
    """Run one tool as a real process in the working directory: exit code and output."""
    if name == "run_command":
        argv = shlex.split(str(arguments["command"]))
        # Installed pytest plugins (Phoenix's takes seconds to import) are not the session's.
        env = os.environ | {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        done = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=60, env=env
        )
    elif name == "write_file":
        done = subprocess.run(
            ["tee", str(arguments["path"])],
            input=str(arguments["content"]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    elif name == "read_file":
        done = subprocess.run(
            ["cat", str(arguments["path"])], capture_output=True, text=True, check=False
        )
    else:
        return 127, f"unknown tool {name}"
    output = ((done.stdout or "") + (done.stderr or "")).strip()
    return done.returncode, output


def execute_tool(call: dict[str, Any]) -> str:
    """One tool call inside a GenAI ``execute_tool`` span; the result text for the model."""
    name = call["function"]["name"]
    raw_arguments = call["function"].get("arguments") or "{}"
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": call["id"],
        "gen_ai.tool.call.arguments": raw_arguments,
    }
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes) as span:
        code, output = run_tool(name, json.loads(raw_arguments))
        result = f"exit code {code}" + (f": {output[:400]}" if output else "")
        span.set_attribute("gen_ai.tool.call.result", result)
        if code != 0:
            span.set_status(Status(StatusCode.ERROR, f"exit code {code}"))
        return result


def chat(client: Any, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One model request in a ``chat`` span that records the input and output messages."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": client.model,
        "server.address": client.host,
        "server.port": client.port,
        "gen_ai.input.messages": json.dumps([to_semconv(m) for m in messages]),
    }
    with tracer.start_as_current_span(
        f"chat {client.model}", kind=SpanKind.CLIENT, attributes=attributes
    ) as span:
        body = json.dumps({"model": client.model, "messages": messages})
        answer: dict[str, Any] = client.post(body.encode())
        message = answer["choices"][0]["message"]
        span.set_attribute("gen_ai.response.id", answer["id"])
        output = to_semconv(message) | {"finish_reason": answer["choices"][0]["finish_reason"]}
        span.set_attribute("gen_ai.output.messages", json.dumps([output]))
        return answer


def run_session(session: dict[str, Any], *, new_root: bool) -> str:
    """One session: the agent loop against an in-process scripted model server."""
    server = model_server.serve_in_thread(model_server.parse_script(session["script"]))
    client = _Client(server.base_url, str(session["script"].get("model", "scripted-model")))
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.agent.name": str(session["name"]),
        "gen_ai.conversation.id": str(session["name"]),
    }
    parent = otel_context.Context() if new_root else None
    try:
        with tracer.start_as_current_span(
            f"invoke_agent {session['name']}", context=parent, attributes=attributes
        ):
            messages: list[dict[str, Any]] = [{"role": "user", "content": session["task"]}]
            for _ in range(MAX_TURNS):
                message = chat(client, messages)["choices"][0]["message"]
                messages.append(message)
                calls = message.get("tool_calls") or []
                if not calls:
                    return str(message.get("content") or "")
                for call in calls:
                    result = execute_tool(call)
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
            return "stopped after too many turns"
    finally:
        client.close()
        server.shutdown()
        server.server_close()


class _Client:
    """A minimal chat-completions client (one POST per request, stdlib ``urllib``)."""

    def __init__(self, base_url: str, model: str) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.host = parsed.hostname or ""
        self.port = parsed.port or 80

    def post(self, body: bytes) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer

    def close(self) -> None:
        """Nothing to close: every request has its own connection."""


def main(argv: Sequence[str] | None = None) -> int:
    """``prepare FILE WORKDIR`` or ``run FILE``."""
    parser = argparse.ArgumentParser(description="Scripted sessions for otel-bridge review.")
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("prepare", help="create the workspace files")
    p.add_argument("file", type=Path)
    p.add_argument("workdir", type=Path)
    r = sub.add_parser("run", help="run the sessions in the current directory")
    r.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.action == "prepare":
        prepare(args.file, args.workdir)
        return 0
    spec = json.loads(args.file.read_text(encoding="utf-8"))
    sessions = spec["sessions"]
    with support.setup_tracing(SERVICE_NAME):
        for session in sessions:
            print(run_session(session, new_root=len(sessions) > 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
