"""The coding-agent importers on the built fixtures of ``tests/testdata/codingagents``.

Each fixture stream is put in a directory as a collector stream and read by the review's own
record reader, so the imported events point at the review's record ids (file:line[.n]).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from otel_bridge.graph.document import GraphNode
from otel_bridge.importers.codingagents import (
    AgentEvent,
    events_from_streams,
    events_from_transcript,
)
from otel_bridge.importers.sessions import build_sessions, record_order
from otel_bridge.model import ProcessFacts, Resource, Scope
from otel_bridge.review import build_review
from otel_bridge.review.evidence import Session, untraced_part
from otel_bridge.review.records import read_records
from otel_bridge.testing import SyntheticRun

DATA = Path(__file__).resolve().parents[1] / "testdata" / "codingagents"


def _streams(tmp_path: Path, name: str) -> tuple[list[Session], list[str], dict[str, str]]:
    shutil.copy(DATA / name, tmp_path / name)
    records = read_records(str(tmp_path))
    sessions = build_sessions(events_from_streams(str(tmp_path), records))
    coverage = [r.name for r in records.records if r.type == "coverage"]
    types = {r.id: r.type for r in records.records}
    return sessions, coverage, types


def test_claude_code_events(tmp_path: Path) -> None:
    sessions, coverage, types = _streams(tmp_path, "claude_code_logs.jsonl")
    assert [s.id for s in sessions] == ["session:claude_code:cc-session-1"]
    s = sessions[0]
    (prompt,) = s.of_type("user_message")
    assert prompt.data["text"] is None  # the prompt text was not logged: unknown, not empty
    assert prompt.records == ["claude_code_logs.jsonl:1"]
    bash, edit = s.of_type("tool_call")
    assert (bash.data["tool"], bash.data["status"], bash.data["decision"]) == (
        "Bash",
        "ok",
        "accept",
    )
    assert "pytest -q" in bash.data["arguments"]
    # the decision (line 3, first record) and the result (line 3, second record) are one call
    assert bash.records == ["claude_code_logs.jsonl:3", "claude_code_logs.jsonl:3.1"]
    assert bash.end is not None
    assert bash.time is not None
    assert bash.end - bash.time >= 750_000_000  # the stated duration is the call's window
    # ... and it opens at the joined decision (line 3, 0.12 s) when that is earlier than the
    # result's time minus its duration (0.90 - 0.75 s, less 2 ms of rounding)
    assert bash.time == 1_796_130_000_120_000_000
    assert (edit.data["tool"], edit.data["status"]) == ("Edit", "error")
    assert [m.data["model"] for m in s.of_type("model_call")] == ["claude-sonnet-4"] * 2
    assert coverage == ["claude_code.some_future_event: event not interpreted"]
    assert all(types[r] == "log" for n in s.nodes.values() for r in n.records)


def test_codex_events(tmp_path: Path) -> None:
    sessions, coverage, _ = _streams(tmp_path, "codex_logs.jsonl")
    (s,) = sessions
    assert s.id == "session:codex:019a0000-0000-7000-8000-000000000001"
    (prompt,) = s.of_type("user_message")
    assert prompt.data["text"] is None  # "[REDACTED]" is not the prompt
    (call,) = s.of_type("tool_call")
    assert call.id.endswith(":call_A")
    assert (call.data["call_id"], call.data["decision"], call.data["status"]) == (
        "call_A",
        "approved",
        "ok",
    )
    assert call.data["result"] == "3 passed in 0.10s"
    assert len(call.records) == 2
    assert coverage == ["codex.sse_event: event not interpreted"]


def test_codex_rollout(tmp_path: Path) -> None:
    records = read_records(str(tmp_path))  # no streams: only the transcript's records
    events = events_from_transcript(str(DATA / "codex_rollout.jsonl"), records)
    (s,) = build_sessions(events)
    assert s.trace_id == "019a0000-0000-7000-8000-000000000002"
    (control,) = s.of_type("control")
    assert control.data["text"].startswith("<environment_context>")
    (user,) = s.of_type("user_message")
    assert user.data["text"] == "Fix the failing test in calc.py"
    assert user.records == ["codex_rollout.jsonl:3"]
    sed, tests = s.of_type("tool_call")
    assert sed.data["tool"] == "shell"
    assert "calc.py" in sed.data["arguments"]
    assert sed.data["exit_code"] == 0
    assert sed.records == ["codex_rollout.jsonl:7", "codex_rollout.jsonl:8"]
    assert tests.data["result"] == "1 passed in 0.02s"
    assert tests.end is not None
    assert tests.time is not None
    assert tests.end > tests.time
    (final,) = s.of_type("assistant_message")
    assert "`pytest -q`" in final.data["text"]
    by_type: dict[str, list[int]] = {}
    for r in records.records:
        by_type.setdefault(r.type, []).append(r.line)
    assert by_type["coverage"] == [4, 5, 6, 11, 13]  # event_msg, turn_context, reasoning
    assert len(records.records) == 13  # every line is a record


def _claude(record: str, kind: str, ms: int, **attrs: str) -> AgentEvent:
    return AgentEvent(
        record, "claude_code", kind, "s", 1_796_130_000_000_000_000 + ms * 10**6, attrs
    )


def test_claude_code_result_joins_the_decision_it_states() -> None:
    """A rejected Bash call, then an accepted one: the accepted result is joined with the accept
    (its window opens there), and the rejected call stays a call of its own, with no result."""
    events = [
        _claude("r:1", "tool_decision", 0, tool_name="Bash", decision="reject"),
        _claude("r:2", "tool_decision", 100, tool_name="Bash", decision="accept"),
        _claude("r:3", "tool_result", 900, tool_name="Bash", decision="accept", duration_ms="700"),
    ]
    (s,) = build_sessions(events)
    rejected, ran = s.of_type("tool_call")
    assert (rejected.records, rejected.data["decision"], rejected.data["status"]) == (
        ["r:1"],
        "reject",
        "unset",
    )
    assert (ran.records, ran.data["decision"], ran.data["status"]) == (
        ["r:2", "r:3"],
        "accept",
        "unset",
    )
    assert ran.data["rule"] == "decision_order"
    # 100 ms (the accept), not 900 - 700 - 2 ms (the stated start): the decision came first
    assert ran.time == 1_796_130_000_100_000_000
    assert ran.end == 1_796_130_000_900_000_000


def test_a_decision_left_by_an_interrupted_call_does_not_widen_a_window() -> None:
    """An accepted Bash call that never reported a result, a Read call, then another accepted
    Bash call: which decision the result belongs to is a guess by order (two were pending), so
    the window stays the stated one (result minus duration), and the call left without a result
    states no end."""
    events = [
        _claude("r:1", "tool_decision", 0, tool_name="Bash", decision="accept"),
        _claude("r:2", "tool_result", 5000, tool_name="Read", decision="accept", duration_ms="100"),
        _claude("r:3", "tool_decision", 10000, tool_name="Bash", decision="accept"),
        _claude(
            "r:4", "tool_result", 11000, tool_name="Bash", decision="accept", duration_ms="900"
        ),
    ]
    (s,) = build_sessions(events)
    by_record = {c.records[-1]: c for c in s.of_type("tool_call")}
    ran = by_record["r:4"]
    assert ran.time == 1_796_130_000_000_000_000 + (11000 - 900 - 2) * 1_000_000
    left = by_record["r:3"]
    assert (left.data["status"], left.end) == ("unset", None)


def test_only_the_prompts_claude_codes_spans_missed_stay_in_its_log_session() -> None:
    """Two prompts; the spans of the first reached the collector (its trace's window), those of
    the second did not: the log session keeps the second prompt and its tool call, the first
    prompt's message moves into the span session (the spans carry no prompt text), and the log
    session is not made when every prompt was traced."""
    events = [
        _claude("r:1", "user_prompt", 0, prompt_length="5", prompt="first"),
        _claude("r:2", "tool_result", 900, tool_name="Bash", duration_ms="700"),
        _claude("r:3", "user_prompt", 5000, prompt_length="7"),
        _claude("r:4", "tool_result", 5900, tool_name="Edit", duration_ms="10"),
    ]
    base = 1_796_130_000_000_000_000
    traced = Session(id="session:" + "ab" * 16, trace_id="ab" * 16, spans=[])
    (s,) = build_sessions(events)
    left = untraced_part(s, [(base, base + 1000 * 1_000_000, traced)])
    assert left is not None
    assert [(n.type, n.label) for n in left.of_type("user_message", "tool_call")] == [
        ("user_message", "user prompt (text not logged)"),
        ("tool_call", "Edit"),
    ]
    assert (left.start, left.end) == (base + 5000 * 1_000_000, base + 5900 * 1_000_000)
    (moved,) = traced.of_type("user_message")
    assert (moved.session, moved.data["text"], moved.records) == (traced.id, "first", ["r:1"])
    (again,) = build_sessions(events)
    assert untraced_part(again, [(base, base + 10_000 * 1_000_000, traced)]) is None


def test_gemini_cli_events(tmp_path: Path) -> None:
    """Gemini CLI's events, shaped as its current versions log them: the prompt (logged by
    default), each tool call (one ``tool_call`` event after it finished; older versions log a
    whole batch at once), each model request joined with its response whatever model version
    answered, and the text of the agent's own responses (``role`` ``main``) as its messages."""
    sessions, coverage, types = _streams(tmp_path, "gemini_cli_logs.jsonl")
    assert [s.id for s in sessions] == ["session:gemini_cli:gm-session-1"]
    s = sessions[0]
    (prompt,) = s.of_type("user_message")
    assert prompt.data["text"] == "Fix mod.py and run the tests."
    ms = 1_000_000
    t0 = 1_796_130_000_000_000_000
    shell, write, rejected, read = sorted(
        s.of_type("tool_call"), key=lambda n: record_order(n.records[0])
    )
    assert (shell.data["tool"], shell.data["status"], shell.data["decision"]) == (
        "run_shell_command",
        "ok",
        None,  # it needed no confirmation
    )
    assert '"command": "pytest -q"' in shell.data["arguments"]
    # the batch was logged at 2.4 s: each call's window opens at the main response that asked
    # for them (0.82 s), not at the tool-internal response answered during the batch (1.5 s)
    assert (shell.time, shell.end) == (t0 + 820 * ms, t0 + 2400 * ms)
    assert (write.time, write.end) == (t0 + 820 * ms, t0 + 2400 * ms)
    assert shell.data["rule"] == write.data["rule"] == "since_model_response"
    assert (write.data["tool"], write.data["status"]) == ("write_file", "error")
    # a rejected call never ran: no window
    assert (rejected.data["decision"], rejected.data["rule"]) == ("reject", "rejected")
    assert rejected.time == rejected.end == t0 + 2400 * ms
    # a newer version states the call's start and end
    assert read.data["rule"] == "stated_times"
    assert (read.time, read.end) == (t0 + 3450 * ms - 2 * ms, t0 + 3591 * ms)
    calls = s.of_type("model_call")
    # main requests joined with their responses (model version differs), the utility calls with
    # theirs; the last main request had no response; the response of no role stands alone
    assert [(len(c.records), c.end is None) for c in calls] == [
        (2, False),
        (2, False),
        (2, False),
        (2, False),
        (1, True),
        (1, False),
    ]
    assert calls[0].time == t0 + 20 * ms
    (answer,) = s.of_type("assistant_message")  # the main text, without its thought part
    assert answer.data["text"] == "I ran `pytest -q` and all tests pass."
    assert answer.time == t0 + 3300 * ms
    assert coverage == [
        "gemini_cli.config: event not interpreted",
        "gemini_cli.api_response: response_text not read as the agent's message: no role says "
        "the agent's own model call made it (Gemini CLI before role was logged also logs its "
        "utility and tool-internal model calls)",
        "gemini_cli.tool_output_truncated: event not interpreted",
    ]
    assert all(types[r] == "log" for n in s.nodes.values() for r in n.records)


