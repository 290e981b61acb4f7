"""The ``transport_peer`` route: the decisions a real run rarely shows (several holders, another
host, a stated pid disagreeing, a remote peer), on the normalizer's own output.

The end-to-end cases (real SDK clients over gRPC and HTTP under ``observe``) are in
``tests/observe/test_observe_sender.py``.
"""

from __future__ import annotations

from correlate_builders import HOST, MS, T0, Proc, agent_entity, iso

from otel_bridge.model import (
    SENDER_SKIP_ATTR,
    Batch,
    Channel,
    EmitterFacts,
    Observation,
    RelationKind,
    Resource,
    Scope,
    Source,
    Span,
    SpanKind,
    TransportPeer,
)
from otel_bridge.processors.correlate import Config, Correlator
from otel_bridge.processors.normalize import Normalizer
from otel_bridge.testing import connection_record

RECEIVER_PORT = 4317
SENDER_PORT = 50123


def peer(address: str = "127.0.0.1", host: str = HOST) -> TransportPeer:
    return TransportPeer(
        protocol="grpc",
        address=address,
        port=SENDER_PORT,
        local_port=RECEIVER_PORT,
        host_id=host,
        time_unix_nano=T0 + 5 * MS,
    )


def agent_span(p: TransportPeer, pid: int | None = None) -> Observation:
    """An agent span's ``#0`` observation, its resource stating ``pid`` (or none)."""
    span = "a1" * 8
    return Observation(
        id=f"{span}#0",
        time_unix_nano=T0 + MS,
        source=Source(
            channel=Channel.SEM,
            backend="otlp",
            record_id=span,
            emitter=EmitterFacts(host_id=HOST if pid else None, pid=pid, peer=p),
            trace_id="ab" * 16,
            span_id=span,
        ),
        subject=agent_entity(),
        occurrence=f"{'ab' * 16}:{span}",
    )


def connection(pid: int, *, host: str = HOST, rid: str = "") -> list[Observation]:
    """What normalize makes of the sender's end of the peer's connection, held by ``pid``."""
    ends = (("127.0.0.1", SENDER_PORT), ("127.0.0.1", RECEIVER_PORT))
    record = connection_record(
        "network.connect", host, pid, ends, T0 + 2 * MS, start=iso(T0 // MS), rid=rid
    )
    out = Normalizer()(Batch(logs=(record,)))
    assert out is not None
    return [o for o in out.observations if o.relation == RelationKind.CONNECTED_TO]


def run(obs: list[Observation]) -> tuple[list[Observation], dict[str, int]]:
    core = Correlator(Config())
    core.add(tuple(obs))
    return core.step() + core.step(final=True), dict(core.counts())


def method(out: list[Observation], name: str) -> list[Observation]:
    return [o for o in out if o.evidence.method == name and o.relation is not None]


def reason(out: list[Observation]) -> str | None:
    said = [o.subject.attrs.get(SENDER_SKIP_ATTR) for o in out if o.relation is None]
    return str(said[0]) if said else None


def test_one_holder_links_the_agent_with_the_connection_as_support() -> None:
    conn = connection(7)
    out, counts = run([agent_span(peer()), *conn])
    [link] = method(out, "transport_peer")
    assert link.object is not None
    assert link.object.id == conn[0].subject.id
    assert link.subject == agent_entity()
    assert set(link.evidence.support) == {f"{'a1' * 8}#0", conn[0].id}
    assert counts["exact.transport_peer"] == 1


def test_several_holders_link_nothing_and_say_so() -> None:
    out, counts = run([agent_span(peer()), *connection(7), *connection(8, rid="r8")])
    assert not method(out, "transport_peer")
    assert counts["exact.transport_peer.several_processes"] == 1
    assert reason(out) == "several_processes"


def test_a_holder_on_another_host_is_not_the_sender() -> None:
    out, counts = run([agent_span(peer()), *connection(7, host="host-2")])
    assert not method(out, "transport_peer")
    assert counts["exact.transport_peer.no_connection"] == 1
    assert reason(out) == "no_connection"


def test_a_remote_peer_is_not_joined() -> None:
    out, counts = run([agent_span(peer(address="10.0.0.9")), *connection(7)])
    assert not method(out, "transport_peer")
    assert counts["exact.transport_peer.not_loopback"] == 1
    assert reason(out) == "not_loopback"


def test_a_stated_pid_wins_and_a_disagreeing_peer_is_counted() -> None:
    stated = Proc(pid=9, exe="/usr/bin/python3", argv=("python3", "agent.py"), time=T0)
    out, counts = run([agent_span(peer(), pid=9), *connection(7), *stated.observations()])
    [link] = method(out, "resource_pid")
    assert link.object is not None
    assert link.object.id == stated.identity
    assert not method(out, "transport_peer")
    assert counts["exact.transport_peer.disagrees"] == 1


def test_a_claim_without_holder_is_decided_once_retention_has_passed() -> None:
    """A standing collector does not keep an unresolved claim to the end: once the stream has
    moved ``retention`` past its request, it is decided (no sender) as it goes."""
    core = Correlator(Config(retention=10.0))
    core.add((agent_span(peer()),))
    assert not core.step()
    later = Proc(pid=3, exe="/bin/true", argv=("true",), time=T0 + 60 * 1000 * MS)
    core.add(tuple(later.observations()))
    out = core.step()
    assert reason(out) == "no_connection"
    assert core.counts()["exact.transport_peer.no_connection"] == 1


MODEL_PORT = 8099


def model_call(p: TransportPeer) -> list[Observation]:
    """A CLIENT ``chat`` span as ``opentelemetry-instrumentation-openai-v2`` sends it: its
    resource states no pid (the SDK's default resource), so only its transport peer names who
    sent it."""
    span = Span(
        resource=Resource(attributes={"service.name": "svc"}, peer=p),
        scope=Scope(name="opentelemetry.instrumentation.openai_v2"),
        trace_id=bytes.fromhex("cd" * 16),
        span_id=bytes.fromhex("c1" * 8),
        name="chat gpt-test",
        kind=SpanKind.CLIENT,
        start_time_unix_nano=T0 + MS,
        end_time_unix_nano=T0 + 3 * MS,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-test",
            "server.address": "127.0.0.1",
            "server.port": MODEL_PORT,
        },
    )
    out = Normalizer()(Batch(spans=(span,)))
    assert out is not None
    return list(out.observations)


