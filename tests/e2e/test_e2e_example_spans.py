"""What each example agent itself sends over OTLP, before otel-bridge is involved.

Each example runs as a real process against a real model server and exports to a recording OTLP
server (gRPC or HTTP/protobuf, chosen by the standard environment variables), so these tests pin
the telemetry the end-to-end tests build on: GenAI / OpenInference spans, the declared command,
and the Resource that names the agent's process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import example_support
from e2e_support import (
    ModelServer,
    command_call,
    example,
    needs_autogen,
    needs_langgraph,
    start_model_server,
    tool_script,
    write_call,
)
from otlp_recorder import RecordingHttpTraceServer, RecordingTraceServer, attributes

pytestmark = [pytest.mark.slow, pytest.mark.examples]

SCRIPT = tool_script(
    command_call("sleep 0.05"),
    write_call("notes.txt", "hello\n"),
    command_call("cp notes.txt notes-copy.txt"),
)


@pytest.fixture
def grpc_recorder() -> Iterator[RecordingTraceServer]:
    """A recording OTLP/gRPC server."""
    server = RecordingTraceServer().start()
    yield server
    server.stop()


@pytest.fixture
def model(tmp_path: Path) -> Iterator[ModelServer]:
    """The model server on :data:`SCRIPT`, as its own process."""
    server = start_model_server(SCRIPT, tmp_path)
    yield server
    server.stop()


def run_example(argv: list[str], cwd: Path, endpoint: str, protocol: str) -> int:
    """Run an example with the standard OTLP environment; its pid."""
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
    }
    env.pop("EXAMPLE_MODEL_URL", None)
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0, out
    return process.pid


def check_resource(resource: dict[str, object], service: str, pid: int) -> None:
    """The Resource names the service and exactly the agent's process."""
    assert resource["service.name"] == service
    assert resource["process.pid"] == pid
    assert isinstance(resource["process.creation.time"], str)
    assert str(resource["process.creation.time"]).endswith("Z")
    assert resource["host.id"]


def test_plain_agent_reports_genai_spans(
    tmp_path: Path, grpc_recorder: RecordingTraceServer, model: ModelServer
) -> None:
    """The plain agent sends invoke_agent, chat and execute_tool spans with the declared command."""
    pid = run_example(
        example("plain_otel_agent.py", "--model-url", model.url, "--no-instrument"),
        tmp_path,
        f"http://127.0.0.1:{grpc_recorder.port}",
        "grpc",
    )
    assert grpc_recorder.wait_for(lambda r: len(list(r.spans())) >= 8)
    spans = list(grpc_recorder.spans())
    (agent,) = [s for _, s in spans if s.name == "invoke_agent plain-agent"]
    tools = [s for _, s in spans if s.name.startswith("execute_tool ")]
    chats = [s for _, s in spans if s.name == "chat scripted-model"]
    assert len(chats) == 4
    assert [attributes(s.attributes)["gen_ai.tool.call.arguments"] for s in tools] == [
        json.dumps({"command": "sleep 0.05"}),
        json.dumps({"path": "notes.txt", "content": "hello\n"}),
        json.dumps({"command": "cp notes.txt notes-copy.txt"}),
    ]
    assert {s.parent_span_id for s in tools + chats} == {agent.span_id}
    assert attributes(chats[0].attributes)["server.port"] == model.port
    assert attributes(chats[0].attributes)["gen_ai.response.id"] == "chatcmpl-1"
    for resource, _ in spans:
        check_resource(resource, "plain-otel-agent", pid)
    assert (tmp_path / "notes-copy.txt").read_text(encoding="utf-8") == "hello\n"


def test_plain_agent_exports_http_protobuf(tmp_path: Path, model: ModelServer) -> None:
    """With ``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`` the spans arrive over OTLP/HTTP."""
    recorder = RecordingHttpTraceServer().start()
    try:
        run_example(
            example("plain_otel_agent.py", "--model-url", model.url, "--no-instrument"),
            tmp_path,
            f"http://127.0.0.1:{recorder.port}",
            "http/protobuf",
        )
        assert recorder.wait_for(lambda r: len(r.span_named("invoke_agent plain-agent")) == 1)
        assert len([s for _, s in recorder.spans() if s.name.startswith("execute_tool")]) == 3
    finally:
        recorder.stop()


