"""Edge cases of the enrich processor: OS-plane spans, event caps, late data, multiple links."""

from __future__ import annotations

import pytest
from correlate_builders import MS, T0, Proc, declaration, exit_obs, iso, traceparent
from test_enrich import RUN_TP, SPAN, correlated, make, tool_span

from otel_bridge.identity import file_key
from otel_bridge.model import (
    Attribution,
    Batch,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    FileFacts,
    LogRecord,
    Observation,
    ProcessFacts,
    RelationKind,
    Resource,
    Scope,
    Source,
    Span,
)
from otel_bridge.processors.enrich import Config, process_span_id, run_trace_id


def file_open(p: Proc, path: str, time: int, n: int = 0) -> Observation:
    """The normalizer's ``opened`` observation of a file.open record of ``p``."""
    rec = f"linux:{p.pid}:open:{time}:{n}"
    return Observation(
        id=f"{rec}#0",
        time_unix_nano=time,
        source=Source(channel=Channel.OS, backend="linux", record_id=rec, event="file.open"),
        subject=Entity(
            kind=EntityKind.PROCESS,
            id=p.identity,
            attrs={"process.pid": p.pid, "host.id": p.host},
            facts=ProcessFacts(host_id=p.host, pid=p.pid, start_time_ms=p.ms),
            key="",
        ),
        relation=RelationKind.OPENED,
        object=Entity(
            kind=EntityKind.FILE,
            id=f"file:{path}",
            facts=FileFacts(path=path),
            key=file_key(path) or "",
        ),
        evidence=Evidence(attribution=Attribution.SYSCALL, causal=True),
        occurrence=rec,
        attrs={"event.name": "file.open", "process.pid": p.pid, "host.id": p.host},
    )


def _span_of(spans: list[Span], p: Proc) -> Span:
    (found,) = [s for s in spans if s.span_id == process_span_id(p.identity)]
    return found


def test_file_events_become_sorted_span_events_with_targets() -> None:
    """File observations of a process become its span's events, in time order, naming targets."""
    proc, sink, _ = make()
    p = Proc(pid=10, exe="/usr/bin/cat", argv=("cat",), time=T0)
    obs = [
        *p.observations(),
        file_open(p, "/b", T0 + 3 * MS),
        file_open(p, "/a", T0 + 2 * MS),
        exit_obs(p, T0 + 5 * MS, 0),
    ]
    proc.consume(Batch(observations=tuple(obs)))
    proc.shutdown()
    span = _span_of(sink.spans, p)
    assert [e.attributes["otel_bridge.target"] for e in span.events] == ["file:/a", "file:/b"]
    assert {e.name for e in span.events} == {"opened"}
    assert {e.attributes["evidence.attribution"] for e in span.events} == {"syscall"}


def test_events_beyond_the_cap_go_into_more_events_spans_none_dropped() -> None:
    """Past max_events_per_process, events go into more-events spans (children of the process
    span, each sent once full, the last with the process span): a connection after a hundred
    file reads still reaches the backend (a CI failure: it was dropped)."""
    proc, sink, _ = make(Config(traceparent=RUN_TP, max_events_per_process=2))
    p = Proc(pid=11, exe="/usr/bin/find", argv=("find",), time=T0)
    opens = [file_open(p, f"/f{i}", T0 + (i + 1) * MS, i) for i in range(5)]
    proc.consume(Batch(observations=tuple(p.observations() + opens)))
    # the first more-events span was full: sent before the process ended
    (early,) = [s for s in sink.spans if s.attributes.get("otel_bridge.os_plane.more") is True]
    assert [e.attributes["otel_bridge.target"] for e in early.events] == ["file:/f2", "file:/f3"]
    proc.shutdown()
    span = _span_of(sink.spans, p)
    assert [e.attributes["otel_bridge.target"] for e in span.events] == ["file:/f0", "file:/f1"]
    assert span.dropped_events_count == 0
    more = [s for s in sink.spans if s.attributes.get("otel_bridge.os_plane.more") is True]
    assert [e.attributes["otel_bridge.target"] for s in more for e in s.events] == [
        "file:/f2",
        "file:/f3",
        "file:/f4",
    ]
    for s in more:
        assert (s.trace_id, s.parent_span_id) == (span.trace_id, span.span_id)
        assert s.attributes["process.pid"] == 11
        assert s.attributes["otel_bridge.process.id"] == p.identity
    assert len({s.span_id for s in more}) == 2