def test_a_model_call_waits_for_a_sender_the_host_plane_records_late() -> None:
    """The sender's end of the OTLP connection can reach correlate after the watermark has
    passed the model call (the host plane's reader runs behind the receiver under load): the
    call waits for its sender, then joins the sender's connection to the model's server, as
    the sender's own link does. (CI saw ``served_at`` missing while ``requested`` held.)"""
    model_conn = connection_record(
        "network.connect",
        HOST,
        7,
        (("127.0.0.1", 40000), ("127.0.0.1", MODEL_PORT)),
        T0 + 2 * MS,
        start=iso(T0 // MS),
    )
    normalized = Normalizer()(Batch(logs=(model_conn,)))
    assert normalized is not None
    core = Correlator(Config())
    core.add((*model_call(peer()), *normalized.observations))
    later = Proc(pid=3, exe="/bin/true", argv=("true",), time=T0 + 10 * 1000 * MS)
    core.add(tuple(later.observations()))  # the watermark passes the call's end
    out = core.step()
    assert not [o for o in out if o.relation == RelationKind.SERVED_AT]
    core.add(tuple(connection(7)))  # the sender's end of the OTLP connection, late
    out += core.step(final=True)
    [served] = [o for o in out if o.relation == RelationKind.SERVED_AT]
    assert served.object is not None
    assert served.object.id.endswith(f":{MODEL_PORT}")
    assert (served.attrs["process.pid"], served.attrs["sender"]) == (7, True)
    counts = core.counts()
    assert counts["model_endpoint"] == 1
    assert "model_endpoint.no_process" not in counts


def test_a_model_call_whose_sender_never_shows_is_said_at_the_end() -> None:
    """Waiting is bounded: with no holder by the end, the call is counted ``no_process``."""
    core = Correlator(Config())
    core.add(tuple(model_call(peer())))
    out = core.step() + core.step(final=True)
    assert not [o for o in out if o.relation == RelationKind.SERVED_AT]
    assert core.counts()["model_endpoint.no_process"] == 1


def test_a_model_call_waiting_for_its_sender_is_evicted_with_the_stream() -> None:
    """A standing collector does not keep such a call for ever: eviction counts it."""
    core = Correlator(Config(retention=10.0))
    core.add(tuple(model_call(peer())))
    assert not core.step()
    later = Proc(pid=3, exe="/bin/true", argv=("true",), time=T0 + 60 * 1000 * MS)
    core.add(tuple(later.observations()))
    core.step()
    assert core.counts()["model_endpoint.no_process"] == 1
