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
    Source,
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