def test_gemini_cli_names_are_gemini_clis_only(tmp_path: Path) -> None:
    """``tool_call`` and ``api_response`` are read with Gemini CLI's meaning for Gemini CLI's
    events only: another agent's event of that name is a coverage record, not a call."""
    line = (DATA / "gemini_cli_logs.jsonl").read_text().splitlines()[3]
    other = line.replace("gemini_cli.api_response", "codex.api_response")
    (tmp_path / "codex.jsonl").write_text(other + "\n")
    records = read_records(str(tmp_path))
    assert build_sessions(events_from_streams(str(tmp_path), records)) == []
    assert [r.name for r in records.records if r.type == "coverage"] == [
        "codex.api_response: event not interpreted"
    ]


def test_records_of_one_instant_keep_their_order(tmp_path: Path) -> None:
    """Gemini CLI batches records into one request and stamps whole milliseconds: records
    ``x:1.9`` and ``x:1.10`` of one instant are read in that order, not as strings sort."""
    assert sorted(["s:1.10", "s:1.9", "s:2", "s:1"], key=record_order) == [
        "s:1",
        "s:1.9",
        "s:1.10",
        "s:2",
    ]


def test_a_prompt_said_twice_is_two_messages(tmp_path: Path) -> None:
    """One source logging the same prompt text twice is two prompts; only the OTel event and a
    transcript line of one prompt are one message."""
    _streams(tmp_path, "gemini_cli_logs.jsonl")
    prompt = next(e for e in _gemini_events(tmp_path) if e.kind == "user_prompt")
    again = AgentEvent(
        "gemini_cli_logs.jsonl:99",
        prompt.agent,
        prompt.kind,
        prompt.session,
        prompt.time,
        prompt.attrs,
    )
    (session,) = build_sessions([prompt, again])
    assert len(session.of_type("user_message")) == 2


