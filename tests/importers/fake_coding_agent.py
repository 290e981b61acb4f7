"""A fake coding agent that reports itself the way Claude Code, Codex CLI or Gemini CLI do.

It emits no spans: only OTel *log events* over OTLP, with the event names and attributes of the
agent it imitates (``claude_code.*``, ``codex.*`` or ``gemini_cli.*``, see
``tests/testdata/codingagents/README.md``),
and with ``--flavor codex`` it also writes a rollout transcript (JSONL) like Codex's. Its work is
real: it writes ``greet.py`` and ``test_greet.py`` in its working directory itself (an in-process
``write`` tool) and runs ``python -m pytest -q test_greet.py`` as a child process (a ``shell``
tool). Its final message (Codex flavor; Gemini flavor: the last ``api_response``'s
``response_text``) claims the write, the test command, that the tests pass, and a file it never
wrote (``notes.md``).

With ``--traces`` (Claude flavor) it also exports the spans of Claude Code's traces beta
(``CLAUDE_CODE_ENHANCED_TELEMETRY_BETA=1``), shaped as its monitoring documentation lists them:
``claude_code.interaction`` per prompt, ``claude_code.llm_request`` (``gen_ai.system``,
``gen_ai.request.model``, ``model``), and per tool call ``claude_code.tool`` (``tool_name``,
``tool_use_id``, ``gen_ai.tool.call.id``) with children ``claude_code.tool.blocked_on_user``
(``decision``, ``source``) and ``claude_code.tool.execution`` (``success``); the standard
``session.id`` is on every span. As Claude Code's Bash tool does, the command it runs gets the
running span's context as ``TRACEPARENT``.

Usage: ``fake_coding_agent.py --flavor claude|codex|gemini [--transcript FILE] [--traces]`` under
``otel-bridge observe``, which sets ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``_PROTOCOL``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import json
import os
import subprocess
import sys
import time
import uuid
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

GREET = "def greet(name: str) -> str:\n    return f'hello {name}'\n"
TEST = (
    "from greet import greet\n\n\ndef test_greet() -> None:\n    assert greet('x') == 'hello x'\n"
)
PROMPT = "Add a greet function in greet.py with a test, and run the tests."
FINAL = (
    "I wrote greet.py and test_greet.py.\n"
    "I ran `python -m pytest -q test_greet.py` and all tests passed.\n"
    "I also created notes.md with a summary."
)
TEST_ARGV = [sys.executable, "-m", "pytest", "-q", "test_greet.py"]
PROMPT_ID = "fake-prompt-1"
_SERVICES = {
    "claude": ("claude-code", "com.anthropic.claude_code.events"),
    "codex": ("codex_exec", "codex_otel"),
    "gemini": ("gemini-cli", "gemini-cli"),
}
"""Each flavor's ``service.name`` and logger (instrumentation scope) name."""


