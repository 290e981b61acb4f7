"""A tool-using agent written against the plain OpenTelemetry SDK, no framework.

The agent loop asks the model (the scripted model server, over real HTTP) what to do, runs the
tool calls it gets back and returns their results, until the model answers with text. It reports
what it does with the OpenTelemetry GenAI semantic conventions:

* ``invoke_agent plain-agent`` around the whole run (``gen_ai.operation.name=invoke_agent``,
  ``gen_ai.agent.name``, ``gen_ai.agent.id``);
* ``chat <model>`` for every model request (``gen_ai.request.model``, ``gen_ai.response.id``,
  ``server.address``, ``server.port``);
* ``execute_tool <tool>`` for every tool call (``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
  ``gen_ai.tool.call.arguments`` as JSON; for ``run_command`` it carries the ``command``).

``run_command`` runs the command as a real subprocess; ``write_file`` writes a real file. By
default the agent calls ``otel_bridge.instrument.instrument()`` so its subprocesses carry
``TRACEPARENT`` and otel-bridge links them exactly; ``--no-instrument`` leaves them bare, so
otel-bridge can only bridge tool call and process heuristically (the paper's singleton bridge).

Run: ``otel-bridge observe -- python examples/plain_otel_agent.py [--no-instrument]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextvars
import http.client
import json
import sys
import threading
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

import example_support as support
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

AGENT_NAME = "plain-agent"
SERVICE_NAME = "plain-otel-agent"
MAX_TURNS = 10

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a command (no shell) and return its exit code and output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write text to a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
]

tracer = trace.get_tracer("otel-bridge.examples.plain")


class ModelClient:
    """A chat-completions client on one kept-alive HTTP connection, as real SDK clients keep.

    Every request is a GenAI ``chat`` span. The connection stays open between turns (and is
    reopened if the server closed it), so the OS plane sees the agent connected to the model
    endpoint for the whole run rather than for a few milliseconds per request.
    """

    def __init__(self, base_url: str, model: str) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"model URL must be http://host:port/...: {base_url!r}")
        self.host = parsed.hostname
        self.port = parsed.port or 80
        self.path = parsed.path.rstrip("/") + "/chat/completions"
        self.model = model
        self._connection = http.client.HTTPConnection(self.host, self.port, timeout=30)

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()

    def _post(self, body: bytes) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Authorization": "Bearer offline"}
        for attempt in (1, 2):
            try:
                self._connection.request("POST", self.path, body=body, headers=headers)
                response = self._connection.getresponse()
                payload = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._connection.close()  # a kept-alive connection the server dropped
                if attempt == 2:
                    raise
                continue
            if response.status != 200:
                raise RuntimeError(f"model server answered {response.status}: {payload[:200]!r}")
            answer: dict[str, Any] = json.loads(payload)
            return answer
        raise AssertionError("unreachable")

    def chat(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """One ``chat`` request, inside a GenAI ``chat`` span."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": self.model,
            "server.address": self.host,
            "server.port": self.port,
        }
        with tracer.start_as_current_span(
            f"chat {self.model}", kind=SpanKind.CLIENT, attributes=attributes
        ) as span:
            body = json.dumps({"model": self.model, "messages": messages, "tools": TOOLS})
            answer = self._post(body.encode())
            span.set_attribute("gen_ai.response.id", answer["id"])
            span.set_attribute("gen_ai.response.model", answer.get("model", self.model))
            finish = [c.get("finish_reason") or "" for c in answer.get("choices", [])]
            span.set_attribute("gen_ai.response.finish_reasons", finish)
            return answer


def execute_tool(call: dict[str, Any], start_time: int | None = None) -> str:
    """Run one tool call inside a GenAI ``execute_tool`` span; the text for the model.

    ``start_time`` (ns since the epoch) backdates the span's start to when the call was
    dispatched, as when one model turn dispatches several calls at once.
    """
    name = call["function"]["name"]
    raw_arguments = call["function"].get("arguments") or "{}"
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": call["id"],
        "gen_ai.tool.call.arguments": raw_arguments,
    }
    with tracer.start_as_current_span(
        f"execute_tool {name}", attributes=attributes, start_time=start_time
    ) as span:
        arguments = json.loads(raw_arguments)
        if name == "run_command":
            result = support.run_command(str(arguments["command"]))
            if result.exit_code != 0:
                span.set_status(Status(StatusCode.ERROR, f"exit code {result.exit_code}"))
            return result.summary()
        if name == "write_file":
            path = support.write_file(str(arguments["path"]), str(arguments["content"]))
            return f"wrote {path}"
        span.set_status(Status(StatusCode.ERROR, f"unknown tool {name}"))
        return f"unknown tool {name}"


def _execute_all(calls: list[dict[str, Any]], parallel: bool) -> list[str]:
    """Run the tool calls one after the other, or all at once on threads.

    In parallel every call is dispatched at one instant: their spans share that start time (so
    none of the declarations precedes another) and the threads start their work together.
    """
    if not parallel or len(calls) < 2:
        return [execute_tool(call) for call in calls]
    barrier = threading.Barrier(len(calls))
    dispatched = time.time_ns()

    def start_together(call: dict[str, Any]) -> str:
        barrier.wait(timeout=10)
        return execute_tool(call, start_time=dispatched)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(calls)) as pool:
        # Each thread runs in a copy of this context, so every tool span has the agent as parent.
        futures = [
            pool.submit(contextvars.copy_context().run, start_together, call) for call in calls
        ]
        return [f.result() for f in futures]


def run_agent(
    base_url: str, task: str, model: str, *, agent_name: str = AGENT_NAME, parallel: bool = False
) -> str:
    """The agent loop: model, tools, model, ... until a text answer (or ``MAX_TURNS``).

    With ``parallel``, the tool calls of one model turn run at the same time on threads.
    """
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "openai",
        "gen_ai.agent.name": agent_name,
        "gen_ai.agent.id": agent_name,
        "gen_ai.request.model": model,
    }
    with tracer.start_as_current_span(f"invoke_agent {agent_name}", attributes=attributes):
        messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
        client = ModelClient(base_url, model)
        try:
            return _loop(client, messages, parallel)
        finally:
            client.close()


def _loop(client: ModelClient, messages: list[dict[str, Any]], parallel: bool) -> str:
    for _ in range(MAX_TURNS):
        answer = client.chat(messages)
        message = answer["choices"][0]["message"]
        messages.append(message)
        calls = message.get("tool_calls") or []
        if not calls:
            return str(message.get("content") or "")
        for call, result in zip(calls, _execute_all(calls, parallel), strict=True):
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return "stopped after too many turns"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent once and print its answer."""
    parser = argparse.ArgumentParser(description="A plain OpenTelemetry SDK agent.")
    support.add_common_arguments(parser)
    parser.add_argument(
        "--no-instrument",
        action="store_true",
        help="do not propagate trace context into subprocesses (heuristic bridges only)",
    )
    parser.add_argument("--model", default="scripted-model", help="model name to request")
    args = parser.parse_args(argv)
    with (
        support.setup_tracing(SERVICE_NAME, instrument=not args.no_instrument),
        support.model_endpoint(args.model_url, args.script) as base_url,
    ):
        answer = run_agent(base_url, args.task, args.model)
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