def test_a_cap_of_zero_drops_events_and_counts_them() -> None:
    proc, sink, _ = make(Config(traceparent=RUN_TP, max_events_per_process=0))
    p = Proc(pid=13, exe="/usr/bin/find", argv=("find",), time=T0)
    opens = [file_open(p, f"/f{i}", T0 + (i + 1) * MS, i) for i in range(3)]
    proc.consume(Batch(observations=tuple(p.observations() + opens)))
    proc.shutdown()
    span = _span_of(sink.spans, p)
    assert (len(span.events), span.dropped_events_count) == (0, 3)
    assert len(sink.spans) == 1


def test_exited_process_waits_for_hold_delay_before_emission() -> None:
    """An exited process's span is released only once the hold delay after its exit passes."""
    proc, sink, clock = make()
    p = Proc(pid=12, exe="/bin/true", argv=("true",), time=T0)
    proc.consume(Batch(observations=(*p.observations(), exit_obs(p, T0 + MS, 0))))
    clock.now += 5.9
    proc.flush_due()
    assert sink.spans == []
    clock.now += 0.2
    proc.flush_due()
    assert _span_of(sink.spans, p).attributes["process.exit.code"] == 0


def test_events_after_emission_go_downstream_in_a_late_events_span() -> None:
    """An observation arriving after its process span was sent is not lost: after late_delay it
    goes out in a child span of the process span, same trace and pid, flagged late."""
    proc, sink, clock = make()
    p = Proc(pid=13, exe="/bin/true", argv=("true",), time=T0)
    proc.consume(Batch(observations=(*p.observations(), exit_obs(p, T0 + MS, 1))))
    clock.now += 7
    proc.flush_due()
    before = _span_of(sink.spans, p)
    proc.consume(Batch(observations=(file_open(p, "/late", T0 + 2 * MS),)))
    proc.flush_due()
    assert len(sink.spans) == 1  # gathered for late_delay first
    clock.now += 1.1
    proc.flush_due()
    late = sink.spans[-1]
    assert _span_of(sink.spans, p) == before  # the process span itself is never re-sent
    assert late.parent_span_id == before.span_id
    assert late.trace_id == before.trace_id
    assert late.resource == before.resource
    assert late.attributes["otel_bridge.os_plane.late"] is True
    assert late.attributes["process.pid"] == 13
    assert late.attributes["otel_bridge.process.id"] == p.identity
    assert [e.attributes["otel_bridge.target"] for e in late.events] == ["file:/late"]
    proc.shutdown()
    assert len(sink.spans) == 2
    counters = proc._telemetry.counters()
    assert counters["processor.enrich.os_plane.late_event"] == 1
    assert counters["processor.enrich.os_plane.late_spans"] == 1


def test_late_events_past_the_cap_are_sent_in_more_late_spans_none_dropped() -> None:
    proc, sink, clock = make(Config(traceparent=RUN_TP, max_events_per_process=2))
    p = Proc(pid=14, exe="/bin/true", argv=("true",), time=T0)
    proc.consume(Batch(observations=(*p.observations(), exit_obs(p, T0 + MS, 0))))
    clock.now += 7
    proc.flush_due()
    before = _span_of(sink.spans, p)
    lates = [file_open(p, f"/late{i}", T0 + (2 + i) * MS, i) for i in range(5)]
    proc.consume(Batch(observations=tuple(lates)))
    clock.now += 1.1
    proc.flush_due()
    late = [s for s in sink.spans if s.attributes.get("otel_bridge.os_plane.late") is True]
    assert [e.attributes["otel_bridge.target"] for s in late for e in s.events] == [
        f"file:/late{i}" for i in range(5)
    ]
    assert {s.parent_span_id for s in late} == {before.span_id}
    assert len({s.span_id for s in late}) == len(late) == 3
    assert sum(s.dropped_events_count for s in sink.spans) == 0


def test_events_after_shutdown_are_sent_at_once() -> None:
    """After shutdown nothing waits: a late observation (a backend drained last) is sent in
    its late-events span in the same call, and a late exit is an event with its code."""
    proc, sink, _ = make()
    p = Proc(pid=15, exe="/bin/sleep", argv=("sleep", "9"), time=T0)
    proc.consume(Batch(observations=tuple(p.observations())))
    proc.shutdown()
    open_span = _span_of(sink.spans, p)
    assert open_span.attributes["otel_bridge.process.exit_observed"] is False
    proc.consume(Batch(observations=(file_open(p, "/x", T0 + MS), exit_obs(p, T0 + 2 * MS, 3))))
    late = sink.spans[-1]
    assert late.parent_span_id == open_span.span_id
    assert [e.name for e in late.events] == ["opened", "process.exit"]
    assert late.events[1].attributes["process.exit.code"] == 3


