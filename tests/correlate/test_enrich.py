"""The enrich processor: bridges on tool spans (links, attributes, events) and the OS plane."""

from __future__ import annotations

from correlate_builders import HOST, MS, T0, TRACE, Proc, declaration, exit_obs, iso, traceparent
from waiting import wait_until

from otel_bridge.component import CreateSettings, Host, Telemetry
from otel_bridge.linkreasons import (
    AGENT_FOLLOWED_LATE,
    AGENT_NOT_FOLLOWED,
    AGENT_UNAVAILABLE,
    UNOBSERVED,
)
from otel_bridge.model import Batch, LogRecord, Observation, Resource, Scope, Span
from otel_bridge.processors.correlate import Config as CorrelateConfig
from otel_bridge.processors.correlate import Correlator
from otel_bridge.processors.enrich import (
    LINK_OBSERVED_SINCE,
    Config,
    EnrichProcessor,
    factory,
    process_span_id,
    run_trace_id,
)
from otel_bridge.testing import RecordingConsumer

SPAN = "a1" * 8
RUN_TP = f"00-{'77' * 16}-{'88' * 8}-01"


class Clock:
    """A manual monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tool_span(span: str = SPAN) -> Span:
    """The tool span as the OTLP receiver would hand it over."""
    return Span(
        resource=Resource(attributes={"service.name": "agent"}),
        scope=Scope(name="agent"),
        trace_id=bytes.fromhex(TRACE),
        span_id=bytes.fromhex(span),
        name="execute_tool shell",
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + 500 * MS,
        attributes={"gen_ai.tool.name": "shell"},
    )


def correlated(obs: list[Observation]) -> list[Observation]:
    """``obs`` plus what the correlator derives from it."""
    core = Correlator(CorrelateConfig())
    core.add(tuple(obs))
    return obs + core.step(final=True)


def make(config: Config | None = None) -> tuple[EnrichProcessor, RecordingConsumer, Clock]:
    """An enrich processor with a manual clock."""
    sink = RecordingConsumer()
    clock = Clock()
    proc = EnrichProcessor(config or Config(traceparent=RUN_TP), sink, Telemetry(), clock)
    return proc, sink, clock


def scenario() -> tuple[list[Observation], Proc, Proc]:
    """A shell tool span whose ``ls`` child is bridged; the ls forks a still-running child."""
    ls = Proc(pid=100, exe="/usr/bin/ls", argv=("ls", "-la"), time=T0 + 100 * MS)
    child = Proc(pid=101, exe="/usr/bin/sleep", argv=("sleep", "9"), time=T0 + 200 * MS)
    child.parent_pid = 100
    child.extra = {"process.parent.creation.time": iso(ls.ms)}
    obs = declaration(SPAN, "ls -la", T0, T0 + 500 * MS) + ls.observations()
    obs += [*child.observations(), exit_obs(ls, T0 + 300 * MS, 0)]
    return correlated(obs), ls, child


def test_holds_then_releases_with_bridge() -> None:
    """Spans are held for the delay, then released with link, attributes and event."""
    proc, sink, clock = make()
    obs, ls, _ = scenario()
    span = tool_span()
    proc.consume(Batch(spans=(span,), observations=tuple(obs)))
    assert not sink.spans
    assert sink.observations == obs  # observations pass straight through
    clock.now += 6.1
    proc.flush_due()
    [out] = [s for s in sink.spans if s.span_id == span.span_id]
    [link] = out.links
    assert link.span_id == process_span_id(ls.identity)
    assert link.trace_id == bytes.fromhex("77" * 16)
    a = out.attributes
    assert a["otel_bridge.bridge.process.pid"] == 100
    assert a["otel_bridge.bridge.process.id"] == ls.identity
    assert a["otel_bridge.bridge.method"] == "singleton:basename+tail"
    assert a["otel_bridge.bridge.score"] == 0.93
    assert a["otel_bridge.bridge.inferred"] is True
    assert a["otel_bridge.bridge.causal"] is False
    assert a["otel_bridge.bridge.identity_exact"] is False
    assert a["otel_bridge.bridge.grade"] == "D"
    assert a["otel_bridge.bridge.time_delta_ms"] == 100.0
    assert len(a["otel_bridge.bridge.support"]) == 2  # type: ignore[arg-type]
    assert a["gen_ai.tool.name"] == "shell"
    [event] = out.events
    assert event.name == "otel_bridge.bridge"
    assert (out.name, out.start_time_unix_nano, out.end_time_unix_nano) == (
        span.name,
        span.start_time_unix_nano,
        span.end_time_unix_nano,
    )


def test_span_without_bridge_unchanged() -> None:
    """A span with no bridge leaves exactly as it came."""
    proc, sink, clock = make()
    span = tool_span("b2" * 8)
    proc.consume(Batch(spans=(span,)))
    clock.now += 10
    proc.flush_due()
    assert sink.spans == [span]


def test_os_plane_spans() -> None:
    """One span per process, parented by the tree, under its own resource; no fabricated exit."""
    proc, sink, clock = make()
    obs, ls, child = scenario()
    proc.consume(Batch(observations=tuple(obs)))
    clock.now += 6.1
    proc.flush_due()
    [ls_span] = [s for s in sink.spans if s.span_id == process_span_id(ls.identity)]
    assert ls_span.resource.attributes["service.name"] == "otel-bridge-host"
    assert ls_span.resource.attributes["evidence.channel"] == "os"
    assert ls_span.trace_id == bytes.fromhex("77" * 16)
    assert ls_span.parent_span_id == bytes.fromhex("88" * 8)  # root under the run's span
    assert ls_span.start_time_unix_nano == ls.time
    assert ls_span.end_time_unix_nano == T0 + 300 * MS
    assert ls_span.attributes["otel_bridge.process.exit_observed"] is True
    assert ls_span.attributes["process.exit.code"] == 0
    # the still-running child only appears at shutdown, open, parented by ls
    assert not [s for s in sink.spans if s.span_id == process_span_id(child.identity)]
    proc.shutdown()
    proc.shutdown()
    [c] = [s for s in sink.spans if s.span_id == process_span_id(child.identity)]
    assert c.parent_span_id == ls_span.span_id
    assert c.attributes["otel_bridge.process.exit_observed"] is False
    assert "process.exit.code" not in c.attributes
    assert c.end_time_unix_nano == child.time  # last seen, not an invented exit
    assert c.name == "process sleep"


def test_deterministic_trace_without_traceparent(monkeypatch: object) -> None:
    """Without a traceparent the OS plane gets a deterministic trace id and root spans."""
    import os

    env_tp = os.environ.pop("TRACEPARENT", None)
    try:
        proc, sink, _ = make(Config())
        obs, ls, _ = scenario()
        proc.consume(Batch(observations=tuple(obs)))
        proc.shutdown()
    finally:
        if env_tp is not None:
            os.environ["TRACEPARENT"] = env_tp
    [ls_span] = [s for s in sink.spans if s.span_id == process_span_id(ls.identity)]
    assert ls_span.trace_id == run_trace_id(ls.host)
    assert ls_span.parent_span_id == b""


def test_exact_link_preferred_in_attributes() -> None:
    """With an exact link the span attributes describe it, and it is linked too."""
    proc, sink, _ = make()
    p = Proc(pid=7, exe="/usr/bin/git", argv=("git",), time=T0 + MS, traceparent=traceparent(SPAN))
    obs = correlated(declaration(SPAN, "git", T0, T0 + 500 * MS) + p.observations())
    proc.consume(Batch(spans=(tool_span(),), observations=tuple(obs)))
    proc.shutdown()
    [out] = [s for s in sink.spans if s.span_id == bytes.fromhex(SPAN)]
    assert out.attributes["otel_bridge.bridge.method"] == "traceparent"
    assert out.attributes["otel_bridge.bridge.identity_exact"] is True
    assert out.attributes["otel_bridge.bridge.grade"] == "C"
    assert len(out.links) == 1


def test_factory_lifecycle() -> None:
    """The factory's default config validates; start/shutdown with the timer thread works."""
    cfg = factory.default_config()
    assert cfg.validate() == []
    assert Config(traceparent="nope", hold_delay=-1).validate()
    sink = RecordingConsumer()
    comp = factory.create(
        CreateSettings(id="enrich"), Config(tick_interval=0.01, hold_delay=0), sink
    )
    comp.start(Host())
    comp.consume(Batch(spans=(tool_span(),)))  # type: ignore[attr-defined]
    wait_until(lambda: sink.spans, 2, "the timer thread to forward the held span")
    assert sink.spans == [tool_span()]
    comp.shutdown()
    comp.shutdown()


