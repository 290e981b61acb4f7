"""The singleton bridge: window bounds, compatibility routes, strict rules and skip accounting."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from correlate_builders import HOST, MS, T0, Proc, S, declaration, iso, traceparent

from otel_bridge.component import Host, Telemetry
from otel_bridge.grading import grade_evidence
from otel_bridge.model import Attribution, Batch, Grade, Observation, RelationKind
from otel_bridge.processors.correlate import Config, CorrelateProcessor, Correlator
from otel_bridge.processors.correlate.singleton import OURS, PAPER, Policy
from otel_bridge.testing import RecordingConsumer


def run(
    obs: list[Observation], policy: Policy | None = None, **cfg: object
) -> tuple[list[Observation], Counter[str]]:
    """Feed ``obs`` in one batch, finish, return bridges and counts."""
    core = Correlator(Config(**cfg), policy)  # type: ignore[arg-type]
    core.add(tuple(obs))
    out = core.step() + core.step(final=True)
    return out, core.counts()


def bridges(out: list[Observation]) -> list[Observation]:
    """The heuristic bridges among derived observations."""
    return [o for o in out if o.evidence.attribution == Attribution.HEURISTIC]


def scenario(line: str, *procs: Proc, start: int = T0, end: int = 0) -> list[Observation]:
    """One declaration plus the given processes."""
    out = declaration("a1" * 8, line, start, end)
    for p in procs:
        out += p.observations()
    return out


LS = Proc(pid=100, exe="/usr/bin/ls", argv=("ls", "-la"), time=T0 + 100 * MS)


def test_bridge_fields() -> None:
    """A single compatible process gives one inferred, non-causal, supported, scored bridge."""
    out, counts = run(scenario("ls -la", LS))
    [b] = bridges(out)
    assert b.relation == RelationKind.CORRELATED_WITH_PROCESS
    assert b.object is not None
    assert b.object.id == LS.identity
    ev = b.evidence
    assert (ev.inferred, ev.causal, ev.identity_exact) == (True, False, False)
    assert ev.method == "singleton:basename+tail"
    assert ev.score == 0.93
    assert set(ev.support) == {"a1a1a1a1a1a1a1a1#2", next(iter(LS.observations())).id}
    assert b.attrs["time_delta_ms"] == 100.0
    assert b.source.backend == "correlate"
    assert b.source.channel == "sem"
    assert grade_evidence(ev) == Grade.D
    assert counts["bridge"] == 1


@pytest.mark.parametrize(
    ("offset_ms", "end_ms", "bridged"),
    [
        (0, 0, True),  # start endpoint inclusive
        (-1, 0, False),  # before the declaration
        (3000, 0, True),  # max window endpoint inclusive
        (3001, 0, False),  # past the max window
        (500, 500, True),  # tool end endpoint inclusive
        (501, 500, False),  # past the tool's first success/failure
    ],
)
def test_window_bounds(offset_ms: int, end_ms: int, bridged: bool) -> None:
    """Both window endpoints are inclusive; the max window and the tool end each bound it."""
    p = Proc(pid=7, exe="/usr/bin/ls", argv=("ls",), time=T0 + offset_ms * MS)
    end = T0 + end_ms * MS if end_ms else 0
    out, counts = run(scenario("ls", p, end=end))
    assert bool(bridges(out)) is bridged
    if not bridged:
        assert counts["skip.no_candidate"] == 1


def test_max_window_configurable() -> None:
    """The maximum window is a setting."""
    p = Proc(pid=7, exe="/usr/bin/ls", argv=("ls",), time=T0 + 1500 * MS)
    assert bridges(run(scenario("ls", p))[0])
    assert not bridges(run(scenario("ls", p), max_window=1.0)[0])


def test_later_declaration_cuts_only_under_the_literal_rule() -> None:
    """A later declaration of the same scope does not cut a window while the call may still run
    (here its end is unknown): a process after it stays this call's candidate. The paper's
    literal rule (``cut_at_next_start``) cuts there, inclusively."""
    d1 = declaration("01" * 8, "make build", T0)
    d2 = declaration("02" * 8, "cargo test", T0 + 1000 * MS)
    at = Proc(pid=5, exe="/usr/bin/make", argv=("make", "build"), time=T0 + 1000 * MS)
    after = Proc(pid=6, exe="/usr/bin/make", argv=("make", "build"), time=T0 + 1001 * MS)
    literal = replace(OURS, cut_at_next_start=True)
    for proc in (at, after):
        out, _ = run(d1 + d2 + proc.observations())
        assert [b.object.id for b in bridges(out) if b.object] == [proc.identity]
    out, _ = run(d1 + d2 + at.observations(), literal)
    assert [b.object.id for b in bridges(out) if b.object] == [at.identity]
    out, _counts = run(d1 + d2 + after.observations(), literal)
    assert not bridges(out)


def test_overlapping_calls_never_clip_each_other() -> None:
    """Two overlapping calls of one command: a process in both windows is ambiguous from both
    sides (no link), where the literal rule would hand it to the second call alone."""
    d1 = declaration("01" * 8, "sleep 0.3", T0, T0 + 320 * MS)
    d2 = declaration("02" * 8, "sleep 0.3", T0 + 5 * MS, T0 + 325 * MS)
    first = Proc(pid=5, exe="/usr/bin/sleep", argv=("sleep", "0.3"), time=T0 + 12 * MS)
    out, counts = run(d1 + d2 + first.observations())  # the second call's process was missed
    assert not bridges(out)
    assert counts["skip.process_ambiguous"] == 2
    out, _ = run(d1 + d2 + first.observations(), replace(OURS, cut_at_next_start=True))
    [wrong] = bridges(out)
    assert wrong.subject.facts is not None
    assert getattr(wrong.subject.facts, "span_id", "") == "02" * 8  # the missed-sibling error


def test_sequential_calls_with_ends_are_each_bridged() -> None:
    """Calls that end before the next starts keep disjoint windows: each gets its process."""
    d1 = declaration("01" * 8, "git status", T0, T0 + 900 * MS)
    d2 = declaration("02" * 8, "git status", T0 + 1000 * MS, T0 + 1900 * MS)
    p1 = Proc(pid=5, exe="/usr/bin/git", argv=("git", "status"), time=T0 + 100 * MS)
    p2 = Proc(pid=6, exe="/usr/bin/git", argv=("git", "status"), time=T0 + 1100 * MS)
    out, _ = run(d1 + d2 + p1.observations() + p2.observations())
    got = {getattr(b.subject.facts, "span_id", ""): b.object.id for b in bridges(out) if b.object}
    assert got == {"01" * 8: p1.identity, "02" * 8: p2.identity}


def test_equal_timestamp_does_not_cut() -> None:
    """A following declaration with the same timestamp does not bound the window."""
    d1 = declaration("01" * 8, "make build", T0)
    d2 = declaration("02" * 8, "cargo test", T0)
    p = Proc(pid=5, exe="/usr/bin/make", argv=("make", "build"), time=T0 + 10 * MS)
    out, _ = run(d1 + d2 + p.observations())
    assert len(bridges(out)) == 1


def test_scope_emitter_vs_global() -> None:
    """Another agent's declaration cuts the window only under the global (paper) scope."""
    d1 = declaration("01" * 8, "make build", T0, agent_pid=10)
    d2 = declaration("02" * 8, "cargo test", T0 + 100 * MS, agent_pid=11)
    p = Proc(pid=5, exe="/usr/bin/make", argv=("make", "build"), time=T0 + 200 * MS)
    assert len(bridges(run(d1 + d2 + p.observations())[0])) == 1
    assert not bridges(run(d1 + d2 + p.observations(), scope="global")[0])


