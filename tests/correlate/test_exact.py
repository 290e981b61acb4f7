"""Exact identity: traceparent in a process, resource pid of a span, shared request ids."""

from __future__ import annotations

import msgspec
from correlate_builders import (
    HOST,
    MS,
    T0,
    TRACE,
    Proc,
    agent_entity,
    declaration,
    exit_obs,
    iso,
    tool_entity,
    traceparent,
)

from otel_bridge.grading import grade_evidence
from otel_bridge.model import (
    Attribution,
    Channel,
    EmitterFacts,
    Entity,
    EntityKind,
    Evidence,
    Grade,
    Observation,
    RelationKind,
    Source,
)
from otel_bridge.processors.correlate import Config, Correlator


def run(obs: list[Observation]) -> tuple[list[Observation], dict[str, int]]:
    """All derived observations of ``obs`` and the outcome counts."""
    core = Correlator(Config())
    core.add(tuple(obs))
    return core.step() + core.step(final=True), dict(core.counts())


def exact(out: list[Observation], method: str) -> list[Observation]:
    """Derived observations of one exact method."""
    return [o for o in out if o.evidence.method == method]


def assert_exact(o: Observation) -> None:
    """The evidence fields every exact link carries."""
    ev = o.evidence
    assert ev.attribution == Attribution.EXACT_IDENTITY
    assert (ev.identity_exact, ev.inferred, ev.causal) == (True, False, False)
    assert len(ev.support) == 2
    assert grade_evidence(ev) == Grade.C


def test_traceparent_links_tool_call() -> None:
    """A process whose TRACEPARENT names a tool span is linked to that tool call."""
    span = "a1" * 8
    p = Proc(pid=3, exe="/usr/bin/git", argv=("git", "status"), time=T0 + MS)
    p.traceparent = traceparent(span)
    out, counts = run(declaration(span, "git status", T0) + p.observations())
    [link] = exact(out, "traceparent")
    assert_exact(link)
    assert link.subject == tool_entity(span)
    assert link.object is not None
    assert link.object.id == p.identity
    assert link.relation == RelationKind.CORRELATED_WITH_PROCESS
    assert counts["exact.traceparent"] == 1


def test_traceparent_links_agent_span() -> None:
    """A traceparent naming an agent span links the agent of that span."""
    span = "c3" * 8
    agent = agent_entity("planner")
    agent_obs = Observation(
        id=f"{span}#0",
        time_unix_nano=T0,
        source=Source(
            channel=Channel.SEM, backend="otlp", record_id=span, trace_id=TRACE, span_id=span
        ),
        subject=agent,
        occurrence=f"{TRACE}:{span}",
        attrs={"trace_id": TRACE, "span_id": span},
    )
    p = Proc(pid=4, exe="/usr/bin/make", argv=("make",), time=T0 + MS)
    p.traceparent = traceparent(span)
    out, _ = run([agent_obs, *p.observations()])
    [link] = exact(out, "traceparent")
    assert link.subject == agent


def test_traceparent_inherited_not_relinked() -> None:
    """A child that inherited its parent's TRACEPARENT is not linked a second time."""
    span = "a1" * 8
    parent = Proc(pid=3, exe="/bin/sh", argv=("sh", "-c", "x"), time=T0 + MS)
    parent.traceparent = traceparent(span)
    child = Proc(pid=4, exe="/usr/bin/x", argv=("x",), time=T0 + 2 * MS, parent_pid=3)
    child.traceparent = traceparent(span)
    child.extra = {"process.parent.creation.time": iso(parent.ms)}
    out, counts = run(
        declaration(span, "sh -c x", T0) + parent.observations() + child.observations()
    )
    [link] = exact(out, "traceparent")
    assert link.object is not None
    assert link.object.id == parent.identity
    assert counts["exact.inherited"] == 1


def test_traceparent_unresolved_counted() -> None:
    """A traceparent naming a span never seen is counted, not guessed."""
    p = Proc(pid=3, exe="/usr/bin/git", argv=("git",), time=T0, traceparent=traceparent("ff" * 8))
    out, counts = run(p.observations())
    assert not exact(out, "traceparent")
    assert counts["exact.unresolved_traceparent"] == 1


