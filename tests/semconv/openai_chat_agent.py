"""A client that only chats: the real ``openai`` client traced by OpenInference, no agent span.

Run by ``test_observe_model_calls.py`` under ``otel-bridge observe`` as
``python openai_chat_agent.py MODEL_URL``: it configures tracing as the examples do
(``examples/example_support.py``: OTLP exporter from the environment, the resource naming this
process), instruments ``openai`` with ``openinference-instrumentation-openai`` and makes one chat
completion against the scripted model server, so its only span is a root ``LLM`` span.

With ``--run-tool`` it offers the model a ``run_command`` tool inside an OpenInference CHAIN span
and runs the tool call the model asks for as an application would trace it: an OpenInference TOOL
span stating the call's ``tool_call.id``, around the command run as a child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import example_support as support
import openai
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry import trace

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    }
]


def main() -> int:
    """One traced chat completion against ``sys.argv[1]`` (and its tool call, ``--run-tool``)."""
    with support.setup_tracing("openai-chat-client", instrument=False):
        OpenAIInstrumentor().instrument()
        client = openai.OpenAI(base_url=sys.argv[1], api_key="sk-offline-not-a-key")
        if "--run-tool" in sys.argv[2:]:
            _chat_and_run_tool(client)
            return 0
        answer = client.chat.completions.create(
            model="scripted-model", messages=[{"role": "user", "content": "hello"}]
        )
        print("answered:", answer.choices[0].finish_reason)
    return 0


def _chat_and_run_tool(client: openai.OpenAI) -> None:
    tracer = trace.get_tracer("openai-chat-client")
    with tracer.start_as_current_span("session", attributes={"openinference.span.kind": "CHAIN"}):
        answer = client.chat.completions.create(
            model="scripted-model",
            messages=[{"role": "user", "content": "list the files"}],
            tools=TOOLS,
        )
        for call in answer.choices[0].message.tool_calls or []:
            function = getattr(call, "function", None)
            if function is None:
                continue
            attrs = {
                "openinference.span.kind": "TOOL",
                "tool.name": function.name,
                "tool_call.id": call.id,
                "input.value": function.arguments,
                "input.mime_type": "application/json",
            }
            with tracer.start_as_current_span(function.name, attributes=attrs):
                command = json.loads(function.arguments)["command"]
                done = subprocess.run(command.split(), check=False)
                print("ran:", command, "exit", done.returncode)


if __name__ == "__main__":
    raise SystemExit(main())