@pytest.mark.parametrize(
    ("line", "proc", "method", "score"),
    [
        ("/usr/bin/ls -la", Proc(1, "/usr/bin/ls", ("ls", "-la"), T0), "path+tail", 0.95),
        ("ls -la", Proc(1, "/usr/bin/ls", ("ls", "-la"), T0), "basename+tail", 0.93),
        ("mytool run x", Proc(1, "/opt/other", ("other", "run", "x"), T0), "tail", 0.90),
        ("/usr/bin/ls", Proc(1, "/usr/bin/ls", ("ls",), T0), "path", 0.85),
        ("./bin/tool", Proc(1, "/work/bin/tool", ("/work/bin/tool",), T0), "path", 0.85),
        ("ls", Proc(1, "/usr/bin/ls", ("ls",), T0), "basename", 0.80),
        ("ls", Proc(1, "/bin/true", ("ls",), T0), "basename", 0.80),
        ("LS", Proc(1, "/usr/bin/ls", ("x",), T0), "basename", 0.80),
    ],
)
def test_routes_and_scores(line: str, proc: Proc, method: str, score: float) -> None:
    """Each compatibility route gives its documented evidence category and score."""
    [b] = bridges(run(scenario(line, proc))[0])
    assert b.evidence.method == f"singleton:{method}"
    assert b.evidence.score == score