def test_plain_agent_propagates_traceparent_when_instrumented(
    tmp_path: Path, grpc_recorder: RecordingTraceServer, model: ModelServer
) -> None:
    """Instrumented, a tool's subprocess gets TRACEPARENT naming its execute_tool span."""
    pytest.importorskip("otel_bridge.instrument")
    script = tool_script(command_call("sh -c 'printenv TRACEPARENT > traceparent.txt'"))
    server = start_model_server(script, tmp_path)
    try:
        run_example(
            example("plain_otel_agent.py", "--model-url", server.url),
            tmp_path,
            f"http://127.0.0.1:{grpc_recorder.port}",
            "grpc",
        )
    finally:
        server.stop()
    assert grpc_recorder.wait_for(lambda r: len(r.span_named("execute_tool run_command")) == 1)
    ((_, tool),) = grpc_recorder.span_named("execute_tool run_command")
    version, trace_id, span_id, _flags = (
        (tmp_path / "traceparent.txt").read_text(encoding="utf-8").strip().split("-")
    )
    assert (version, trace_id, span_id) == ("00", tool.trace_id.hex(), tool.span_id.hex())


def test_ambiguous_agent_dispatches_identical_calls_together(
    tmp_path: Path, grpc_recorder: RecordingTraceServer
) -> None:
    """The negative control's two tool spans declare one command and start at one instant."""
    run_example(
        example("ambiguous_agent.py"),
        tmp_path,
        f"http://127.0.0.1:{grpc_recorder.port}",
        "grpc",
    )
    assert grpc_recorder.wait_for(lambda r: len(r.span_named("execute_tool run_command")) == 2)
    tools = [s for _, s in grpc_recorder.span_named("execute_tool run_command")]
    args = {attributes(s.attributes)["gen_ai.tool.call.arguments"] for s in tools}
    assert args == {json.dumps({"command": "sleep 0.4"})}
    assert tools[0].start_time_unix_nano == tools[1].start_time_unix_nano
    # Both ran at the same time: each lasted the sleep, and they overlapped.
    assert max(s.start_time_unix_nano for s in tools) < min(s.end_time_unix_nano for s in tools)


@needs_autogen
def test_autogen_agent_reports_its_own_spans(
    tmp_path: Path, grpc_recorder: RecordingTraceServer, model: ModelServer
) -> None:
    """AutoGen's own invoke_agent/execute_tool spans arrive, the tools' arguments attached."""
    pid = run_example(
        example("autogen_agent.py", "--model-url", model.url),
        tmp_path,
        f"http://127.0.0.1:{grpc_recorder.port}",
        "grpc",
    )
    assert grpc_recorder.wait_for(lambda r: len(r.span_named("invoke_agent autogen_assistant")))
    ((resource, agent),) = grpc_recorder.span_named("invoke_agent autogen_assistant")
    check_resource(resource, "autogen-agent", pid)
    tools = [s for _, s in grpc_recorder.spans() if s.name.startswith("execute_tool ")]
    assert [attributes(s.attributes)["gen_ai.tool.call.id"] for s in tools] == [
        "call_1",
        "call_2",
        "call_3",
    ]
    assert json.loads(str(attributes(tools[2].attributes)["gen_ai.tool.call.arguments"])) == {
        "command": "cp notes.txt notes-copy.txt"
    }
    assert {t.trace_id for t in tools} == {agent.trace_id}
    assert (tmp_path / "notes-copy.txt").read_text(encoding="utf-8") == "hello\n"


