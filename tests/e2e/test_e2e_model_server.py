"""The examples' scripted model server, over real loopback HTTP with real clients."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import model_server
from e2e_support import EXAMPLES, start_model_server, tool_script

SCRIPT = tool_script(
    {"name": "run_command", "arguments": {"command": "echo one"}},
    {"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}},
    final="finished",
)


@pytest.fixture
def server() -> Iterator[model_server.ScriptedModelServer]:
    """A model server on a thread, on the test script."""
    srv = model_server.serve_in_thread(model_server.parse_script(SCRIPT))
    yield srv
    srv.shutdown()
    srv.server_close()


def post(url: str, body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    """POST JSON; the status, the decoded body and the headers."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response), dict(response.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.load(exc), dict(exc.headers)


def test_first_request_gets_the_first_tool_call(server: model_server.ScriptedModelServer) -> None:
    """A new conversation is answered with step 0: a tool call with JSON arguments."""
    status, body, headers = post(
        f"{server.base_url}/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "go"}]},
    )
    assert status == 200
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "run_command"
    assert json.loads(call["function"]["arguments"]) == {"command": "echo one"}
    assert headers["x-request-id"] == body["id"]


def test_step_follows_the_assistant_turns(server: model_server.ScriptedModelServer) -> None:
    """The answer is the step indexed by the assistant messages already in the conversation."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    names = []
    for _ in range(4):
        _, body, _ = post(f"{server.base_url}/chat/completions", {"messages": history})
        message = body["choices"][0]["message"]
        names.append(
            message["tool_calls"][0]["function"]["name"]
            if message.get("tool_calls")
            else message["content"]
        )
        history.append(message)
    assert names == ["run_command", "write_file", "finished", "done"]


def test_ids_are_unique_per_server(server: model_server.ScriptedModelServer) -> None:
    """Response ids and tool call ids never repeat within one server."""
    ids = set()
    call_ids = set()
    for _ in range(5):
        _, body, _ = post(
            f"{server.base_url}/chat/completions", {"messages": [{"role": "user", "content": "x"}]}
        )
        ids.add(body["id"])
        call_ids.add(body["choices"][0]["message"]["tool_calls"][0]["id"])
    assert len(ids) == 5
    assert len(call_ids) == 5


def test_openai_client_parses_answers_and_streams(server: model_server.ScriptedModelServer) -> None:
    """The real ``openai`` client reads tool calls, the request id, and a streamed answer."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base_url, api_key="offline")
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])
    assert reply.choices[0].message.tool_calls[0].function.name == "run_command"
    assert reply._request_id == reply.id
    stream = client.chat.completions.create(
        model="m",
        messages=[
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "a"},
            {"role": "assistant", "content": "b"},
        ],
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "finished"
    client.close()


def test_streamed_tool_calls_reassemble(server: model_server.ScriptedModelServer) -> None:
    """A streamed tool-call turn carries the call's id, name and arguments in its chunks."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base_url, api_key="offline")
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "go"}], stream=True
    )
    calls = [tc for c in stream if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    client.close()
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("run_command", {"command": "echo one"})
    ]


def test_models_and_unknown_routes(server: model_server.ScriptedModelServer) -> None:
    """``GET /v1/models`` lists the scripted model; unknown routes and bad bodies are errors."""
    with urllib.request.urlopen(f"{server.base_url}/models", timeout=10) as response:
        assert json.load(response)["data"][0]["id"] == "scripted-model"
    status, body, _ = post(f"{server.base_url}/embeddings", {})
    assert status == 404
    assert "no route" in body["error"]["message"]
    status, body, _ = post(f"{server.base_url}/chat/completions", {"messages": "nope"})
    assert status == 400


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        ({}, "'steps' must be a non-empty list"),
        ({"steps": []}, "'steps' must be a non-empty list"),
        ({"steps": ["x"]}, "steps[0] must be an object"),
        ({"steps": [{"tool_calls": []}]}, "steps[0].tool_calls must be a non-empty list"),
        ({"steps": [{"tool_calls": [{"arguments": {}}]}]}, "needs a string 'name'"),
        ({"steps": [{"tool_calls": [{"name": "t", "arguments": []}]}]}, "arguments: not an object"),
        ({"steps": [{"text": "x"}]}, "needs 'content' (string) or 'tool_calls'"),
        ({"steps": [{"content": "x"}], "model": 3}, "'model' must be a string"),
    ],
)
def test_bad_scripts_are_refused(script: dict[str, Any], problem: str) -> None:
    """A malformed script is refused with a message naming the offending step."""
    with pytest.raises(ValueError, match="script: ") as info:
        model_server.parse_script(script)
    assert problem in str(info.value)


@settings(max_examples=50, deadline=None)
@given(
    steps=st.integers(min_value=1, max_value=6),
    assistants=st.integers(min_value=0, max_value=10),
    others=st.lists(st.sampled_from(["user", "tool", "system"]), max_size=10),
)
def test_step_index_counts_only_assistant_turns(
    steps: int, assistants: int, others: list[str]
) -> None:
    """Whatever the other messages, the step is the count of assistant turns (or the final)."""
    script = model_server.parse_script({"steps": [{"content": str(i)} for i in range(steps)]})
    messages = [{"role": "assistant"}] * assistants + [{"role": r} for r in others]
    step = script.step_for(messages)
    assert step.content == (str(assistants) if assistants < steps else "done")


def test_builtin_script_is_valid() -> None:
    """The built-in script parses and ends with a text answer."""
    script = model_server.load_script(None)
    assert script.steps[0].tool_calls[0].name == "run_command"
    assert script.steps[-1].content


def test_command_line_server_prints_its_url(tmp_path: Path) -> None:
    """Run as a program, the server prints its URL, answers, and stops on SIGTERM."""
    srv = start_model_server(SCRIPT, tmp_path)
    try:
        assert srv.url.startswith("http://127.0.0.1:")
        status, body, _ = post(f"{srv.url}/chat/completions", {"messages": []})
        assert status == 200
        assert body["choices"][0]["message"]["tool_calls"]
    finally:
        srv.stop()
    assert srv.process.returncode == 0


def test_command_line_rejects_a_bad_script(tmp_path: Path) -> None:
    """A bad script file makes the program exit 2 with a one-line reason."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"steps": []}', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "model_server.py"), "--script", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2
    assert "'steps' must be a non-empty list" in done.stderr