def test_incompatible_process_ignored() -> None:
    """A process with another name and other arguments is not a candidate."""
    p = Proc(pid=9, exe="/usr/bin/cat", argv=("cat", "x"), time=T0 + 10 * MS)
    out, counts = run(scenario("ls -la", p))
    assert not bridges(out)
    assert counts["skip.no_candidate"] == 1


def test_evidence_accumulates_over_start_and_exec() -> None:
    """Start and exec events of one process add up: path from one, tail from the other."""
    start = Proc(pid=9, exe="/usr/bin/env", argv=("env", "x"), time=T0 + 1 * MS)
    exec_ = Proc(pid=9, exe="/usr/bin/ls", argv=("ls",), time=T0 + 2 * MS, start_ms=start.ms)
    exec_.event = "process.exec"
    tail = Proc(pid=9, exe="/opt/ls-wrapper", argv=("wrapper", "-l"), time=T0 + 3 * MS)
    tail.start_ms, tail.event = start.ms, "process.exec"
    [b] = bridges(run(scenario("/usr/bin/ls -l", start, exec_, tail))[0])
    assert b.evidence.method == "singleton:path+tail"
    # the env start event is not compatible (an interpreter without argument evidence)
    assert len(b.evidence.support) == 3


def test_several_candidates_abstain() -> None:
    """Two compatible processes: no bridge, counted as several_candidates."""
    a = Proc(pid=1, exe="/usr/bin/ls", argv=("ls",), time=T0 + 10 * MS)
    b = Proc(pid=2, exe="/usr/bin/ls", argv=("ls",), time=T0 + 20 * MS)
    out, counts = run(scenario("ls", a, b))
    assert not bridges(out)
    assert counts["skip.several_candidates"] == 1


def test_interpreter_needs_arguments() -> None:
    """An interpreter matches only with argument evidence, never by its name alone."""
    other = Proc(pid=1, exe="/usr/bin/python3.11", argv=("python3", "other.py"), time=T0 + MS)
    out, counts = run(scenario("python3 script.py", other))
    assert not bridges(out)
    assert counts["skip.no_candidate"] == 1
    # the paper's policy bridges it by basename alone
    assert bridges(run(scenario("python3 script.py", other), PAPER)[0])
    same = Proc(pid=2, exe="/usr/bin/python3.11", argv=("python3", "script.py"), time=T0 + MS)
    [b] = bridges(run(scenario("python3 script.py", same))[0])
    assert b.evidence.method == "singleton:basename+tail"


def test_interpreter_image_without_arguments() -> None:
    """A declared tool whose process image is a shell needs argument evidence too."""
    p = Proc(pid=1, exe="/bin/bash", argv=("deploy",), time=T0 + MS)
    assert not bridges(run(scenario("deploy", p))[0])
    assert bridges(run(scenario("deploy", p), PAPER)[0])