@needs_autogen
def test_autogen_agent_replay_client_needs_no_network(
    tmp_path: Path, grpc_recorder: RecordingTraceServer
) -> None:
    """With ``--replay`` AutoGen's ReplayChatCompletionClient drives the same tool calls."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    run_example(
        example("autogen_agent.py", "--replay", "--script", str(script)),
        tmp_path,
        f"http://127.0.0.1:{grpc_recorder.port}",
        "grpc",
    )
    assert grpc_recorder.wait_for(lambda r: len(r.span_named("execute_tool run_command")) == 2)
    assert (tmp_path / "notes-copy.txt").exists()


@needs_langgraph
def test_langgraph_agent_reports_openinference_spans(
    tmp_path: Path, grpc_recorder: RecordingTraceServer
) -> None:
    """OpenInference reports the LangGraph agent, its LLM turns and TOOL spans with the input."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT), encoding="utf-8")
    pid = run_example(
        example("langgraph_agent.py", "--script", str(script)),
        tmp_path,
        f"http://127.0.0.1:{grpc_recorder.port}",
        "grpc",
    )
    assert grpc_recorder.wait_for(lambda r: len(r.span_named("LangGraph")) == 1)
    kinds: dict[str, list[dict[str, object]]] = {}
    for resource, span in grpc_recorder.spans():
        check_resource(resource, "langgraph-agent", pid)
        attrs = attributes(span.attributes)
        kinds.setdefault(str(attrs.get("openinference.span.kind")), []).append(
            {"name": span.name, **attrs}
        )
    assert len(kinds["LLM"]) == 4
    assert {str(a["name"]) for a in kinds["AGENT"]} == {"agent"}
    tool_inputs = [(a["tool.name"], a["input.value"]) for a in kinds["TOOL"]]
    assert tool_inputs[0] == ("run_command", "sleep 0.05")
    assert tool_inputs[2] == ("run_command", "cp notes.txt notes-copy.txt")
    assert (tmp_path / "notes-copy.txt").exists()


def test_examples_run_without_an_endpoint(tmp_path: Path) -> None:
    """With no OTLP endpoint configured an example still runs and says it exports nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        example("plain_otel_agent.py", "--no-instrument"),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "spans are not exported" in done.stderr
    assert (tmp_path / "agent-notes.bak").exists()


def test_creation_time_format_matches_the_host_receiver() -> None:
    """The Resource's process.creation.time is ISO 8601 UTC with milliseconds, like OS events."""
    assert example_support.format_creation_time(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    attrs = example_support.process_resource_attributes()
    assert attrs["process.pid"] == os.getpid()


def test_agent_joins_an_inherited_trace(
    tmp_path: Path, grpc_recorder: RecordingTraceServer, model: ModelServer
) -> None:
    """An inherited TRACEPARENT parents the agent's spans; instrumented children get their own."""
    pytest.importorskip("otel_bridge.instrument")
    launcher_trace, launcher_span = "ab" * 16, "cd" * 8
    script = tool_script(command_call("sh -c 'printenv TRACEPARENT > traceparent.txt'"))
    server = start_model_server(script, tmp_path)
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{grpc_recorder.port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "TRACEPARENT": f"00-{launcher_trace}-{launcher_span}-01",
    }
    try:
        subprocess.run(
            example("plain_otel_agent.py", "--model-url", server.url),
            cwd=tmp_path,
            env=env,
            check=True,
            timeout=120,
            capture_output=True,
        )
    finally:
        server.stop()
    assert grpc_recorder.wait_for(lambda r: len(r.span_named("invoke_agent plain-agent")) == 1)
    ((_, agent),) = grpc_recorder.span_named("invoke_agent plain-agent")
    assert agent.trace_id.hex() == launcher_trace
    assert agent.parent_span_id.hex() == launcher_span
    ((_, tool),) = grpc_recorder.span_named("execute_tool run_command")
    child = (tmp_path / "traceparent.txt").read_text(encoding="utf-8").strip()
    assert child == f"00-{launcher_trace}-{tool.span_id.hex()}-01"


def test_uninstrumented_children_inherit_the_launcher_context(tmp_path: Path) -> None:
    """Without instrumentation the environment passes through untouched, TRACEPARENT included."""
    inherited = f"00-{'ef' * 16}-{'01' * 8}-01"
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(tool_script(command_call("sh -c 'printenv TRACEPARENT > traceparent.txt'"))),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    subprocess.run(
        example("plain_otel_agent.py", "--no-instrument", "--script", str(script)),
        cwd=tmp_path,
        env={**env, "TRACEPARENT": inherited},
        check=True,
        timeout=120,
        capture_output=True,
    )
    assert (tmp_path / "traceparent.txt").read_text(encoding="utf-8").strip() == inherited
