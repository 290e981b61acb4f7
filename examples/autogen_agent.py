"""An AutoGen AgentChat 0.7.5 agent with shell and file tools, talking to a real model client.

An ``AssistantAgent`` gets two ``FunctionTool``s, ``run_command`` (a real subprocess, no shell) and
``write_file``, and AutoGen's own ``OpenAIChatCompletionClient`` pointed at the scripted model
server over a real loopback connection (``--replay`` swaps in AutoGen's
``ReplayChatCompletionClient`` fed from the same script, with no network at all).

AutoGen reports itself through OpenTelemetry when a tracer provider is set: autogen-core 0.7.5
opens ``invoke_agent <name>`` (and ``create_agent <name>``) spans around the agent and an
``execute_tool <tool>`` span, with ``gen_ai.tool.name`` and ``gen_ai.tool.call.id``, around every
tool call. AutoGen does not record the tool's arguments, so the tool adds the GenAI
``gen_ai.tool.call.arguments`` attribute to its own span: that is how the declared ``command``
reaches otel-bridge. Subprocesses carry ``TRACEPARENT`` through ``otel_bridge.instrument``.

Run: ``otel-bridge observe -- python examples/autogen_agent.py [--replay] [--team]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any

import example_support as support
import model_server
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import ChatCompletionClient, CreateResult, ModelInfo, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.openai import OpenAIChatCompletionClient
from autogen_ext.models.replay import ReplayChatCompletionClient
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

AGENT_NAME = "autogen_assistant"
SERVICE_NAME = "autogen-agent"
MODEL_INFO = ModelInfo(
    function_calling=True,
    vision=False,
    json_output=False,
    family="unknown",
    structured_output=False,
)


def _declare(arguments: dict[str, Any]) -> None:
    """Record the tool's arguments on AutoGen's ``execute_tool`` span (GenAI semconv)."""
    trace.get_current_span().set_attribute("gen_ai.tool.call.arguments", json.dumps(arguments))


async def run_command(command: str) -> str:
    """Run a command (no shell) and return its exit code and output."""
    _declare({"command": command})
    result = support.run_command(command)
    if result.exit_code != 0:
        trace.get_current_span().set_status(
            Status(StatusCode.ERROR, f"exit code {result.exit_code}")
        )
    return result.summary()


async def write_file(path: str, content: str) -> str:
    """Write text to a file and return its absolute path."""
    _declare({"path": path, "content": content})
    return f"wrote {support.write_file(path, content)}"


def replay_client(script: model_server.Script) -> ReplayChatCompletionClient:
    """AutoGen's replay client answering with the script's steps, in order."""
    usage = RequestUsage(prompt_tokens=10, completion_tokens=5)
    results: list[str | CreateResult] = []
    call_number = 0
    for step in script.steps:
        if step.tool_calls:
            calls = []
            for call in step.tool_calls:
                call_number += 1
                calls.append(
                    FunctionCall(
                        id=f"call_{call_number}",
                        name=call.name,
                        arguments=json.dumps(dict(call.arguments)),
                    )
                )
            results.append(
                CreateResult(
                    finish_reason="function_calls", content=calls, usage=usage, cached=False
                )
            )
        else:
            results.append(
                CreateResult(
                    finish_reason="stop", content=step.content or "", usage=usage, cached=False
                )
            )
    return ReplayChatCompletionClient(results, model_info=MODEL_INFO)


async def run_agent(client: ChatCompletionClient, task: str, *, team: bool = False) -> str:
    """Run the assistant on ``task`` until it answers with text; its last message.

    With ``team`` the assistant runs as the one participant of a ``RoundRobinGroupChat`` (the
    group-chat shape of the ExecWeave AutoGen acceptance run): AutoGen's agent runtime then
    delivers the task and reports its own message spans around the agent's.
    """
    agent = AssistantAgent(
        AGENT_NAME,
        model_client=client,
        tools=[
            FunctionTool(run_command, description="Run a command and return its output."),
            FunctionTool(write_file, description="Write text to a file."),
        ],
        max_tool_iterations=8,
        reflect_on_tool_use=False,
    )
    try:
        if team:
            result = await RoundRobinGroupChat([agent], max_turns=1).run(task=task)
        else:
            result = await agent.run(task=task)
    finally:
        await client.close()
    return str(result.messages[-1].to_text())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the AutoGen agent once and print its answer."""
    parser = argparse.ArgumentParser(description="An AutoGen AgentChat agent with shell tools.")
    support.add_common_arguments(parser)
    parser.add_argument(
        "--replay",
        action="store_true",
        help="use AutoGen's ReplayChatCompletionClient on the script (no model server)",
    )
    parser.add_argument(
        "--team", action="store_true", help="run the assistant inside a RoundRobinGroupChat"
    )
    args = parser.parse_args(argv)
    with support.setup_tracing(SERVICE_NAME):
        if args.replay:
            client: ChatCompletionClient = replay_client(model_server.load_script(args.script))
            answer = asyncio.run(run_agent(client, args.task, team=args.team))
        else:
            with support.model_endpoint(args.model_url, args.script) as base_url:
                client = OpenAIChatCompletionClient(
                    model=model_server.DEFAULT_MODEL,
                    base_url=base_url,
                    api_key="offline",
                    model_info=MODEL_INFO,
                )
                answer = asyncio.run(run_agent(client, args.task, team=args.team))
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