def _gemini_events(tmp_path: Path) -> list[AgentEvent]:
    records = read_records(str(tmp_path))
    return events_from_streams(str(tmp_path), records)


MS, T0 = 1_000_000, 1_796_130_000_000_000_000


def _log(offset: int, name: str, session: str = "g1", **attrs: str | int) -> str:
    """One Gemini CLI event of ``session`` at ``offset`` ms, as an OTLP/JSON stream line."""
    values: dict[str, str | int] = {
        "session.id": session,
        "event.name": f"gemini_cli.{name}",
        "prompt_id": f"{session}-p1",
    }
    values |= attrs
    kvs = [
        {"key": k, "value": {"intValue" if isinstance(v, int) else "stringValue": str(v)}}
        for k, v in values.items()
    ]
    record = {"timeUnixNano": str(T0 + offset * MS), "attributes": kvs}
    scope = {"scopeLogs": [{"logRecords": [record]}], "resource": {"attributes": []}}
    return json.dumps({"resourceLogs": [scope]})


def _gemini_run(tmp_path: Path, lines: list[str], writes: list[tuple[int, str]]) -> Path:
    """A run directory: the agent process (``node gemini``, the run's root) that spawned ``ls``
    at 860 ms and wrote each of ``writes`` (ms, path); the stream ``lines``."""
    run = tmp_path / "run"
    builder = SyntheticRun(resource=Resource(), scope=Scope(name="t"), clock=T0)

    def process(pid: int, argv: list[str], start: int) -> str:
        node = f"process:h:{pid}:{pid}"
        facts = ProcessFacts(host_id="h", pid=pid, argv=tuple(argv), cwd="/w")
        builder.nodes[node] = GraphNode(
            id=node, kind="process", label=argv[0], facts=facts, first_seen=start
        )
        return node

    agent = process(1, ["node", "gemini"], T0)
    child = process(2, ["ls"], T0 + 860 * MS)
    builder.add_edge(agent, "spawned", child, at=T0 + 860 * MS, record="linux:1", causal=True)
    for offset, path in writes:
        builder.add_edge(agent, "wrote", builder.file(path), at=T0 + offset * MS, record="linux:2")
    run.mkdir()
    builder.write_graph(run / "graph.json", "t", {"collection.file.available": 1})
    (run / "sem.jsonl").write_text("\n".join(lines) + "\n")
    return run