def test_a_process_with_events_but_no_observed_start_is_sent_at_shutdown() -> None:
    """Events of a process whose start was never observed are not dropped: its span is sent at
    shutdown, starting at its first event, marked start_observed=false."""
    proc, sink, _ = make()
    p = Proc(pid=16, exe="/bin/cat", argv=("cat",), time=T0)
    proc.consume(Batch(observations=(file_open(p, "/seen", T0 + 5 * MS),)))
    proc.shutdown()
    span = _span_of(sink.spans, p)
    assert span.attributes["otel_bridge.process.start_observed"] is False
    assert span.attributes["process.pid"] == 16
    assert span.start_time_unix_nano == T0 + 5 * MS
    assert [e.attributes["otel_bridge.target"] for e in span.events] == ["file:/seen"]


def test_exec_replaces_attributes_and_keeps_start_time() -> None:
    """An exec after start replaces the process attributes but keeps the start time."""
    proc, sink, _ = make()
    p = Proc(pid=14, exe="/bin/sh", argv=("sh", "-c", "x"), time=T0)
    again = Proc(
        pid=14,
        exe="/usr/bin/python3",
        argv=("python3", "x.py"),
        time=T0 + 4 * MS,
        start_ms=p.ms,
        event="process.exec",
    )
    proc.consume(Batch(observations=tuple(p.observations() + again.observations())))
    proc.shutdown()
    span = _span_of(sink.spans, p)
    assert span.start_time_unix_nano == T0
    assert span.attributes["process.executable.path"] == "/usr/bin/python3"
    assert span.attributes["process.command_args"] == ("python3", "x.py")
    assert span.name == "process python3"
    assert span.end_time_unix_nano == T0 + 4 * MS


def test_env_attributes_are_not_copied_onto_process_spans() -> None:
    """process.env.* values (e.g. a traceparent) stay off the exported OS-plane span."""
    proc, sink, _ = make()
    p = Proc(pid=15, exe="/usr/bin/git", argv=("git",), time=T0, traceparent=traceparent(SPAN))
    proc.consume(Batch(observations=tuple(p.observations())))
    proc.shutdown()
    span = _span_of(sink.spans, p)
    assert not [k for k in span.attributes if k.startswith("process.env.")]


def test_os_plane_off_emits_only_the_semantic_spans() -> None:
    """With os_plane disabled no process span is produced, while tool spans still flow."""
    proc, sink, _ = make(Config(traceparent=RUN_TP, os_plane=False))
    p = Proc(pid=16, exe="/bin/ls", argv=("ls",), time=T0 + MS)
    obs = correlated(declaration(SPAN, "ls", T0, T0 + 500 * MS) + p.observations())
    proc.consume(Batch(spans=(tool_span(),), observations=tuple(obs)))
    proc.shutdown()
    assert [s.span_id for s in sink.spans] == [bytes.fromhex(SPAN)]


def test_non_os_observations_do_not_make_process_spans() -> None:
    """A process entity seen only on the semantic channel does not get an OS-plane span."""
    proc, sink, _ = make()
    p = Proc(pid=17, exe="/bin/ls", argv=("ls",), time=T0)
    sem = [
        Observation(
            id=o.id,
            time_unix_nano=o.time_unix_nano,
            source=Source(channel=Channel.SEM, backend="otlp", record_id=o.source.record_id),
            subject=o.subject,
            relation=o.relation,
            object=o.object,
            occurrence=o.occurrence,
            attrs=o.attrs,
        )
        for o in p.observations()
    ]
    proc.consume(Batch(observations=tuple(sem)))
    proc.shutdown()
    assert sink.spans == []