def test_resource_pid_with_creation_time() -> None:
    """A span's resource pid + host + creation time resolves to exactly that process, read from
    the typed ``Source.emitter`` (the attribute strings are not read: here they name the other
    life of the pid)."""
    agent_proc = Proc(pid=42, exe="/usr/bin/python3", argv=("python3", "agent.py"), time=T0)
    reused = Proc(pid=42, exe="/usr/bin/python3", argv=("python3", "old.py"), time=T0 - 10_000 * MS)
    decl = declaration("a1" * 8, "ls", T0 + 500 * MS, agent_pid=42)
    emitter = EmitterFacts(host_id=HOST, pid=42, start_time_ms=agent_proc.ms)
    decl = [
        msgspec.structs.replace(
            o,
            source=msgspec.structs.replace(o.source, emitter=emitter),
            attrs={**o.attrs, "process.creation.time": iso(reused.ms)},
        )
        for o in decl
    ]
    out, _ = run(decl + agent_proc.observations() + reused.observations())
    [link] = exact(out, "resource_pid")
    assert_exact(link)
    assert link.subject == agent_entity()
    assert link.object is not None
    assert link.object.id == agent_proc.identity


def test_resource_pid_alive_at_span_time() -> None:
    """Without a creation time the process with that pid alive at span time is chosen."""
    old = Proc(pid=42, exe="/usr/bin/python3", argv=("python3", "old.py"), time=T0 - 10_000 * MS)
    new = Proc(pid=42, exe="/usr/bin/python3", argv=("python3", "agent.py"), time=T0 - 1000 * MS)
    decl = declaration("a1" * 8, "ls", T0, agent_pid=42)
    out, _ = run(decl + old.observations() + [exit_obs(old, T0 - 5000 * MS)] + new.observations())
    [link] = exact(out, "resource_pid")
    assert link.object is not None
    assert link.object.id == new.identity


def test_resource_pid_ambiguous_not_linked() -> None:
    """Two live processes with the pid and no creation time: nothing is linked."""
    a = Proc(pid=42, exe="/a", argv=("a",), time=T0 - 2000 * MS)
    b = Proc(pid=42, exe="/b", argv=("b",), time=T0 - 1000 * MS)
    out, counts = run(
        declaration("a1" * 8, "ls", T0, agent_pid=42) + a.observations() + b.observations()
    )
    assert not exact(out, "resource_pid")
    assert counts["exact.ambiguous_pid"] == 1


def request_obs(channel: Channel, subject: Entity, rid: str, n: int) -> Observation:
    """A model-request observation from ``channel`` carrying ``request.id``."""
    model = Entity(kind=EntityKind.MODEL, id="model:ollama:qwen")
    return Observation(
        id=f"{channel}{n}#0",
        time_unix_nano=T0 + n * MS,
        source=Source(
            channel=channel,
            backend="otlp",
            record_id=f"{channel}{n}",
            trace_id=TRACE,
            span_id=f"{n:016x}",
        ),
        subject=subject,
        relation=RelationKind.REQUESTED,
        object=model,
        evidence=Evidence(attribution=Attribution.REPORTED),
        attrs={"request.id": rid, "trace_id": TRACE, "span_id": f"{n:016x}"},
    )


def test_request_id_links_channels() -> None:
    """sem, gw and model observations sharing a request id are linked pairwise, non-causally."""
    gw = Entity(kind=EntityKind.SPAN, id="span:gateway")
    server = Entity(kind=EntityKind.SPAN, id="span:ollama")
    obs = [
        request_obs(Channel.SEM, agent_entity(), "req-1", 1),
        request_obs(Channel.GW, gw, "req-1", 2),
        request_obs(Channel.MODEL, server, "req-1", 3),
        request_obs(Channel.SEM, agent_entity(), "req-2", 4),
    ]
    out, counts = run(obs)
    links = exact(out, "request_id")
    assert {(o.subject.id, o.object.id if o.object else "") for o in links} == {
        (agent_entity().id, gw.id),
        (agent_entity().id, server.id),
        (gw.id, server.id),
    }
    for o in links:
        assert_exact(o)
        assert o.relation == RelationKind.SAME_REQUEST
        assert o.attrs["request.id"] == "req-1"
    assert counts["exact.request_id"] == 3


def test_exact_links_not_repeated_on_replay() -> None:
    """A replayed span or process record does not produce a second link."""
    span = "a1" * 8
    p = Proc(pid=3, exe="/usr/bin/git", argv=("git",), time=T0 + MS, traceparent=traceparent(span))
    core = Correlator(Config(allowed_lateness=0.0))
    obs = tuple(declaration(span, "git", T0) + p.observations())
    core.add(obs)
    first = core.step()
    core.add(obs)
    again = core.step() + core.step(final=True)
    assert len(exact(first + again, "traceparent")) == 1
    assert HOST in p.identity
