"""A fake coding agent that reports only Claude Code / Codex CLI / Gemini CLI OTel log events,
run for real under ``otel-bridge observe`` (real OTLP export with the OTel SDK's log exporter, a
real pytest child process, real file writes, the real OS plane), then reviewed.

The review must have the user prompt, the tool calls, the pytest process linked to the tool call
whose stated window holds its start, the agent process found from its connection to the run's
OTLP endpoint, and (Codex, whose transcript holds the final message, and Gemini CLI, whose last
model response states it) each claim with the right status: the write and the test command
supported, a file never written contradicted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.review import validate_review

REPO = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).resolve().parent / "fake_coding_agent.py"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("opentelemetry.exporter.otlp") is None,
        reason="needs the OTLP exporters (the examples extra)",
    ),
]

FLAVORS = ("claude", "codex", "gemini")
AGENTS = {"claude": "claude_code", "codex": "codex", "gemini": "gemini_cli"}
TOOLS = {"gemini": ("write_file", "run_shell_command")}
"""The tool names of a flavor, when not ``write`` and ``shell``."""
RUNS = {
    "claude": ["--flavor", "claude"],
    "codex": ["--flavor", "codex"],
    "gemini": ["--flavor", "gemini"],
    "claude_traces": ["--flavor", "claude", "--traces"],  # Claude Code's traces beta too
}


def _env() -> dict[str, str]:
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def reviews(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every run observed at once, then reviewed (Codex with its transcript)."""
    dirs = {f: tmp_path_factory.mktemp(f) for f in RUNS}
    running = {}
    for flavor, tmp in dirs.items():
        (tmp / "work").mkdir()
        command = [sys.executable, "-m", "otel_bridge", "observe", "--no-progress", "--no-review"]
        command += ["-o", str(tmp / "run"), "--", sys.executable, str(AGENT), *RUNS[flavor]]
        if flavor == "codex":
            command += ["--transcript", str(tmp / "rollout.jsonl")]
        running[flavor] = subprocess.Popen(
            command,
            cwd=tmp / "work",
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    out = {}
    for flavor, process in running.items():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
        tmp = dirs[flavor]
        review = [sys.executable, "-m", "otel_bridge", "review", str(tmp / "run")]
        if flavor == "codex":
            review += ["--transcript", str(tmp / "rollout.jsonl")]
        done = subprocess.run(
            review, env=_env(), capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, done.stderr
        doc: dict[str, Any] = json.loads((tmp / "run" / "review.json").read_text())
        validate_review(doc)
        doc["_workspace"] = str((tmp / "work").resolve())
        doc["_summary"] = json.loads((tmp / "run" / "summary.json").read_text())
        out[flavor] = doc
    return out


def _nodes(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [n for n in doc["evidence"] if n["type"] == kind]


@pytest.mark.parametrize("flavor", FLAVORS)
def test_prompt_tool_calls_and_processes(flavor: str, reviews: dict[str, dict[str, Any]]) -> None:
    doc = reviews[flavor]
    (session,) = doc["sessions"]
    assert session["agents"] == [f"agent:{AGENTS[flavor]}"]
    (prompt,) = _nodes(doc, "user_message")
    assert prompt["text"].startswith("Add a greet function")
    write, shell = _nodes(doc, "tool_call")
    assert (write["tool"], shell["tool"]) == TOOLS.get(flavor, ("write", "shell"))
    assert write["status"] == shell["status"] == "ok"
    # Gemini CLI states no decision for a call that needed no confirmation
    assert write["decision"] == (None if flavor == "gemini" else "accept")
    procs = {n["id"]: n for n in _nodes(doc, "process_run")}
    agents = [p for p in procs.values() if p["role"] == "agent"]
    # The agent's events state no pid: its process is the one that held the loopback
    # connection they came over (the receiver's transport peer joined to the host plane).
    assert [p["rule"] for p in agents] == ["transport_peer"]
    assert "fake_coding_agent.py" in " ".join(agents[0]["argv"])
    assert len(shell["processes"]) == 1, (shell, list(procs.values()))
    (linked,) = shell["processes"]
    assert procs[linked]["argv"][1:] == ["-m", "pytest", "-q", "test_greet.py"]
    assert procs[linked]["rule"] == "tool_window"  # attributed by the stated window: inferred
    # placed in time on the events' clock: inside the call, after the agent started
    assert shell["time"] <= procs[linked]["time"] <= shell["end"]
    assert agents[0]["time"] <= write["time"]
    assert procs[linked]["exit_code"] == 0
    assert procs[linked]["check"]["name"] == "pytest"
    assert not [p for p in procs.values() if p["role"] == "undeclared"]
    records = {r for n in doc["evidence"] for r in n["records"]}
    assert any(r.startswith("sem.jsonl:") for r in records)  # the OTLP log records


@pytest.mark.parametrize("flavor", ["codex", "gemini"])
def test_claims_of_the_final_message(flavor: str, reviews: dict[str, dict[str, Any]]) -> None:
    doc = reviews[flavor]
    if not doc["run"]["coverage"]["files_available"]:
        pytest.skip("the OS plane could not watch files here (fanotify needs root)")
    got = {c["text"]: c["status"] for c in doc["claims"]}
    assert got == {
        "I wrote greet.py and test_greet.py.": "supported",
        "I ran `python -m pytest -q test_greet.py` and all tests passed.": "supported",
        "I also created notes.md with a summary.": "contradicted",
    }
    (final,) = _nodes(doc, "assistant_message")
    if flavor == "codex":
        assert final["records"] == ["rollout.jsonl:7"]  # file:line of the rollout
    else:  # Gemini CLI's last api_response, an OTLP log record of the run's stream
        (record,) = final["records"]
        assert record.startswith("sem.jsonl:")
    paths = {n.get("path") for n in _nodes(doc, "artifact")}
    assert not any(p and p.endswith("rollout.jsonl") for p in paths)  # the capture source


def test_a_logs_only_agent_is_said_to_have_sent_events_not_nothing(
    reviews: dict[str, dict[str, Any]],
) -> None:
    """Without traces the agent sends no spans, only log events: observe says that (not that
    it exported nothing), and with traces it says nothing of the kind."""
    (warning,) = [w for w in reviews["claude"]["_summary"]["otlp"]["warnings"] if "spans" in w]
    assert warning.startswith("the command sent no spans, only 6 log records")
    traced = reviews["claude_traces"]["_summary"]["otlp"]["warnings"]
    assert not [w for w in traced if "sent no spans" in w]


def test_claude_has_no_claims(reviews: dict[str, dict[str, Any]]) -> None:
    """Claude Code's events carry no assistant text: no claim is made up."""
    doc = reviews["claude"]
    assert doc["claims"] == []
    assert not _nodes(doc, "assistant_message")
    write, _ = _nodes(doc, "tool_call")
    written = {e["target"] for e in doc["edges"] if e["relation"] == "produces"}
    if doc["run"]["coverage"]["files_available"]:
        assert f"file:{doc['_workspace']}/greet.py" in written
    assert write["records"][0].startswith("sem.jsonl:")


def test_claude_code_traces_link_the_bash_process_exactly(
    reviews: dict[str, dict[str, Any]],
) -> None:
    """With Claude Code's traces beta on as well, the conversation is reviewed from its spans:
    the agent (``claude_code``), the model request, and the tool calls, each with the status
    its execution span states; the pytest process carried the tool's ``TRACEPARENT`` and is
    linked to the shell call exactly, not by time. The same conversation's log events are not
    made a second session."""
    doc = reviews["claude_traces"]
    (session,) = doc["sessions"]
    assert session["agents"] == ["agent:claude-code:claude_code"]
    (model,) = _nodes(doc, "model_call")
    assert model["model"] == "scripted-model"
    (prompt,) = _nodes(doc, "user_message")  # from the log event: the spans carry no text
    assert prompt["text"].startswith("Add a greet function")
    assert prompt["records"][0].startswith("sem.jsonl:")
    write, shell = _nodes(doc, "tool_call")
    assert (write["tool"], shell["tool"]) == ("write", "shell")
    assert (write["call_id"], shell["call_id"]) == ("toolu_01", "toolu_02")
    assert write["status"] == shell["status"] == "ok"
    # what only the log events say (the parameters, the decision) is kept on the span's call:
    # without it the written files would look undeclared (unreported_side_effect)
    assert json.loads(write["arguments"]) == {"files": ["greet.py", "test_greet.py"]}
    assert write["decision"] == shell["decision"] == "accept"
    assert len(write["records"]) == 3, write["records"]  # the span, the decision and result events
    assert doc["findings"] == []
    procs = {n["id"]: n for n in _nodes(doc, "process_run")}
    (linked,) = shell["processes"]
    assert procs[linked]["argv"][1:] == ["-m", "pytest", "-q", "test_greet.py"]
    assert "rule" not in procs[linked]  # linked, not attributed by a window
    assert [link["method"] for link in shell["links"]] == ["traceparent"]
    assert procs[linked]["check"]["name"] == "pytest"
    assert not [p for p in procs.values() if p["role"] in ("undeclared", "ambiguous")]