def test_unstable_arguments_no_tail_route() -> None:
    """Arguments with shell expansions do not offer the tail route."""
    p = Proc(pid=1, exe="/opt/x", argv=("x", "$HOME"), time=T0 + MS)
    out, counts = run(scenario("ls $HOME", p))
    assert not bridges(out)
    assert counts["skip.no_candidate"] == 1


def test_two_declarations_one_process() -> None:
    """A process compatible with two pending declarations is ambiguous from its side."""
    d1 = declaration("01" * 8, "pytest -q", T0, agent_pid=10)
    d2 = declaration("02" * 8, "pytest -q", T0 + 100 * MS, agent_pid=11)
    p = Proc(pid=5, exe="/usr/bin/pytest", argv=("pytest", "-q"), time=T0 + 200 * MS)
    out, counts = run(d1 + d2 + p.observations())
    assert not bridges(out)
    assert counts["skip.process_ambiguous"] == 2
    out, _ = run(d1 + d2 + p.observations(), PAPER)
    assert len(bridges(out)) == 1  # the paper's policy lets one of them claim it


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("ls | wc", "unsupported_command.control_operator"),
        ("cd /tmp", "unsupported_command.builtin"),
        ("echo $(id)", "unsupported_command.command_substitution"),
        ("", "unsupported_command.empty"),
    ],
)
def test_unsupported_counted(line: str, reason: str) -> None:
    """Unsupported declarations are skipped and counted by sub-reason."""
    out, counts = run(scenario(line, LS))
    assert not bridges(out)
    assert counts[f"skip.{reason}"] == 1


def test_exact_identity_preferred() -> None:
    """A process carrying the declaring span's traceparent wins; no heuristic bridge is made."""
    span = "a1" * 8
    p = Proc(pid=3, exe="/usr/bin/ls", argv=("ls",), time=T0 + MS, traceparent=traceparent(span))
    out, counts = run(scenario("ls", p))
    assert not bridges(out)
    [exact] = [o for o in out if o.evidence.method == "traceparent"]
    assert exact.object is not None
    assert exact.object.id == p.identity
    assert counts["skip.exact_identity_preferred"] == 1
    assert counts["exact.traceparent"] == 1


def test_inherited_foreign_trace_context_is_no_contradiction() -> None:
    """A launcher's traceparent inherited unchanged from the parent does not block a bridge."""
    launcher = f"00-{'cd' * 16}-{'ef' * 8}-01"
    agent = Proc(
        pid=2,
        exe="/usr/bin/python3",
        argv=("python3", "agent.py"),
        time=T0 - S,
        traceparent=launcher,
    )
    p = Proc(
        pid=3,
        exe="/usr/bin/ls",
        argv=("ls",),
        time=T0 + MS,
        traceparent=launcher,
        parent_pid=2,
        extra={"process.parent.creation.time": iso(agent.ms)},
    )
    out, counts = run(scenario("ls", agent, p))
    assert [b.object.id for b in bridges(out) if b.object is not None] == [p.identity]
    assert counts["skip.contradicts_exact"] == 0


def test_foreign_trace_context_set_for_the_process_contradicts() -> None:
    """A traceparent set for the process itself (not inherited) naming another span blocks it."""
    p = Proc(
        pid=3,
        exe="/usr/bin/ls",
        argv=("ls",),
        time=T0 + MS,
        traceparent=f"00-{'cd' * 16}-{'ef' * 8}-01",
    )
    out, counts = run(scenario("ls", p))
    assert not bridges(out)
    assert counts["skip.contradicts_exact"] == 1
    assert bridges(run(scenario("ls", p), PAPER)[0])


def test_contradicting_exact_identity() -> None:
    """A unique candidate whose traceparent names another known tool span is never bridged."""
    other = "b2" * 8
    p = Proc(pid=3, exe="/usr/bin/ls", argv=("ls",), time=T0 + MS, traceparent=traceparent(other))
    obs = scenario("ls", p) + declaration(other, "cat notes.txt", T0)
    out, counts = run(obs)
    assert not bridges(out)
    assert counts["skip.contradicts_exact"] == 1
    [exact] = [o for o in out if o.evidence.method == "traceparent"]
    assert exact.subject.id.endswith(other)
    assert bridges(run(obs, PAPER)[0])


