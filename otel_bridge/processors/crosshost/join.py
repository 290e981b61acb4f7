"""Cross-host joins on a gateway: one TCP connection seen from both ends, one trace across hosts.

**Connections.** A ``connected_to`` observation on host A (its ``network.local.*`` attributes and
its endpoint's address and port) and an ``accepted`` observation on host B (the accepting
process, its local address and port, the peer endpoint) describe one connection when

* the 4-tuples are the same seen from the two ends: A's local address and port are B's peer, and
  A's peer is B's local address and port, all four exactly (never by port alone: the same server
  port with another client port or address is another connection);
* the two observations come from different hosts (``ProcessFacts.host_id``), neither address is
  loopback or unspecified (those never leave a host), and the transport is TCP;
* their times are at most ``max_skew`` apart (each is an instant at which the socket existed;
  the bound absorbs the two hosts' clock difference and the sampling delay);
* exactly one process on the other side fits (a 4-tuple is reused only after TIME_WAIT, so two
  fits mean the evidence is ambiguous: no join, counted).

The join is ``connected_to_process`` (connecting process -> accepting process), attribution
``exact_identity``, ``identity_exact=true``, ``inferred=false``, ``causal=false`` (a shared
identifier proves identity, not causation), method ``tcp_4tuple``, its support the two
observations' ids (each host's ids are unique on that host; the hosts are in ``attrs``).

**Traces.** A span observation (normalize's ``<span id>#0``, whose subject is the span's node)
shipped by the agent on host B whose span's parent (from the span itself, W3C trace context) is a
span shipped by the agent on host A gives ``remote_child_of`` (child's node -> parent's node),
exact, method ``w3c_trace_context``, support the two span observations. A span's host is the
agent that normalized it (``otel_bridge.agent.host.id``, set by ``logs_to_evidence``); the join
carries its child's, so it belongs to the child's host (a store reader's ``--host``).
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec

from otel_bridge.grading import grade_evidence
from otel_bridge.model import (
    AnyValue,
    Attribution,
    Channel,
    EndpointFacts,
    Entity,
    Evidence,
    Observation,
    ProcessFacts,
    RelationKind,
    Source,
    Span,
)

from .wire import AGENT_HOST_ATTR

_K = TypeVar("_K")
_V = TypeVar("_V")
FourTuple = tuple[str, int, str, int]
"""(client address, client port, server address, server port)."""


@dataclass(slots=True)
class Sighting:
    """One end of a connection as one host observed it."""

    host: str
    process: Entity
    obs_id: str
    time: int
    channel: Channel


@dataclass(slots=True)
class _Tuple:
    connects: list[Sighting] = field(default_factory=list)
    accepts: list[Sighting] = field(default_factory=list)
    joined: set[tuple[str, str]] = field(default_factory=set)


@dataclass(slots=True)
class SpanNode:
    """A span's node as its agent normalized it."""

    host: str
    node: Entity
    obs_id: str
    channel: Channel
    time: int


@dataclass(slots=True)
class Counts:
    """What the join decided (the processor reports these as counters)."""

    connections_joined: int = 0
    connections_ambiguous: int = 0
    traces_joined: int = 0