def _turn(session: str, at: int, call_at: int, duration: int) -> list[str]:
    """A prompt at ``at`` ms, the agent's model request and response, and one tool call logged
    at ``call_at`` after ``duration`` ms."""
    return [
        _log(at, "user_prompt", session, prompt="list files"),
        _log(at + 10, "api_request", session, model="m", role="main"),
        _log(at + 145, "api_response", session, model="m", duration_ms=135, role="main"),
        _log(call_at, "tool_call", session, function_name="ls", duration_ms=duration),
    ]


def test_a_widened_gemini_window_takes_processes_not_the_agents_own_writes(
    tmp_path: Path,
) -> None:
    """A Gemini CLI call with no stated start: its window opens at the response that asked for
    it, so a child the agent process started after that response is the call's (by time), while
    the agent process's own write there (Gemini CLI writes its chat file after each response) is
    the agent's, not the call's; the same write after the stated start is the call's."""
    run = _gemini_run(
        tmp_path, _turn("g1", 700, 1000, 40), [(850, "/w/chat.json"), (965, "/w/list.txt")]
    )
    doc, _ = build_review(str(run))
    (call,) = [n for n in doc["evidence"] if n["type"] == "tool_call"]
    assert call["rule"] == "since_model_response"
    assert call["time"] == T0 + 845 * MS
    procs = {n["label"]: n for n in doc["evidence"] if n["type"] == "process_run"}
    assert (procs["ls"]["role"], procs["ls"]["rule"]) == ("tool", "tool_window")
    produced = {e["target"] for e in doc["edges"] if e["relation"] == "produces"}
    by_call = {
        e["target"]
        for e in doc["edges"]
        if e["relation"] == "produces" and e["source"] == call["id"]
    }
    assert "file:/w/list.txt" in by_call  # after the stated start (0.958 s)
    assert "file:/w/chat.json" in produced - by_call  # the agent process's own