_EXPORTERS = {
    ("logs", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc._log_exporter", "OTLPLogExporter"),
    ("logs", "http"): ("opentelemetry.exporter.otlp.proto.http._log_exporter", "OTLPLogExporter"),
    ("spans", "grpc"): (
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "OTLPSpanExporter",
    ),
    ("spans", "http"): (
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "OTLPSpanExporter",
    ),
}


def _exporter(signal: str = "logs") -> Any:
    """The SDK's OTLP exporter of ``signal`` for the protocol ``observe`` set."""
    grpc = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").startswith("grpc")
    module, name = _EXPORTERS[signal, "grpc" if grpc else "http"]
    exporter = getattr(importlib.import_module(module), name)
    return exporter(insecure=True) if grpc else exporter()


def _iso(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


class Agent:
    """Emits the flavor's events and (Codex) rollout lines."""

    def __init__(self, flavor: str, transcript: str | None) -> None:
        self.flavor = flavor
        self.session = str(uuid.uuid4())
        service, scope = _SERVICES[flavor]
        resource = {"service.name": service}
        if flavor == "gemini":  # Gemini CLI states the session on its resource too
            resource["session.id"] = self.session
        self.provider = LoggerProvider(resource=Resource.create(resource))
        self.provider.add_log_record_processor(SimpleLogRecordProcessor(_exporter()))
        self.logger = self.provider.get_logger(scope)
        self.rollout = open(transcript, "w", encoding="utf-8") if transcript else None  # noqa: SIM115
        self.calls = 0
        self.started_ms = 0
        self.tracer: trace.Tracer | None = None
        self.tracer_provider: TracerProvider | None = None

    def trace_spans(self) -> None:
        """Also export Claude Code's spans (its traces beta)."""
        resource = Resource.create({"service.name": "claude-code", "session.id": self.session})
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(_exporter("spans")))
        self.tracer = self.tracer_provider.get_tracer("com.anthropic.claude_code.tracing")

    def span(self, name: str, **attrs: Any) -> Any:
        """A Claude Code span (a no-op context without ``--traces``)."""
        if self.tracer is None:
            return contextlib.nullcontext(None)
        return self.tracer.start_as_current_span(
            name, attributes={"session.id": self.session, **attrs}
        )

    def shutdown(self) -> None:
        """Export what is left."""
        self.provider.shutdown()
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()

    def event(self, kind: str, **attrs: Any) -> None:
        """One OTel event of the flavor (Claude Code: short ``event.name`` and the full name as
        the body; Codex: the full name in ``event.name``; Gemini CLI: the full name in
        ``event.name``, its common ``session.id`` and ``installation.id``, typed values)."""
        now = time.time_ns()
        common: dict[str, Any] = {"event.timestamp": _iso(now)}
        if self.flavor == "claude":
            common |= {"session.id": self.session, "event.name": kind}
            body = f"claude_code.{kind}"
        elif self.flavor == "gemini":
            common |= {
                "session.id": self.session,
                "installation.id": "fake-installation",
                "event.name": f"gemini_cli.{kind}",
            }
            body = f"gemini_cli.{kind}"
        else:
            common |= {"conversation.id": self.session, "event.name": f"codex.{kind}"}
            body = f"codex.{kind}"
        values = {k: v for k, v in (common | attrs).items() if v is not None}
        self.logger.emit(timestamp=now, body=body, attributes=values)

    def line(self, kind: str, payload: dict[str, Any]) -> None:
        """One rollout line (Codex flavor only)."""
        if self.rollout is not None:
            record = {"timestamp": _iso(time.time_ns()), "type": kind, "payload": payload}
            self.rollout.write(json.dumps(record) + "\n")
            self.rollout.flush()

    def tool(self, name: str, arguments: dict[str, Any], run: Any) -> None:
        """One tool call: decision, call, the work, output and result events (inside the tool's
        spans with ``--traces``)."""
        self.calls += 1
        call_id = f"call_{self.calls}"
        use_id = f"toolu_{self.calls:02d}"
        args = json.dumps(arguments)
        with self.span("claude_code.tool", tool_name=name, tool_use_id=use_id) as tool:
            if tool is not None and self.calls == 1:  # older versions state tool_use_id only
                tool.set_attribute("gen_ai.tool.call.id", use_id)
            with self.span("claude_code.tool.blocked_on_user", decision="accept", source="config"):
                if self.flavor != "gemini":  # Gemini CLI logs a call once, when it finished
                    self.event(
                        "tool_decision",
                        tool_name=name,
                        call_id=call_id if self.flavor == "codex" else None,  # Claude names none
                        decision="accept",
                        source="config",
                    )
            self.line(
                "response_item",
                {"type": "function_call", "name": name, "arguments": args, "call_id": call_id},
            )
            with self.span("claude_code.tool.execution", tool_use_id=use_id) as execution:
                started = time.monotonic_ns()
                self.started_ms = time.time_ns() // 1_000_000  # Gemini CLI's start_time
                output, code = run()
                duration_ms = (time.monotonic_ns() - started) // 1_000_000
                if execution is not None:
                    execution.set_attribute("success", code == 0)
            self._results(name, call_id, args, output, code, duration_ms)

    def _results(  # noqa: PLR0917 (one tool call's outcome)
        self, name: str, call_id: str, args: str, output: str, code: int, duration_ms: int
    ) -> None:
        result = json.dumps({"output": output, "metadata": {"exit_code": code}})
        self.line(
            "response_item", {"type": "function_call_output", "call_id": call_id, "output": result}
        )
        success = "true" if code == 0 else "false"
        if self.flavor == "gemini":  # one event per finished call, typed values, no output
            self.event(  # no decision: the call needed no confirmation (yolo)
                "tool_call",
                function_name=name,
                function_args=json.dumps(json.loads(args), indent=2),
                duration_ms=duration_ms,
                success=code == 0,
                prompt_id=PROMPT_ID,
                tool_type="native",
                content_length=len(output),
                start_time=self.started_ms,
                end_time=time.time_ns() // 1_000_000,
            )
        elif self.flavor == "claude":
            self.event(
                "tool_result",
                tool_name=name,
                success=success,
                duration_ms=str(duration_ms),
                decision="accept",
                source="config",
                tool_parameters=args,
            )
        else:
            self.event(
                "tool_result",
                tool_name=name,
                call_id=call_id,
                arguments=args,
                duration_ms=str(duration_ms),
                success=success,
                output=output,
            )


def _write() -> tuple[str, int]:
    with open("greet.py", "w", encoding="utf-8") as f:
        f.write(GREET)
    with open("test_greet.py", "w", encoding="utf-8") as f:
        f.write(TEST)
    return "wrote greet.py, test_greet.py", 0


def _pytest() -> tuple[str, int]:
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # installed plugins are not ours
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)  # nothing without --traces (no span runs)
    if "traceparent" in carrier:
        env["TRACEPARENT"] = carrier["traceparent"]  # as Claude Code's Bash tool passes it
    done = subprocess.run(TEST_ARGV, capture_output=True, text=True, check=False, env=env)
    return done.stdout[-400:], done.returncode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flavor", choices=tuple(_SERVICES), required=True)
    parser.add_argument("--transcript")
    parser.add_argument("--traces", action="store_true")
    args = parser.parse_args()
    agent = Agent(args.flavor, args.transcript)
    if args.traces:
        agent.trace_spans()
    with agent.span("claude_code.interaction"):
        _turn(agent, args.flavor)
    agent.shutdown()
    return 0


