"""A negative control: two tool calls run the same command at the same time.

The model answers the first turn with two ``run_command`` tool calls declaring the identical
command, and the agent (the plain OpenTelemetry agent's loop, see ``plain_otel_agent.py``) runs
both at once on two threads, each inside its own ``execute_tool`` span. Two processes with the
same executable and arguments then start inside both declarations' correlation windows, so the
correct answer to "which process did this tool call start?" is *unknown*: otel-bridge must emit no
heuristic bridge for either tool call and count both as ambiguous (ExecWeave invariant I2).

The tool spans' context is deliberately not propagated into the subprocesses (no
``otel_bridge.instrument``; they inherit only the launcher's ``TRACEPARENT``, which names neither
tool call): with it the two processes would be told apart exactly, which is what the other
examples show.

Run: ``otel-bridge observe -- python examples/ambiguous_agent.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

import example_support as support
import plain_otel_agent

AGENT_NAME = "ambiguous-agent"
SERVICE_NAME = "ambiguous-agent"
COMMAND = "sleep 0.4"
"""Long enough that both processes are certainly alive together, whatever the backend."""

SCRIPT: dict[str, Any] = {
    "model": "scripted-model",
    "steps": [
        {
            "tool_calls": [
                {"name": "run_command", "arguments": {"command": COMMAND}},
                {"name": "run_command", "arguments": {"command": COMMAND}},
            ]
        },
        {"content": "Both ran; which process belongs to which call is not knowable."},
    ],
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the two identical tool calls concurrently and print the answer."""
    parser = argparse.ArgumentParser(description="Two identical concurrent tool calls.")
    support.add_common_arguments(parser)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        script = args.script
        if script is None and not args.model_url:
            script = f"{scratch}/script.json"
            with open(script, "w", encoding="utf-8") as f:
                json.dump(SCRIPT, f)
        with (
            support.setup_tracing(SERVICE_NAME, instrument=False),
            support.model_endpoint(args.model_url, script) as base_url,
        ):
            answer = plain_otel_agent.run_agent(
                base_url, args.task, "scripted-model", agent_name=AGENT_NAME, parallel=True
            )
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