def test_a_widened_window_does_not_give_a_shared_agents_write_to_one_session(
    tmp_path: Path,
) -> None:
    """Two Gemini CLI sessions of one process at once: a write of the process's own before a
    call's stated start, while both sessions ran, is no one session's (contested), not the
    session whose widened call window holds it."""
    lines = _turn("g1", 700, 1000, 40) + _turn("g2", 800, 1200, 100)
    doc, _ = build_review(str(_gemini_run(tmp_path, lines, [(850, "/w/chat.json")])))
    artifacts = {n.get("path") for n in doc["evidence"] if n["type"] == "artifact"}
    assert "/w/chat.json" not in artifacts
    contested = {s["id"]: s.get("contested_writes") for s in doc["sessions"]}
    assert all("/w/chat.json" in str(c) for c in contested.values()), contested


def test_an_event_sent_late_keeps_the_time_it_states(tmp_path: Path) -> None:
    """An event the agent buffered before its telemetry started is stamped when sent: its own
    ``event.timestamp`` (whole ms), more than a millisecond earlier, is when it happened."""
    attrs = [
        {"key": "session.id", "value": {"stringValue": "g1"}},
        {"key": "event.name", "value": {"stringValue": "gemini_cli.user_prompt"}},
        {"key": "event.timestamp", "value": {"stringValue": "2026-12-01T13:00:00.250Z"}},
        {"key": "prompt", "value": {"stringValue": "hi"}},
    ]
    sent = 1_796_130_005_000_000_000  # 4.75 s after the stated time
    record = {"timeUnixNano": str(sent), "attributes": attrs}
    line = {"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": [record]}]}]}
    (tmp_path / "s.jsonl").write_text(json.dumps(line) + "\n")
    (event,) = events_from_streams(str(tmp_path), read_records(str(tmp_path)))
    assert event.time == 1_796_130_000_250_000_000


def test_an_event_sent_twice_is_read_once(tmp_path: Path) -> None:
    """The same record sent again (a retry the ``file`` exporter wrote twice) is one event;
    the copy is a coverage record."""
    line = (DATA / "gemini_cli_logs.jsonl").read_text().splitlines()[1]
    (tmp_path / "s.jsonl").write_text(line + "\n" + line + "\n")
    records = read_records(str(tmp_path))
    (session,) = build_sessions(events_from_streams(str(tmp_path), records))
    assert len(session.of_type("user_message")) == 1
    assert [r.name for r in records.records if r.type == "coverage"] == [
        "gemini_cli.user_prompt: a copy of s.jsonl:1 (the same event sent again), read once"
    ]


def _gemini(record: int, kind: str, at_ms: int, **attrs: object) -> AgentEvent:
    values: dict[str, object] = {"prompt_id": "p1", **attrs}
    return AgentEvent(f"s:{record}", "gemini_cli", kind, "g1", at_ms * 1_000_000, values)


def test_a_gemini_window_opens_at_the_agents_last_response_before_the_call() -> None:
    """With roles logged, the asking response is the agent's own last one before the stated
    start: not an earlier text-only turn, not a utility call's response."""
    (session,) = build_sessions(
        [
            _gemini(1, "user_prompt", 0, prompt="go"),
            _gemini(2, "api_response", 1000, role="main", duration_ms=10),
            _gemini(3, "api_response", 1100, role="utility_next_speaker", duration_ms=10),
            _gemini(4, "api_response", 2000, role="main", duration_ms=10),
            _gemini(5, "tool_call", 2600, function_name="ls", duration_ms=500, success=True),
        ]
    )
    (call,) = session.of_type("tool_call")
    assert (call.time, call.data["rule"]) == (2000 * 1_000_000, "since_model_response")


def test_a_gemini_start_after_the_event_is_not_a_start() -> None:
    """A ``start_time`` later than the event's own time cannot be the call's start: the window
    comes from ``duration_ms`` instead, and a double start time is read as whole ms."""
    (session,) = build_sessions(
        [
            _gemini(1, "tool_call", 3000, function_name="a", duration_ms=100, start_time=3098),
            _gemini(2, "tool_call", 4000, function_name="b", duration_ms=10, start_time=3990.0),
        ]
    )
    late, double = session.of_type("tool_call")
    assert (late.time, late.data.get("rule")) == (2898 * 1_000_000, None)
    assert (double.time, double.data["rule"]) == (3988 * 1_000_000, "stated_times")
