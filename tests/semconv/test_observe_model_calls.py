"""Under ``observe``: a real instrumented ``openai`` client's model call meets its connection.

Reproduction 5 of issue 12, end to end: the scripted model server runs as its own process,
``openai_chat_agent.py`` (the real ``openai`` client, OpenInference's instrumentor, only a root
chat span) runs under ``otel-bridge observe --backend strace``, and the graph must show the client
process as the model's caller (exact, by the resource pid) and the model ``served_at`` the
server's endpoint (inferred from time and process: OpenInference states no endpoint).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (_importable("openai") and _importable("openinference.instrumentation.openai")),
        reason="needs openai and openinference-instrumentation-openai (the examples extra)",
    ),
    pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace"),
]


@pytest.fixture
def model_url() -> Iterator[str]:
    """The scripted model server as its own process; its base URL."""
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "model_server.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # printed once it listens
        assert line.startswith("MODEL_SERVER_URL="), line
        yield line.strip().partition("=")[2]
    finally:
        server.terminate()
        server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()


def _observe(tmp_path: Path, *agent_args: str) -> dict[str, Any]:
    """``observe --backend strace`` of ``openai_chat_agent.py``: the run's graph document."""
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_bridge",
            "observe",
            "--backend",
            "strace",
            "--no-progress",
            "-o",
            str(run_dir),
            "--",
            sys.executable,
            str(HERE / "openai_chat_agent.py"),
            *agent_args,
        ],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (graph_file,) = sorted(run_dir.rglob("graph.json"))
    graph: dict[str, Any] = json.loads(graph_file.read_text())
    return graph


def test_root_chat_span_meets_its_process_and_endpoint(tmp_path: Path, model_url: str) -> None:
    graph = _observe(tmp_path, model_url)
    nodes = {n["id"]: n for n in graph["nodes"]}
    model = "model:openai:scripted-model"
    assert model in nodes
    port = int(model_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])
    endpoint = f"endpoint:tcp:127.0.0.1:{port}"
    callers = [e for e in graph["edges"] if e["relation"] == "requested" and e["target"] == model]
    (caller,) = [e for e in callers if nodes[e["source"]]["kind"] == "process"]
    client = nodes[caller["source"]]
    assert caller["identity_exact"] is True
    assert endpoint in {
        e["target"]
        for e in graph["edges"]
        if e["relation"] in ("connected_to", "attempted_connect") and e["source"] == client["id"]
    }
    (served,) = [e for e in graph["edges"] if e["relation"] == "served_at" and e["source"] == model]
    assert served["target"] == endpoint
    assert served["inferred"] is True
    assert served["grade"] == "D"
    # The model asked for a tool call (the scripted server's first step) and nothing ran it.
    assert graph["summary"]["coverage"].get("tool_call_not_observed") == 1
    assert not [e for e in graph["edges"] if e["relation"] == "asked_for"]


def test_output_tool_call_meets_the_tool_span_that_ran_it(tmp_path: Path, model_url: str) -> None:
    """The real client's output tool call (OpenInference ``llm.output_messages``) and the
    application's TOOL span stating its ``tool_call.id``: one ``asked_for`` edge, exact and
    non-causal, under a typed ``chain`` node; no ``tool_call_not_observed`` record."""
    graph = _observe(tmp_path, model_url, "--run-tool")
    nodes = {n["id"]: n for n in graph["nodes"]}
    (edge,) = [e for e in graph["edges"] if e["relation"] == "asked_for"]
    assert edge["source"] == "model:openai:scripted-model"
    tool = nodes[edge["target"]]
    assert tool["kind"] == "tool_call"
    assert tool["facts"]["tool"] == "run_command"
    assert tool["facts"]["call_id"] == "call_1"
    assert (edge["grade"], edge["causal"], edge["identity_exact"]) == ("C", False, True)
    assert len(edge["derived_support"]) == 2
    assert "tool_call_not_observed" not in graph["summary"]["coverage"]
    (chain,) = [n for n in graph["nodes"] if n["kind"] == "chain"]
    assert chain["facts"]["type"] == "operation"
    assert chain["label"] == "session"