def test_exec_time_traceparent_wins_over_fork_time() -> None:
    """The exec-time TRACEPARENT names the tool span even when the fork-time one came first."""
    span = "a1" * 8
    launcher = f"00-{'cd' * 16}-{'ef' * 8}-01"
    fork = Proc(
        pid=3,
        exe="/usr/bin/python3",
        argv=("python3", "agent.py"),
        time=T0 + MS,
        traceparent=launcher,
    )
    exec_ = Proc(
        pid=3,
        exe="/usr/bin/ls",
        argv=("ls",),
        time=T0 + 2 * MS,
        start_ms=fork.ms,
        traceparent=traceparent(span),
        event="process.exec",
    )
    for order in ((fork, exec_), (exec_, fork)):
        out, counts = run(
            declaration(span, "ls", T0) + [o for p in order for o in p.observations()]
        )
        exact = [o for o in out if o.evidence.method == "traceparent"]
        assert [o.subject.id.endswith(span) for o in exact] == [True]
        assert exact[0].object is not None
        assert exact[0].object.id == fork.identity
        assert not bridges(out)
        assert counts["skip.exact_identity_preferred"] == 1


def test_processor_counts_to_telemetry() -> None:
    """The processor forwards input unchanged, appends bridges and counts outcomes."""
    sink = RecordingConsumer()
    telemetry = Telemetry()
    proc = CorrelateProcessor(Config(), sink, telemetry)
    proc.start(Host(telemetry=telemetry))
    first = Batch(observations=tuple(scenario("ls -la", LS)))
    second = Batch(observations=tuple(declaration("b2" * 8, "cd /", T0 + 60 * S)))
    proc.consume(first)
    proc.consume(second)
    proc.shutdown()
    proc.shutdown()
    got = [o for b in sink.batches for o in b.observations]
    assert got[: len(first.observations)] == list(first.observations)
    assert len(bridges(got)) == 1
    c = telemetry.counters()
    assert c["processor.correlate.outcome.bridge"] == 1
    assert c["processor.correlate.outcome.skip.unsupported_command.builtin"] == 1
    assert proc.outcomes["bridge"] == 1


def test_streaming_decides_when_window_closes() -> None:
    """A declaration is decided as soon as the watermark passes its window, not before."""
    core = Correlator(Config(allowed_lateness=1.0))
    core.add(tuple(scenario("ls -la", LS)))
    assert not core.step()
    core.add(tuple(Proc(pid=50, exe="/bin/x", argv=("x",), time=T0 + 4100 * MS).observations()))
    assert len(bridges(core.step())) == 1
    assert core.engine.pending == 0


def test_late_declaration_skipped() -> None:
    """A declaration older than the retained horizon is skipped rather than decided blind."""
    core = Correlator(Config(allowed_lateness=0.0, retention=5.0))
    core.add(tuple(Proc(pid=49, exe="/bin/x", argv=("x",), time=T0 + 1 * S).observations()))
    core.step()
    core.add(tuple(Proc(pid=50, exe="/bin/x", argv=("x",), time=T0 + 100 * S).observations()))
    core.step()
    core.add(tuple(scenario("ls -la", LS)))
    core.step(final=True)
    assert core.counts()["skip.late_declaration"] == 1


def test_memory_bounded() -> None:
    """Decided declarations and old events are evicted in a long stream."""
    core = Correlator(Config(allowed_lateness=0.0, retention=5.0))
    for i in range(200):
        t = T0 + i * S
        obs = (
            declaration(f"{i:016x}", f"tool{i}", t)
            + Proc(
                pid=1000 + i, exe=f"/bin/tool{i}", argv=(f"tool{i}",), time=t + MS, host=HOST
            ).observations()
        )
        core.add(tuple(obs))
        core.step()
    assert len(core.engine.index) < 20
    assert core.engine.counts["bridge"] >= 190
