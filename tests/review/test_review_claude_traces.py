"""Claude Code's traces and its log events in one run: each prompt is reviewed once.

A run directory is written directly (``review_support.RunBuilder``): Claude Code's spans in
``sem.jsonl``, its log events in ``claude.jsonl`` as the collector's stream writes them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import msgspec
from review_support import RunBuilder, Session

from otel_bridge.graph.document import GraphNode
from otel_bridge.review import build_review

T1 = "11" * 16
CC = "cc-1"
MS = 1_000_000


def claude_log(kind: str, t: int, **attrs: str) -> str:
    """One Claude Code log event of conversation ``CC`` at ``t``, as an OTLP/JSON line."""
    values = {"session.id": CC, "event.name": kind, **attrs}
    record = {
        "timeUnixNano": str(t),
        "body": {"stringValue": f"claude_code.{kind}"},
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in values.items()],
    }
    resource = {
        "attributes": [
            {"key": "service.name", "value": {"stringValue": "claude-code"}},
            {"key": "process.pid", "value": {"intValue": "1"}},
        ]
    }
    scope = {"scope": {"name": "com.anthropic.claude_code.events"}, "logRecords": [record]}
    return json.dumps({"resourceLogs": [{"resource": resource, "scopeLogs": [scope]}]})


def _review(builder: RunBuilder, tmp_path: Path, *events: str) -> dict[str, Any]:
    run = builder.write(tmp_path / "run")
    (run / "claude.jsonl").write_text("\n".join(events) + "\n")
    doc, _ = build_review(str(run))
    return doc


def test_a_prompt_whose_root_span_was_lost_is_reviewed_once(tmp_path: Path) -> None:
    """The ``claude_code.interaction`` root (it ends last) was lost at exit; the prompt's model
    and tool spans arrived. Their time still marks the prompt as traced: its Write call is not
    imported again from the log events, and the file the agent wrote inside the call is the
    span session's artifact."""
    builder = RunBuilder()
    agent = "agent:claude-code:claude_code"
    builder.nodes[agent] = GraphNode(id=agent, kind="agent", label="claude_code")
    agent_process = builder.agent_process(agent)
    t = builder.tick(100)
    model = {"session.id": CC, "gen_ai.request.model": "m"}
    builder.add_span(T1, 2, "claude_code.llm_request", model, 1, duration_ms=20)
    tool_attrs = {"session.id": CC, "tool_name": "Write", "tool_use_id": "toolu_01"}
    tool = builder.add_span(T1, 3, "claude_code.tool", tool_attrs, 1, duration_ms=100)
    builder.edge(agent, "invoked", f"tool_call:{T1}:{tool.span_id.hex()}")
    at = tool.start_time_unix_nano + 50 * MS
    builder.edge(agent_process, "wrote", builder.file("/w/greet.py"), at=at, causal=True)
    doc = _review(
        builder,
        tmp_path,
        claude_log("user_prompt", t - 10 * MS, prompt="Write greet.py"),
        claude_log("tool_decision", tool.start_time_unix_nano + MS, tool_name="Write"),
        claude_log(
            "tool_result", tool.end_time_unix_nano + MS, tool_name="Write", duration_ms="99"
        ),
    )
    assert [n["label"] for n in doc["evidence"] if n["type"] == "tool_call"] == ["Write"]
    artifacts = [(n["session"], n["path"]) for n in doc["evidence"] if n["type"] == "artifact"]
    assert artifacts == [(f"session:{T1}", "/w/greet.py")]


def test_the_log_sessions_window_is_its_untraced_prompts_not_its_agents_life(
    tmp_path: Path,
) -> None:
    """A traced prompt (its spans' window) and, 10 s later, one whose spans were lost: the log
    session keeps the second prompt, with a window of its own events only (not the life of the
    agent process it found), so a child the agent spawned during the traced prompt, outside
    its tool call, is the traced session's undeclared child, not ambiguous between the two."""
    traced = Session(
        trace=T1,
        task="Do it.",
        answer="Done.",
        commands=[(["true"], 0, [], [])],
        stray=[["curl", "example.org"]],
    )
    builder = RunBuilder()
    start = builder.tick()
    builder.add(traced, first_span=1000)
    end = max(s.end_time_unix_nano for s in builder.spans)
    root = builder.add_span(T1, 999, "claude_code.interaction", {"session.id": CC}, 0)
    builder.spans[-1] = msgspec.structs.replace(
        root, start_time_unix_nano=start, end_time_unix_nano=end
    )
    agent_process = builder.agent_process(f"agent:agent-svc:{T1[:4]}")
    builder.nodes[agent_process] = dataclasses.replace(
        builder.nodes[agent_process], first_seen=start - 10**9, last_seen=end + 60 * 10**9
    )
    builder.clock = end + 10 * 10**9
    later, done = builder.tick(), builder.tick(500)
    doc = _review(
        builder,
        tmp_path,
        claude_log("user_prompt", start + 1, prompt="Do it."),
        claude_log("user_prompt", later, prompt="And now this."),
        claude_log("tool_result", done, tool_name="Read", duration_ms="100", success="true"),
    )
    log = next(s for s in doc["sessions"] if s["id"] == f"session:claude_code:{CC}")
    assert log["start"] == later
    curl = [
        (n["session"], n["role"])
        for n in doc["evidence"]
        if n["type"] == "process_run" and n["label"] == "curl"
    ]
    assert curl == [(f"session:{T1}", "undeclared")]
    prompts = {n["session"]: n["text"] for n in doc["evidence"] if n["type"] == "user_message"}
    assert prompts == {f"session:{T1}": "Do it.", log["id"]: "And now this."}