def _turn(agent: Agent, flavor: str) -> None:
    """The prompt, a model request, two tool calls and the final message."""
    agent.line(
        "session_meta",
        {
            "id": agent.session,
            "timestamp": _iso(time.time_ns()),
            "cwd": os.getcwd(),
            "originator": "fake_coding_agent",
            "cli_version": "0.0.0-test",
        },
    )
    if flavor == "codex":
        agent.event("conversation_starts", model="scripted-model", provider_name="none")
    if flavor == "gemini":
        agent.event("config", model="scripted-model", approval_mode="yolo")  # not interpreted
        agent.event("user_prompt", prompt_length=len(PROMPT), prompt=PROMPT, prompt_id=PROMPT_ID)
        _gemini_request(agent, "write_file")  # one function call per model turn
        agent.tool("write_file", {"files": ["greet.py", "test_greet.py"]}, _write)
        _gemini_request(agent, "run_shell_command")
        agent.tool("run_shell_command", {"command": " ".join(TEST_ARGV)}, _pytest)
        _gemini_request(agent, "", FINAL)
        return
    agent.event("user_prompt", prompt_length=str(len(PROMPT)), prompt=PROMPT)
    agent.line(
        "response_item",
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]},
    )
    with agent.span(
        "claude_code.llm_request",
        model="scripted-model",
        **{"gen_ai.system": "anthropic", "gen_ai.request.model": "scripted-model"},
    ):
        agent.event(
            "api_request",
            model="scripted-model",
            duration_ms="3",
            input_tokens="10",
            output_tokens="5",
        )
    agent.tool("write", {"files": ["greet.py", "test_greet.py"]}, _write)
    agent.tool("shell", {"command": TEST_ARGV[1:]}, _pytest)
    agent.line(
        "response_item",
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": FINAL}],
        },
    )
    agent.line("event_msg", {"type": "agent_message", "message": FINAL})


def _gemini_request(agent: Agent, call: str, text: str = "") -> None:
    """A Gemini CLI model request of the agent's own (``role`` ``main``): ``api_request`` when
    sent, ``api_response`` when answered, whose ``response_text`` is the JSON of the streamed
    responses (a function call to ``call``, or the text ``text``), as Gemini CLI logs it; then,
    after a final answer, Gemini CLI's next-speaker check, a utility model call."""
    agent.event("api_request", model="scripted-model", prompt_id=PROMPT_ID, role="main")
    started = time.monotonic_ns()
    time.sleep(0.005)
    part: dict[str, Any] = {"functionCall": {"name": call, "args": {}}} if call else {"text": text}
    agent.event(
        "api_response",
        model="scripted-model-001",  # the model version that answered
        status_code=200,
        duration_ms=(time.monotonic_ns() - started) // 1_000_000,
        input_token_count=10,
        output_token_count=5,
        total_token_count=15,
        response_text=json.dumps(
            [{"candidates": [{"content": {"role": "model", "parts": [part]}}]}]
        ),
        prompt_id=PROMPT_ID,
        role="main",
    )
    if call:
        return
    verdict = json.dumps({"reasoning": "answered", "next_speaker": "user"})
    agent.event(
        "api_request", model="scripted-flash", prompt_id=PROMPT_ID, role="utility_next_speaker"
    )
    agent.event(
        "api_response",
        model="scripted-flash",
        status_code=200,
        duration_ms=1,
        response_text=json.dumps([{"candidates": [{"content": {"parts": [{"text": verdict}]}}]}]),
        prompt_id=PROMPT_ID,
        role="utility_next_speaker",
    )


if __name__ == "__main__":
    sys.exit(main())