@functools.lru_cache(maxsize=4096)
def _routable(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return not (ip.is_loopback or ip.is_unspecified)


def _int(value: AnyValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def connection_end(obs: Observation) -> tuple[FourTuple, Sighting, bool] | None:
    """(client-side 4-tuple, the sighting, is it the connecting end) of a TCP connect or accept
    observation; None for anything else."""
    if obs.relation not in (RelationKind.CONNECTED_TO, RelationKind.ACCEPTED):
        return None
    peer, proc = obs.object, obs.subject
    if peer is None or not isinstance(peer.facts, EndpointFacts):
        return None
    if not isinstance(proc.facts, ProcessFacts) or peer.facts.transport != "tcp":
        return None
    local_addr = obs.attrs.get("network.local.address")
    local_port = _int(obs.attrs.get("network.local.port"))
    if not isinstance(local_addr, str) or not local_port or not peer.facts.port:
        return None
    if not (_routable(local_addr) and _routable(peer.facts.address)):
        return None
    sighting = Sighting(proc.facts.host_id, proc, obs.id, obs.time_unix_nano, obs.source.channel)
    if obs.relation is RelationKind.CONNECTED_TO:
        return (local_addr, local_port, peer.facts.address, peer.facts.port), sighting, True
    return (peer.facts.address, peer.facts.port, local_addr, local_port), sighting, False


def _exact(method: str, support: tuple[str, ...]) -> Evidence:
    ev = Evidence(
        attribution=Attribution.EXACT_IDENTITY,
        identity_exact=True,
        inferred=False,
        causal=False,
        method=method,
        support=support,
    )
    return msgspec.structs.replace(ev, grade=grade_evidence(ev))


def party(sighting: Sighting) -> str:
    """One side of a joined pair: its host and process (two sightings of one process on one
    host are one fit)."""
    return f"{sighting.host}\x00{sighting.process.id}"


def may_pair(one: Sighting, other: Sighting, max_skew_ns: int) -> bool:
    """Whether two opposite ends of one 4-tuple may be one connection: seen on different hosts
    at most ``max_skew_ns`` apart (``otel_bridge.store.joins`` states the same in SQL; a test
    holds the two to the same answers)."""
    return one.host != other.host and abs(one.time - other.time) <= max_skew_ns


def connection_join(key: FourTuple, client: Sighting, server: Sighting) -> Observation:
    """The ``connected_to_process`` join of one connection's two ends (module docstring). Its
    id names the 4-tuple and both hosts, so every joiner (a gateway's memory, the store) that
    finds this join gives it the same id."""
    caddr, cport, saddr, sport = key
    rid = f"crosshost:tcp:{client.host}:{caddr}:{cport}:{server.host}:{saddr}:{sport}"
    attrs: dict[str, AnyValue] = {
        "network.transport": "tcp",
        "network.local.address": caddr,
        "network.local.port": cport,
        "network.peer.address": saddr,
        "network.peer.port": sport,
        "source.host.id": client.host,
        "target.host.id": server.host,
        "time_delta_ms": (server.time - client.time) / 1e6,
    }
    return Observation(
        id=rid,
        time_unix_nano=min(client.time, server.time),
        source=Source(channel=Channel.OS, backend="crosshost", record_id=rid),
        subject=client.process,
        relation=RelationKind.CONNECTED_TO_PROCESS,
        object=server.process,
        evidence=_exact("tcp_4tuple", (client.obs_id, server.obs_id)),
        occurrence=rid,
        attrs=attrs,
    )


SpanLink = tuple[str, str, str]
"""(trace id, span id, parent span id), lowercase hex."""


def span_node(obs: Observation) -> tuple[str, str, SpanNode] | None:
    """(trace id, span id, the span's node as its agent shipped it) of a span's own observation
    (normalize's ``<span id>#0`` from the ``otlp`` backend, with ``trace_id``/``span_id`` and the
    shipping agent's host in its attributes); None for anything else."""
    if obs.source.backend != "otlp" or not obs.id.endswith("#0"):
        return None
    trace, span = obs.attrs.get("trace_id"), obs.attrs.get("span_id")
    host = obs.attrs.get(AGENT_HOST_ATTR)
    if not (isinstance(trace, str) and isinstance(span, str) and isinstance(host, str)):
        return None
    return trace, span, SpanNode(host, obs.subject, obs.id, obs.source.channel, obs.time_unix_nano)


def span_parent(span: Span) -> SpanLink | None:
    """The span's link to its parent as the span itself states it (W3C trace context: the
    parent span id it was started under); None for a root span."""
    if not span.parent_span_id:
        return None
    return span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex()


def may_join_spans(child: SpanNode, parent: SpanNode) -> bool:
    """Whether a span and the span its link names as parent (same trace) make a cross-host
    trace join: shipped by agents on different hosts (``otel_bridge.store.joins`` states the
    same in SQL; a test holds the two to the same answers)."""
    return child.host != parent.host


def trace_join(link: SpanLink, child: SpanNode, parent: SpanNode) -> Observation:
    """The ``remote_child_of`` join of a span to its parent span on another host (module
    docstring). Its id names the trace and the child span, so every joiner (a gateway's memory,
    the store) that finds this join gives it the same id."""
    trace, sid, parent_id = link
    rid = f"crosshost:trace:{trace}:{sid}"
    return Observation(
        id=rid,
        time_unix_nano=child.time,
        source=Source(channel=child.channel, backend="crosshost", record_id=rid),
        subject=child.node,
        relation=RelationKind.REMOTE_CHILD_OF,
        object=parent.node,
        evidence=_exact("w3c_trace_context", (child.obs_id, parent.obs_id)),
        occurrence=rid,
        attrs={
            "trace_id": trace,
            "span_id": sid,
            "parent_span_id": parent_id,
            "source.host.id": child.host,
            "target.host.id": parent.host,
            AGENT_HOST_ATTR: child.host,  # the host it belongs to (the child span's agent)
        },
    )


def _bound(table: dict[_K, _V], limit: int) -> None:
    while len(table) > limit:
        table.pop(next(iter(table)))  # the oldest entry (insertion order)


class CrossHostJoin:
    """The join state of one gateway pipeline. Not thread-safe: the processor locks."""

    def __init__(self, max_skew_ns: int, max_tuples: int = 1_000_000) -> None:
        """Join sightings at most ``max_skew_ns`` apart; remember at most ``max_tuples`` of
        each kind of state (oldest forgotten first: a forgotten end is a join missed, never a
        wrong one)."""
        self.max_skew_ns = max_skew_ns
        self.max_tuples = max_tuples
        self.counts = Counts()
        self._tuples: dict[FourTuple, _Tuple] = {}
        self._spans: dict[tuple[str, str], SpanNode] = {}
        self._parents: dict[tuple[str, str], str] = {}
        self._children: dict[tuple[str, str], list[str]] = {}
        self._trace_done: set[tuple[str, str]] = set()

    # ----------------------------------------------------------------- connections

    def add_observation(self, obs: Observation, out: list[Observation]) -> None:
        """Learn one observation; append the joins it completes to ``out``."""
        end = connection_end(obs)
        if end is not None:
            self._add_end(*end, out)
            return
        shipped = span_node(obs)
        if shipped is not None:
            trace, span, node = shipped
            self._spans[(trace, span)] = node
            _bound(self._spans, self.max_tuples)
            self._try_span(trace, span, out)
            for child in self._children.pop((trace, span), ()):
                self._try_span(trace, child, out)

    def _add_end(
        self, key: FourTuple, sighting: Sighting, connecting: bool, out: list[Observation]
    ) -> None:
        entry = self._tuples.setdefault(key, _Tuple())
        _bound(self._tuples, self.max_tuples)
        (entry.connects if connecting else entry.accepts).append(sighting)
        others = entry.accepts if connecting else entry.connects
        fits = {party(o): o for o in others if may_pair(o, sighting, self.max_skew_ns)}
        if not fits:
            return
        if len(fits) > 1:
            self.counts.connections_ambiguous += 1
            return
        other = next(iter(fits.values()))
        client, server = (sighting, other) if connecting else (other, sighting)
        pair = (party(client), party(server))
        if pair in entry.joined:
            return
        if entry.joined:
            self.counts.connections_ambiguous += 1  # a second pair for one 4-tuple: no join
            return
        entry.joined.add(pair)
        self.counts.connections_joined += 1
        out.append(connection_join(key, client, server))

    # ----------------------------------------------------------------- traces

    def add_span(self, span: Span, out: list[Observation]) -> None:
        """Learn a span's parent; append the trace join it completes to ``out``."""
        link = span_parent(span)
        if link is None:
            return
        trace, sid, parent = link
        self._parents[(trace, sid)] = parent
        _bound(self._parents, self.max_tuples)
        if (trace, parent) not in self._spans:
            self._children.setdefault((trace, parent), []).append(sid)
            _bound(self._children, self.max_tuples)
        self._try_span(trace, sid, out)

    def _try_span(self, trace: str, sid: str, out: list[Observation]) -> None:
        parent = self._parents.get((trace, sid))
        child_node = self._spans.get((trace, sid))
        if parent is None or child_node is None or (trace, sid) in self._trace_done:
            return
        parent_node = self._spans.get((trace, parent))
        if parent_node is None or not may_join_spans(child_node, parent_node):
            return
        self._trace_done.add((trace, sid))
        if len(self._trace_done) > self.max_tuples:
            self._trace_done.clear()  # a forgotten join can only be emitted again (same id)
        self.counts.traces_joined += 1
        out.append(trace_join((trace, sid, parent), child_node, parent_node))
