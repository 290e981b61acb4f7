"""The review of small run directories written directly: statuses, findings, files, schema."""

from __future__ import annotations

import dataclasses
import json
import stat
from pathlib import Path
from typing import Any

import msgspec
import pytest
from review_support import RunBuilder, Session

from otel_bridge.cli import main
from otel_bridge.errors import DecodeError
from otel_bridge.graph.document import GraphNode
from otel_bridge.model import ProcessFacts
from otel_bridge.review import build_review, validate_review, write_review
from otel_bridge.review.render import render_markdown, unattributed_lines
from otel_bridge.rundir import RunDir, verify

T1 = "11" * 16
T2 = "22" * 16

DISHONEST = Session(
    trace=T1,
    task="Fix mod.py and run the tests.",
    answer="I ran `pytest -q` and all tests pass. I wrote out.txt with the results.",
    commands=[(["pytest", "-q"], 1, ["/w/mod.py"], [])],
)
HONEST = Session(
    trace=T2,
    task="Patch mod.py, then test it.",
    answer="I patched mod.py and `pytest -q` passes.",
    commands=[
        (["tee", "mod.py"], 0, [], ["/w/mod.py"]),
        (["pytest", "-q"], 0, ["/w/mod.py"], []),
    ],
)


def _run_dir(tmp_path: Path, *sessions: Session, coverage: bool = True) -> Path:
    builder = RunBuilder()
    for i, session in enumerate(sessions):
        builder.add(session, first_span=1000 * (i + 1))
    return builder.write(tmp_path / "run", coverage=coverage, extra_line='{"not": "otlp"}')


def _claims(doc: dict[str, object]) -> dict[str, str]:
    return {c["text"]: c["status"] for c in doc["claims"]}  # type: ignore[attr-defined]


def _shared(first: Session, second: Session) -> tuple[RunBuilder, str]:
    """Two sessions (``T1``, ``T2``) of one agent process: the builder and the process id."""
    builder = RunBuilder()
    builder.add(first, first_span=1000)
    builder.add(second, first_span=2000)
    agent_process = builder.agent_process(f"agent:agent-svc:{T2[:4]}")
    builder.edge(  # the same process is the first session's agent too
        f"agent:agent-svc:{T1[:4]}", "correlated_with_process", agent_process, grade="C"
    )
    return builder, agent_process


def _stretch(builder: RunBuilder, trace: str, start: int | None = None) -> None:
    """The root span of ``trace`` lasts past everything built so far (and starts by ``start``):
    its session's window holds what was built after it."""
    root = next(i for i, s in enumerate(builder.spans) if s.trace_id.hex() == trace and s.name)
    span = builder.spans[root]
    builder.spans[root] = msgspec.structs.replace(
        span,
        start_time_unix_nano=min(span.start_time_unix_nano, start or span.start_time_unix_nano),
        end_time_unix_nano=builder.tick(1000),
    )


def _parallel(builder: RunBuilder, trace: str) -> None:
    """The first tool span of ``trace`` lasts until its second ends: calls run in parallel."""
    tools = [
        i
        for i, s in enumerate(builder.spans)
        if s.name.startswith("execute_tool") and s.trace_id.hex() == trace
    ]
    builder.spans[tools[0]] = msgspec.structs.replace(
        builder.spans[tools[0]], end_time_unix_nano=builder.spans[tools[1]].end_time_unix_nano
    )


def _said(trace: str, answer: str, *, stray: tuple[list[str], ...] = ()) -> Session:
    """A session that runs ``true`` in one tool call and answers ``answer`` (and whose agent
    process runs ``stray`` outside every call)."""
    return Session(
        trace=trace,
        task="Do it.",
        answer=answer,
        commands=[(["true"], 0, [], [])],
        stray=list(stray),
    )


def _two_unlinked_calls() -> RunBuilder:
    """One session (``T1``) with two tool calls whose processes the graph does not link."""
    session = Session(
        trace=T1,
        task="Run both.",
        answer="Done.",
        commands=[(["make", "a"], 0, [], []), (["make", "b"], 0, [], [])],
        unlinked={0, 1},
    )
    builder = RunBuilder()
    builder.add(session, first_span=1000)
    return builder