def test_grandchild_is_parented_by_child_not_root() -> None:
    """Process spans nest along the observed tree: root -> child -> grandchild."""
    proc, sink, _ = make()
    root = Proc(pid=20, exe="/bin/sh", argv=("sh",), time=T0)
    child = Proc(pid=21, exe="/bin/bash", argv=("bash",), time=T0 + MS, parent_pid=20)
    child.extra = {"process.parent.creation.time": iso(root.ms)}
    grand = Proc(pid=22, exe="/bin/ls", argv=("ls",), time=T0 + 2 * MS, parent_pid=21)
    grand.extra = {"process.parent.creation.time": iso(child.ms)}
    obs = root.observations() + child.observations() + grand.observations()
    proc.consume(Batch(observations=tuple(obs)))
    proc.shutdown()
    spans = sink.spans
    assert _span_of(spans, child).parent_span_id == _span_of(spans, root).span_id
    assert _span_of(spans, grand).parent_span_id == _span_of(spans, child).span_id
    assert _span_of(spans, root).parent_span_id == bytes.fromhex("88" * 8)
    assert len({s.trace_id for s in spans}) == 1


def test_two_bridges_give_two_links_events_and_count() -> None:
    """A span bridged to two processes gets a link and an event per bridge, and the count."""
    proc, sink, _ = make()
    a = Proc(pid=30, exe="/usr/bin/git", argv=("git",), time=T0 + MS, traceparent=traceparent(SPAN))
    b = Proc(
        pid=31, exe="/usr/bin/git", argv=("git",), time=T0 + 2 * MS, traceparent=traceparent(SPAN)
    )
    obs = correlated(
        declaration(SPAN, "git", T0, T0 + 500 * MS) + a.observations() + b.observations()
    )
    bridges = [o for o in obs if o.relation == RelationKind.CORRELATED_WITH_PROCESS]
    assert {o.object.id for o in bridges if o.object is not None} == {a.identity, b.identity}
    proc.consume(Batch(spans=(tool_span(),), observations=tuple(obs)))
    proc.shutdown()
    (out,) = [s for s in sink.spans if s.span_id == bytes.fromhex(SPAN)]
    linked = {link.span_id for link in out.links}
    assert linked == {process_span_id(a.identity), process_span_id(b.identity)}
    assert len([e for e in out.events if e.name == "otel_bridge.bridge"]) == len(out.links)
    assert out.attributes["otel_bridge.bridge.count"] == len(out.links)


def test_spans_after_shutdown_pass_through_enriched_without_holding() -> None:
    """After shutdown a late span is forwarded at once (with its bridge), not held forever."""
    proc, sink, _ = make()
    p = Proc(pid=40, exe="/usr/bin/git", argv=("git",), time=T0 + MS, traceparent=traceparent(SPAN))
    obs = correlated(declaration(SPAN, "git", T0, T0 + 500 * MS) + p.observations())
    proc.shutdown()
    proc.consume(Batch(spans=(tool_span(),), observations=tuple(obs)))
    (out,) = [s for s in sink.spans if s.span_id == bytes.fromhex(SPAN)]
    assert out.attributes["otel_bridge.bridge.method"] == "traceparent"
    assert [link.span_id for link in out.links] == [process_span_id(p.identity)]


def test_os_plane_trace_is_derived_from_the_run_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without any traceparent, the run id from OS log resources picks the OS-plane trace id."""
    monkeypatch.delenv("TRACEPARENT", raising=False)
    proc, sink, _ = make(Config())
    record = LogRecord(
        resource=Resource(attributes={"otel_bridge.run.id": "run-42"}),
        scope=Scope(name="host"),
        time_unix_nano=T0,
    )
    p = Proc(pid=41, exe="/bin/ls", argv=("ls",), time=T0)
    proc.consume(Batch(logs=(record,), observations=tuple(p.observations())))
    proc.shutdown()
    span = _span_of(sink.spans, p)
    assert span.trace_id == run_trace_id("run-42")
    assert span.resource.attributes["otel_bridge.run.id"] == "run-42"
    assert span.parent_span_id == b""
    assert sink.logs == [record]


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (Config(hold_delay=-0.1), "hold_delay"),
        (Config(traceparent="00-zz-yy-01"), "traceparent"),
        (Config(max_events_per_process=-1), "max_events_per_process"),
        (Config(tick_interval=0), "tick_interval"),
        (Config(tick_interval=float("nan")), "tick_interval"),
    ],
)
def test_validate_names_each_bad_setting(config: Config, key: str) -> None:
    """Each invalid setting is reported with its key."""
    problems = config.validate()
    assert len(problems) == 1
    assert problems[0].startswith(f"{key}:")
