"""The sender of an OTLP request: the process holding the sender's end of its connection.

The ``otlp`` receiver records the transport peer of every request (:class:`TransportPeer`: the
sender's address and port, the receiver's bound port and host). For a loopback peer the host
plane observes the same connection from the sender's side: a ``connected_to`` (or
``attempted_connect``) observation of a followed process whose local end is the peer's address
and port and whose remote end is a loopback address at the receiver's port, on the receiver's
host. At any moment one socket holds such a 4-tuple, so the process holding it *sent* the
request: an identity fact from the kernel's socket tables or its connect tracepoint, not a time
window. A relay (a local OpenTelemetry Collector between the agent and the receiver) holds the
connection itself: the process found is the sender of the request, which is the span's emitter
only when nothing relays.

:class:`SenderIndex` keeps the loopback connections of followed processes and answers which
processes held a peer's connection (:meth:`SenderIndex.holders`); the decision (exactly one
process, or none and why) is :mod:`.exact`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from otel_bridge.identity import canonical_ip, is_loopback
from otel_bridge.model import (
    EndpointFacts,
    Observation,
    ProcessFacts,
    RelationKind,
    TransportPeer,
)

_CONNECTIONS = frozenset({RelationKind.CONNECTED_TO, RelationKind.ATTEMPTED_CONNECT})

PeerKey = tuple[str, str, int, int]
"""(host, sender address, sender port, receiver port)."""


def peer_key(peer: TransportPeer) -> PeerKey:
    """The key :class:`SenderIndex` files the sender's end of ``peer``'s connection under."""
    return (peer.host_id, peer.address, peer.port, peer.local_port)


@dataclass(frozen=True, slots=True)
class Holder:
    """A followed process observed holding the sender's end of a connection."""

    identity: str
    facts: ProcessFacts
    obs_ids: tuple[str, ...]
    """The connection observations (earliest first)."""
    time: int


@dataclass(slots=True)
class SenderIndex:
    """Loopback connections of followed processes, by the sender's end."""

    _held: dict[PeerKey, dict[str, Holder]] = field(default_factory=dict)

    def add_connection(self, obs: Observation) -> None:
        """Keep ``obs`` when it is a TCP connection between two loopback ends."""
        if obs.relation not in _CONNECTIONS or obs.object is None:
            return
        proc, remote = obs.subject.facts, obs.object.facts
        if not isinstance(proc, ProcessFacts) or not isinstance(remote, EndpointFacts):
            return
        if remote.transport != "tcp":
            return
        local = obs.attrs.get("network.local.address")
        port = obs.attrs.get("network.local.port")
        if not isinstance(local, str) or not isinstance(port, int) or isinstance(port, bool):
            return
        address, target = canonical_ip(local), canonical_ip(remote.address)
        if address is None or target is None or not (is_loopback(address) and is_loopback(target)):
            return
        by_process = self._held.setdefault((proc.host_id, address, port, remote.port), {})
        seen = by_process.get(obs.subject.id)
        if seen is None:
            by_process[obs.subject.id] = Holder(obs.subject.id, proc, (obs.id,), obs.time_unix_nano)
        elif obs.id not in seen.obs_ids:
            ids = tuple(sorted((*seen.obs_ids, obs.id)))
            by_process[obs.subject.id] = Holder(
                seen.identity, seen.facts, ids, min(seen.time, obs.time_unix_nano)
            )

    def holders(self, peer: TransportPeer) -> list[Holder]:
        """The processes observed holding the sender's end of ``peer``'s connection."""
        found = self._held.get(peer_key(peer))
        return [] if found is None else sorted(found.values(), key=lambda h: h.identity)

    def evict(self, horizon: int) -> None:
        """Forget connections first observed before ``horizon``."""
        self._held = {
            k: kept
            for k, v in self._held.items()
            if (kept := {i: h for i, h in v.items() if h.time >= horizon})
        }