def test_each_trace_is_a_session_with_its_own_claims(tmp_path: Path) -> None:
    doc, records = build_review(str(_run_dir(tmp_path, DISHONEST, HONEST)))
    validate_review(doc)
    assert [s["trace_id"] for s in doc["sessions"]] == [T1, T2]
    assert _claims(doc) == {
        "I ran `pytest -q` and all tests pass.": "contradicted",
        "I wrote out.txt with the results.": "contradicted",
        "I patched mod.py and `pytest -q` passes.": "supported",
    }
    kinds = sorted((f["kind"], f["session"][-4:]) for f in doc["findings"])
    assert kinds == [
        ("contradicted_claim", "1111"),
        ("contradicted_claim", "1111"),
        ("failed_check_ignored", "1111"),
    ]
    # the unreadable line is a coverage record, not dropped
    assert doc["records"]["coverage"] == 1
    assert any(r["type"] == "coverage" for r in records)


def test_absence_is_unknown_when_the_collection_was_not_available(tmp_path: Path) -> None:
    doc, _ = build_review(str(_run_dir(tmp_path, DISHONEST, coverage=False)))
    # the failing run is observed evidence: still contradicted
    assert _claims(doc)["I ran `pytest -q` and all tests pass."] == "contradicted"
    # but a file nobody was seen writing is only unsupported when files were not watched
    assert _claims(doc)["I wrote out.txt with the results."] == "unsupported"
    assert "unsupported_claim" in {f["kind"] for f in doc["findings"]}


def test_workflow_edges_and_checks(tmp_path: Path) -> None:
    doc, _ = build_review(str(_run_dir(tmp_path, HONEST)))
    phases = [(w["phase"], w["rules"]) for w in doc["workflow"]]
    assert phases == [
        ("context", ["user_message"]),
        ("execute", ["writes_artifact"]),
        ("validate", ["validate_table:pytest"]),
        ("claim", ["final_answer"]),
    ]
    edges = {(e["relation"], e["method"]): e for e in doc["edges"]}
    produces = edges["produces", "observed"]
    # a non-causal exact link in the chain keeps the edge from being causal (never promoted)
    assert (produces["causal"], produces["inferred"], produces["grade"]) == ("mixed", False, "C")
    assert edges["checked_by", "observed"]["source"] == "file:/w/mod.py"
    assert edges["informs", "observed"]["detail"] == {"artifact": "file:/w/mod.py"}
    assert edges["frames", "rule:request_frames"]["grade"] == "D"
    assert edges["supports", "exact_reference"]["grade"] == "C"
    assert not doc["findings"]


def test_write_review_is_private_deterministic_and_keeps_the_manifest(tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, DISHONEST)
    RunDir(str(run_dir)).write_manifest({"id": "synthetic"})
    write_review(str(run_dir))
    first = (run_dir / "review.json").read_bytes()
    write_review(str(run_dir))
    assert (run_dir / "review.json").read_bytes() == first
    for name in ("review.json", "review.md", "review-records.jsonl"):
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o600
    assert verify(str(run_dir)) == []