def lineage(state: str, pid: int, at: int) -> LogRecord:
    """The host receiver's ``lineage`` record of a standing collector's follow of ``pid``."""
    return LogRecord(
        resource=Resource(attributes={"host.id": HOST, "service.name": "otel-bridge-host"}),
        scope=Scope(name="otel_bridge.host"),
        time_unix_nano=at,
        event_name="collection.state",
        attributes={
            "collection.name": "lineage",
            "collection.state": state,
            "collection.reason": "test",
            "process.pid": pid,
        },
    )


def unlinked_attrs(agent_pid: int, record: LogRecord | None) -> dict[str, object]:
    """The attributes enrich gives an unlinked ``ls -la`` call (T0 to T0 + 500 ms) of an agent
    whose pid is ``agent_pid``, with ``record`` (a ``lineage`` record) in the same batch."""
    proc, sink, clock = make()
    obs = correlated(declaration(SPAN, "ls -la", T0, T0 + 500 * MS, agent_pid=agent_pid))
    logs = () if record is None else (record,)
    proc.consume(Batch(spans=(tool_span(),), observations=tuple(obs), logs=logs))
    clock.now += 10
    proc.flush_due()
    (span,) = sink.spans
    return dict(span.attributes)


def test_an_unlinked_call_of_an_agent_not_yet_followed_says_unobserved() -> None:
    """A call whose agent a standing collector began following only during it, or could not
    follow, says its processes were not observed, not that none fitted; one followed before
    the call keeps the bridge's reason; a record of another pid says nothing of it."""
    since = T0 + 200 * MS
    late = unlinked_attrs(4242, lineage("degraded", 4242, since))
    assert late["otel_bridge.link.reason"] == AGENT_FOLLOWED_LATE, late
    assert late["otel_bridge.link.explanation"] == UNOBSERVED[AGENT_FOLLOWED_LATE]
    assert late[LINK_OBSERVED_SINCE] == since
    after = unlinked_attrs(4242, lineage("degraded", 4242, T0 + 600 * MS))
    assert after["otel_bridge.link.reason"] == AGENT_NOT_FOLLOWED, after
    gone = unlinked_attrs(4242, lineage("unavailable", 4242, T0))
    assert gone["otel_bridge.link.reason"] == AGENT_UNAVAILABLE, gone
    assert LINK_OBSERVED_SINCE not in gone
    for watched in (
        unlinked_attrs(4242, lineage("degraded", 4242, T0 - 1000 * MS)),
        unlinked_attrs(4242, lineage("degraded", 4243, since)),
        unlinked_attrs(4242, None),
    ):
        assert watched["otel_bridge.link.reason"] == "no_candidate", watched
        assert LINK_OBSERVED_SINCE not in watched