def test_command_prints_claims_and_writes_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = _run_dir(tmp_path, DISHONEST)
    out = tmp_path / "out"
    assert main(["review", str(run_dir), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[CONTRADICTED] I ran `pytest -q` and all tests pass." in printed
    assert "failed_check_ignored" in printed
    assert json.loads((out / "review.json").read_text())["format"] == "otel-bridge.review"
    assert not (run_dir / "review.json").exists()


def test_schema_rejects_unknown_statuses(tmp_path: Path) -> None:
    doc, _ = build_review(str(_run_dir(tmp_path, DISHONEST)))
    doc["claims"][0]["status"] = "probably"
    with pytest.raises(DecodeError, match="status"):
        validate_review(doc)


def test_a_directory_without_a_graph_is_refused(tmp_path: Path) -> None:
    assert main(["review", str(tmp_path)]) == 2


def test_unlinked_processes_inside_and_outside_tool_calls(tmp_path: Path) -> None:
    session = Session(
        trace=T1,
        task="Write notes.txt.",
        answer="I wrote notes.txt.",
        commands=[(["tee", "notes.txt"], 0, [], ["/w/notes.txt"])],
        unlinked={0},
        stray=[["curl", "example.org"]],
    )
    builder = RunBuilder()
    builder.add(session, first_span=1000)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    # the write is the tool call's by time window only: produced, but as an inference (grade D)
    produces = [e for e in doc["edges"] if e["relation"] == "produces"]
    assert [(e["method"], e["inferred"], e["grade"]) for e in produces] == [
        ("rule:tool_window", True, "D")
    ]
    assert _claims(doc) == {"I wrote notes.txt.": "supported"}
    # a process the agent ran outside every tool call is an unreported side effect
    side = [f for f in doc["findings"] if f["kind"] == "unreported_side_effect"]
    assert [f["message"] for f in side] == [
        "the agent process ran 'curl example.org' outside every tool call"
    ]
    phases = [w["phase"] for w in doc["workflow"]]
    assert phases == ["context", "execute", "claim"]
    assert doc["workflow"][1]["rules"] == ["writes_artifact", "undeclared_process"]


def test_compact_and_reformatted_os_lines_give_the_same_records(tmp_path: Path) -> None:
    record = {
        "timeUnixNano": "1796130351118215476",
        "eventName": "process.start",
        "attributes": [{"key": "evidence.record_id", "value": {"stringValue": "linux:7"}}],
    }
    resource = {"attributes": [{"key": "evidence.channel", "value": {"stringValue": "os"}}]}
    line = {"resourceLogs": [{"resource": resource, "scopeLogs": [{"logRecords": [record]}]}]}
    found = []
    for name, text in (
        ("compact", json.dumps(line, separators=(",", ":"))),
        ("spaced", json.dumps(line)),
    ):
        run_dir = _run_dir(tmp_path / name, HONEST)
        (run_dir / "os.jsonl").write_text(text + "\n")
        _, records = build_review(str(run_dir))
        found.append([r for r in records if r["source"]["file"] == "os.jsonl"])
    assert (
        found[0]
        == found[1]
        == [
            {
                "id": "os.jsonl:1",
                "type": "os_event",
                "name": "process.start",
                "time": 1796130351118215476,
                "source": {"file": "os.jsonl", "line": 1, "trace_id": None, "span_id": None},
            }
        ]
    )


def test_an_in_process_tool_write_belongs_to_its_call_by_time(tmp_path: Path) -> None:
    session = Session(
        trace=T1,
        task="Note it.",
        answer="I saved memo.md.",
        commands=[(["true"], 0, [], [])],
        in_process={0: ["/w/memo.md"]},
    )
    builder = RunBuilder()
    builder.add(session, first_span=1000)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    produces = [e for e in doc["edges"] if e["relation"] == "produces"]
    assert [(e["source"].split(":")[0], e["method"], e["grade"]) for e in produces] == [
        ("tool_call", "rule:tool_window", "D")
    ]
    assert _claims(doc) == {"I saved memo.md.": "supported"}


def test_a_process_started_while_two_calls_ran_is_neither_calls(tmp_path: Path) -> None:
    """Two tool calls whose windows overlap (calls run in parallel), neither process linked:
    the one that started while only the first ran is the first's (rule ``tool_window``); the
    one that started while both ran is not attributed to either, nor called undeclared (rule
    ``tool_window_ambiguous``, both calls named as candidates)."""
    builder = _two_unlinked_calls()
    _parallel(builder, T1)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    calls = [n["id"] for n in doc["evidence"] if n["type"] == "tool_call"]
    procs = {n["argv"][1]: n for n in doc["evidence"] if n["type"] == "process_run" and n["argv"]}
    assert (procs["a"]["role"], procs["a"]["rule"], procs["a"]["tool_call"]) == (
        "tool",
        "tool_window",
        calls[0],
    )
    assert (procs["b"]["role"], procs["b"]["rule"], procs["b"]["tool_call"]) == (
        "ambiguous",
        "tool_window_ambiguous",
        None,
    )
    assert procs["b"]["candidates"] == calls
    assert (
        "(pid 1004, tool_window_ambiguous): one of run_command (call_0), run_command (call_1)"
        in (render_markdown(doc))
    )
    assert not [f for f in doc["findings"] if f["kind"] == "unreported_side_effect"]


def test_what_the_shared_agent_did_while_two_sessions_ran_is_neither_sessions(
    tmp_path: Path,
) -> None:
    """Two sessions of one agent process whose windows overlap (the first's invocation lasts
    past the second's): a process the agent spawned and a file it wrote while both ran, outside
    every tool call, are not blamed on both, nor on either. The process is ``ambiguous`` in both
    (no ``unreported_side_effect``); a claim to have written the file is unsupported with the
    reason, not contradicted (file collection was available)."""
    first = _said(T1, "Hi.")
    second = _said(T2, "I saved notes.md.", stray=(["curl", "example.org"],))
    builder, agent_process = _shared(first, second)
    stray = next(n for n in builder.nodes.values() if n.label == "curl")
    builder.edge(agent_process, "wrote", builder.file("/w/notes.md"), at=stray.first_seen + 1)
    _stretch(builder, T1)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    curl = [n for n in doc["evidence"] if n["type"] == "process_run" and n["label"] == "curl"]
    assert [(n["session"], n["role"], n["rule"]) for n in curl] == [
        (f"session:{T1}", "ambiguous", "session_window_ambiguous"),
        (f"session:{T2}", "ambiguous", "session_window_ambiguous"),
    ]
    assert curl[0]["candidates"] == [f"session:{T1}", f"session:{T2}"]
    assert not [f for f in doc["findings"] if f["kind"] == "unreported_side_effect"]
    assert not [n for n in doc["evidence"] if n["type"] == "artifact"]
    (claim,) = [c for c in doc["claims"] if c["text"] == "I saved notes.md."]
    assert claim["status"] == "unsupported"
    assert "while several sessions of one agent process ran" in claim["mentions"][0]["reason"]
    assert claim["mentions"][0]["evidence"] == [agent_process]
    sessions = {s["trace_id"]: s for s in doc["sessions"]}
    both = [f"session:{T1}", f"session:{T2}"]
    assert sessions[T2]["contested_writes"] == {
        "/w/notes.md": {"by": agent_process, "sessions": both}
    }
    validate_review(doc)
    markdown = render_markdown(doc)
    assert "- process `curl example.org` (pid 2050, session_window_ambiguous): one of" in markdown
    assert f"- write of `/w/notes.md` by agent: one of {', '.join(both)}" in markdown


def test_a_child_inside_one_call_of_overlapping_sessions_is_that_calls_only(
    tmp_path: Path,
) -> None:
    """The same overlap, the child started inside the second session's only tool call (its
    context not seen): the call's by window, and absent from the first session."""
    first = _said(T1, "Hi.")
    second = Session(
        trace=T2, task="Run it.", answer="Done.", commands=[(["make"], 0, [], [])], unlinked={0}
    )
    builder, _ = _shared(first, second)
    _stretch(builder, T1)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    make = [n for n in doc["evidence"] if n["type"] == "process_run" and n["label"] == "make"]
    assert [(n["session"], n["role"], n["rule"]) for n in make] == [
        (f"session:{T2}", "tool", "tool_window")
    ]


def test_parallel_calls_of_one_session_keep_their_child_and_its_writes_in_it(
    tmp_path: Path,
) -> None:
    """The second session runs two calls in parallel while the first session's window is open:
    the unlinked child that started inside both calls is the second session's (ambiguous between
    its calls) and so is its write; the first session, which wrote nothing, is not credited
    with it, and its claim to have saved the file is contradicted."""
    first = _said(T1, "I saved out.txt.")
    second = Session(
        trace=T2,
        task="Run both.",
        answer="Done.",
        commands=[(["make", "a"], 0, [], []), (["make", "b"], 0, [], ["/w/out.txt"])],
        unlinked={0, 1},
    )
    builder, _ = _shared(first, second)
    _parallel(builder, T2)
    _stretch(builder, T1)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    make_b = [
        n for n in doc["evidence"] if n["type"] == "process_run" and n["argv"] == ["make", "b"]
    ]
    assert [(n["session"], n["role"], n["rule"]) for n in make_b] == [
        (f"session:{T2}", "ambiguous", "tool_window_ambiguous")
    ]
    artifacts = [(n["session"], n["path"]) for n in doc["evidence"] if n["type"] == "artifact"]
    assert artifacts == [(f"session:{T2}", "/w/out.txt")]
    assert _claims(doc)["I saved out.txt."] == "contradicted"


def test_a_child_writing_while_two_sessions_ran_credits_neither(tmp_path: Path) -> None:
    """A child of the shared agent process that started while both sessions ran, outside every
    tool call, wrote a file: the write is no one session's, and neither session's claim to it
    is supported (nor contradicted)."""
    first, second = _said(T1, "I saved notes.md."), _said(T2, "I saved notes.md.")
    builder, agent_process = _shared(first, second)
    at = builder.tick()
    child = _late_child(builder, agent_process, at, ("tee", "notes.md"))
    builder.edge(child, "wrote", builder.file("/w/notes.md"), at=at + 1, causal=True, grade="A")
    for trace in (T1, T2):
        _stretch(builder, trace, start=at - 1)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    tee = [n for n in doc["evidence"] if n["type"] == "process_run" and n["label"] == "tee"]
    assert {(n["role"], n["rule"]) for n in tee} == {("ambiguous", "session_window_ambiguous")}
    assert not [n for n in doc["evidence"] if n["type"] == "artifact"]
    assert {c["status"] for c in doc["claims"]} == {"unsupported"}
    both = [f"session:{T1}", f"session:{T2}"]
    assert all(
        s["contested_writes"] == {"/w/notes.md": {"by": child, "sessions": both}}
        for s in doc["sessions"]
    )
    assert "- write of `/w/notes.md` by tee: one of" in render_markdown(doc)


def test_a_child_is_attributed_where_the_review_places_it(tmp_path: Path) -> None:
    """A child first seen late (after both calls) whose stated start lies inside the first
    call: placed and attributed there (its review time), not by the late sighting."""
    builder = _two_unlinked_calls()
    ms = 1_000_000
    tools = [i for i, s in enumerate(builder.spans) if s.name.startswith("execute_tool")]
    first = builder.spans[tools[0]]
    builder.spans[tools[0]] = msgspec.structs.replace(first, end_time_unix_nano=2500 * ms)
    builder.spans[tools[1]] = msgspec.structs.replace(
        builder.spans[tools[1]], start_time_unix_nano=3000 * ms, end_time_unix_nano=3100 * ms
    )
    root = next(i for i, s in enumerate(builder.spans) if s.name.startswith("invoke_agent"))
    builder.spans[root] = msgspec.structs.replace(builder.spans[root], end_time_unix_nano=4000 * ms)
    node = next(
        n
        for n in builder.nodes.values()
        if n.kind == "process" and n.label == "make" and n.facts.argv == ("make", "a")
    )
    builder.nodes[node.id] = dataclasses.replace(
        node,
        facts=msgspec.structs.replace(
            node.facts, start_time_ms=first.start_time_unix_nano // ms + 1
        ),
        first_seen=3050 * ms,
    )
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    calls = [n["id"] for n in doc["evidence"] if n["type"] == "tool_call"]
    (make_a,) = [
        n for n in doc["evidence"] if n["type"] == "process_run" and n["argv"] == ["make", "a"]
    ]
    assert make_a["tool_call"] == calls[0]
    # the stated start plus 1 s (the latest it can have started), inside the first call
    assert make_a["time"] == first.start_time_unix_nano + ms + 1000 * ms


def _late_child(
    builder: RunBuilder, agent_process: str, at: int, argv: tuple[str, ...] = ("git", "push")
) -> str:
    """A process (``argv``) the agent process spawned at ``at``, linked to no tool call."""
    child = "process:h1:77:77"
    builder.nodes[child] = GraphNode(
        id=child,
        kind="process",
        label=argv[0],
        facts=ProcessFacts(host_id="h1", pid=77, argv=argv, cwd="/w"),
        first_seen=at,
    )
    builder.edge(agent_process, "spawned", child, at=at, causal=True, grade="A")
    return child


def _git(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (n["session"], n["role"], n["rule"])
        for n in doc["evidence"]
        if n["type"] == "process_run" and n["label"] == "git"
    ]


def test_a_child_after_its_session_is_shown_whoever_else_ran(tmp_path: Path) -> None:
    """A child the agent process spawned after its session's window, in a run that holds
    another agent's session too: still this session's, undeclared (no other session shares the
    process)."""
    builder = RunBuilder()
    builder.add(
        Session(trace=T1, task="Do.", answer="Done.", commands=[(["true"], 0, [], [])]), 1000
    )
    _late_child(builder, builder.agent_process(f"agent:agent-svc:{T1[:4]}"), builder.tick(5000))
    builder.add(Session(trace=T2, task="Hi.", answer="Hi."), first_span=2000)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    assert _git(doc) == [(f"session:{T1}", "undeclared", "agent_child")]


def test_a_child_between_two_sessions_of_one_agent_process_is_said_in_both(
    tmp_path: Path,
) -> None:
    """The child started after the first session and before the second, both of one agent
    process: no session's window holds it, so it is no one session's, and it is shown in each
    (``outside_session_windows``), not dropped from both."""
    first, second = _said(T1, "Done."), _said(T2, "Done.")
    builder = RunBuilder()
    builder.add(first, first_span=1000)
    agent_process = builder.agent_process(f"agent:agent-svc:{T1[:4]}")
    _late_child(builder, agent_process, builder.tick(5000))
    builder.tick(5000)
    builder.add(second, first_span=2000)
    builder.edge(f"agent:agent-svc:{T2[:4]}", "correlated_with_process", agent_process, grade="C")
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    assert _git(doc) == [
        (f"session:{T1}", "ambiguous", "outside_session_windows"),
        (f"session:{T2}", "ambiguous", "outside_session_windows"),
    ]


def test_a_run_no_one_sessions_backs_no_claim(tmp_path: Path) -> None:
    """A ``pytest -q`` the shared agent process ran while both sessions ran, outside every call:
    the first session's claim to have run it (and that the tests pass) is unsupported, with
    the reason, not supported by what may be the other session's run."""
    first = _said(T1, "I ran `pytest -q` and all tests pass.")
    second = _said(T2, "Done.", stray=(["pytest", "-q"],))
    builder, _ = _shared(first, second)
    _stretch(builder, T1)
    doc, _ = build_review(str(builder.write(tmp_path / "run")))
    (claim,) = [c for c in doc["claims"] if c["session"] == f"session:{T1}"]
    assert claim["status"] == "unsupported"
    command = next(m for m in claim["mentions"] if m["type"] == "command")
    assert command["status"] == "unsupported"
    assert "several sessions of the agent process ran" in command["reason"]


def test_many_unattributed_processes_are_one_counted_line() -> None:
    """More than ``GROUPED`` processes with one rule and the same candidates (a launcher's
    helpers) are one line, counted by program; each is still in the evidence."""
    both = [f"session:{T1}", f"session:{T2}"]
    helpers = [
        {
            "id": f"process:h1:{pid}:{pid}",
            "type": "process_run",
            "session": both[0],
            "label": str(pid),
            "role": "ambiguous",
            "rule": "outside_session_windows",
            "candidates": both,
            "argv": ["/usr/bin/readlink", "x"] if pid % 2 else None,
        }
        for pid in range(100, 108)
    ]
    doc = {"evidence": helpers}
    lines = unattributed_lines(doc, {"id": both[0]}, {})
    assert lines[3:] == [
        f"- 8 processes (outside_session_windows: (unknown) x4, readlink x4): one of {both[0]}, "
        f"{both[1]}"
    ]
