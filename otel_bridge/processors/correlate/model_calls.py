"""Model calls joined to the connections their process made: ``model served_at endpoint``.

A model call span (any convention ``normalize`` reads: its ``#0`` observation is the model node)
whose resource states ``process.pid`` (or, stating none, whose request came from a loopback
transport peer that one followed process was observed holding: :mod:`.peer`; the span's
sender stands for its process, ``sender`` in the link's attributes) is joined to the
``connected_to`` and ``attempted_connect`` observations of that process (same pid, same host
when the span states ``host.id``, same start time when it states ``process.creation.time``).
An attempt counts: a client's non-blocking ``connect`` returns before the handshake completes,
so a backend that sees only the system call (``strace``) reports the connection as attempted;
the derived link's ``connection`` attribute says which relation it rests on.

* **exact** (``attribution=exact_identity, identity_exact=true, inferred=false, causal=false``,
  method ``model_endpoint``): the span states the endpoint it called (``server.address`` and
  ``server.port``, or OpenLLMetry's ``gen_ai.openai.api_base`` URL) and the process was observed
  connected to that address and port at or before the span's end (an HTTP client reuses a
  kept-alive connection, so the connection may predate the call). Addresses compare as IP
  addresses; ``localhost`` stands for the loopback addresses. A host name that is no IP address
  cannot be compared without a resolution nobody observed: no link (``unresolved_address``).
* **inferred** (``attribution=heuristic, inferred=true, causal=false``, method
  ``model_endpoint:time_process``: grade D): the span states no endpoint, and the process was
  observed connecting to exactly one endpoint during the span's interval. A connection found
  already open when the backend attached to the process (``network.observed_at=attach``) says
  when it was seen, not when it was opened: it takes no part in this route.
* **none**: two or more endpoints are compatible (``several_endpoints``), none was observed
  (``no_connection``), or the stated one was not (``endpoint_not_observed``). A stated endpoint
  is never replaced by a guessed one.

The subject is the model entity of the call and the object the endpoint entity the OS plane
observed; the support is the call's observation and the connection's. Outcomes are counted as
``model_endpoint.<outcome>``. A call is decided once the watermark passes its end, so every
connection observed before then has arrived; a call known only by its transport peer waits
until its sender is known too (the host plane may record the sender's end of its connection
later), to the end of the run or until eviction passes it (``no_process``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from otel_bridge.identity import canonical_ip, int_value, str_value
from otel_bridge.model import (
    Attributes,
    Attribution,
    Channel,
    EndpointFacts,
    Entity,
    EntityKind,
    Evidence,
    ModelFacts,
    Observation,
    ProcessFacts,
    RelationKind,
    TransportPeer,
)
from otel_bridge.processors.correlate.exact import derived, exact_evidence
from otel_bridge.processors.correlate.peer import Holder

Senders = Callable[[TransportPeer], Holder | None]
"""The one process that sent a peer's request (``ExactLinker.sender``), else None."""

_MODEL = EntityKind.MODEL
FOUND_AT_ATTACH = "attach"
"""``network.observed_at`` of a connection found already open when a backend attached."""
_CONNECTIONS = frozenset({RelationKind.CONNECTED_TO, RelationKind.ATTEMPTED_CONNECT})
_LOOPBACK = frozenset({"127.0.0.1", "::1"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class _Call:
    obs_id: str
    start: int
    end: int
    channel: Channel
    model: Entity
    host: str
    pid: int
    created_ms: int | None
    address: str | None
    """The stated address (an IP address, ``localhost`` or a host name); None: not stated."""
    port: int | None
    peer: TransportPeer | None = None
    """The transport peer, when the resource states no pid (``pid`` is then 0 until the
    sender is resolved)."""


@dataclass(frozen=True, slots=True)
class _Conn:
    time: int
    obs_id: str
    host: str
    start_ms: int | None
    endpoint: Entity
    address: str
    port: int
    relation: str
    held: bool = False
    """Found already open at an attach (``network.observed_at=attach``): its time is when it
    was seen, not when it was opened."""


def stated_endpoint(attrs: Attributes) -> tuple[str | None, int | None]:
    """The (address, port) a model call states: ``server.*``, else its API base URL."""
    address = str_value(attrs.get("server.address"))
    port = int_value(attrs.get("server.port"))
    if address:
        return address, port
    base = str_value(attrs.get("gen_ai.openai.api_base"))
    if base:
        try:
            parts = urlsplit(base)
            url_port = parts.port
        except ValueError:
            return None, None
        if parts.hostname:
            return parts.hostname, url_port or _DEFAULT_PORTS.get(parts.scheme)
    return None, None


def _matches(call: _Call, conn: _Conn) -> bool | None:
    """Whether ``conn`` goes where ``call`` says it went; None when that cannot be told."""
    assert call.address is not None
    if call.port is not None and call.port != conn.port:
        return False
    if call.address.lower() == "localhost":
        return conn.address in _LOOPBACK
    wanted = canonical_ip(call.address)
    if wanted is None:
        return None  # a host name: its resolution was not observed
    return wanted == conn.address


@dataclass(slots=True)
class ModelCallLinker:
    """Streams model calls and connections in, hands out ``served_at`` links when decidable."""

    counts: dict[str, int] = field(default_factory=dict)
    _calls: list[_Call] = field(default_factory=list)
    _conns: dict[int, list[_Conn]] = field(default_factory=dict)
    _emitted: set[str] = field(default_factory=set)

    def _count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def add_call(self, obs: Observation) -> None:
        """A span observation: kept when it is a model call's ``#0`` naming its process."""
        model = obs.subject
        if obs.relation is not None or model.kind != _MODEL:
            return
        if not isinstance(model.facts, ModelFacts):
            return
        emitter = obs.source.emitter  # the process the span's resource names
        if emitter is None or (emitter.pid is None and emitter.peer is None):
            return
        address, port = stated_endpoint(obs.attrs)
        self._calls.append(
            _Call(
                obs_id=obs.id,
                start=obs.time_unix_nano,
                end=obs.end_time_unix_nano or obs.time_unix_nano,
                channel=obs.source.channel,
                model=model,
                host=emitter.host_id or "",
                pid=emitter.pid or 0,
                created_ms=emitter.start_time_ms,
                address=address,
                port=port,
                peer=None if emitter.pid is not None else emitter.peer,
            )
        )

    def add_connection(self, obs: Observation) -> None:
        """An OS observation: kept when it is a connection or an attempt, typed on both ends."""
        if obs.relation not in _CONNECTIONS or obs.object is None:
            return
        proc, endpoint = obs.subject.facts, obs.object.facts
        if not isinstance(proc, ProcessFacts) or not isinstance(endpoint, EndpointFacts):
            return
        address = canonical_ip(endpoint.address) or endpoint.address
        conn = _Conn(
            obs.time_unix_nano,
            obs.id,
            proc.host_id,
            proc.start_time_ms,
            obs.object,
            address,
            endpoint.port,
            str(obs.relation),
            obs.attrs.get("network.observed_at") == FOUND_AT_ATTACH,
        )
        self._conns.setdefault(proc.pid, []).append(conn)

    def decide(
        self, watermark: int, final: bool = False, senders: Senders | None = None
    ) -> list[Observation]:
        """Links of the calls whose end the watermark passed (every call at ``final``);
        ``senders`` resolves the process of a call known only by its transport peer."""
        out: list[Observation] = []
        waiting: list[_Call] = []
        for call in self._calls:
            if call.end > watermark and not final:
                waiting.append(call)
                continue
            if call.peer is not None:
                held = None if senders is None else senders(call.peer)
                if held is None:
                    if not final:
                        # The host plane may record the sender's end of the connection after
                        # the watermark passed the call: wait for it (to the end, or until
                        # eviction), as the sender's own link does.
                        waiting.append(call)
                        continue
                    self._count("model_endpoint.no_process")
                    continue
                facts = held.facts
                call = replace(  # noqa: PLW2901 (the call, now with its sender's process)
                    call, host=facts.host_id, pid=facts.pid, created_ms=facts.start_time_ms
                )
            link = self._decide(call)
            if link is not None and link.id not in self._emitted:
                self._emitted.add(link.id)
                out.append(link)
        self._calls = waiting
        out.sort(key=lambda o: o.id)
        return out

    def _of_process(self, call: _Call) -> list[_Conn]:
        return [
            c
            for c in self._conns.get(call.pid, ())
            if (not call.host or c.host == call.host)
            and (call.created_ms is None or c.start_ms == call.created_ms)
        ]

    def _decide(self, call: _Call) -> Observation | None:
        conns = self._of_process(call)
        if call.address is not None:
            before_end = [c for c in conns if c.time <= call.end]
            verdicts = [(_matches(call, c), c) for c in before_end]
            if any(v is None for v, _ in verdicts):
                self._count("model_endpoint.unresolved_address")
                return None
            matching = [c for v, c in verdicts if v]
            if not matching:
                self._count("model_endpoint.endpoint_not_observed")
                return None
            # The latest observation of that endpoint at or before the end: the one in use.
            return self._link(call, max(matching, key=lambda c: (c.time, c.obs_id)), exact=True)
        during = [c for c in conns if call.start <= c.time <= call.end and not c.held]
        endpoints = {c.endpoint.id for c in during}
        if not endpoints:
            self._count("model_endpoint.no_connection")
            return None
        if len(endpoints) > 1:
            self._count("model_endpoint.several_endpoints")
            return None
        return self._link(call, min(during, key=lambda c: (c.time, c.obs_id)), exact=False)

    def _link(self, call: _Call, conn: _Conn, *, exact: bool) -> Observation:
        support = tuple(sorted((call.obs_id, conn.obs_id)))
        if exact:
            self._count("model_endpoint")
            evidence = exact_evidence("model_endpoint", support)
        else:
            self._count("model_endpoint.inferred")
            evidence = Evidence(
                attribution=Attribution.HEURISTIC,
                inferred=True,
                causal=False,
                identity_exact=False,
                method="model_endpoint:time_process",
                support=support,
            )
        kind = "exact" if exact else "inferred"
        rid = f"correlate:model_endpoint:{kind}:{call.obs_id}:{conn.endpoint.id}"
        return derived(
            rid=rid,
            time=call.start,
            channel=call.channel,
            subject=call.model,
            relation=RelationKind.SERVED_AT,
            obj=conn.endpoint,
            evidence=evidence,
            attrs={
                "process.pid": call.pid,
                "host_matched": bool(call.host),
                **({"sender": True} if call.peer is not None else {}),
                "time_delta_ms": round((conn.time - call.start) / 1e6, 3),
                "connection": conn.relation,
            },
        )

    def evict(self, horizon: int) -> None:
        """Forget connections observed before ``horizon``, and the calls still waiting for
        their sender that ended before it (counted ``no_process``); other calls are dropped
        once decided."""
        waiting = [c for c in self._calls if c.peer is None or c.end >= horizon]
        for _ in range(len(self._calls) - len(waiting)):
            self._count("model_endpoint.no_process")
        self._calls = waiting
        kept: dict[int, list[_Conn]] = {}
        for pid, conns in self._conns.items():
            recent = [c for c in conns if c.time >= horizon]
            if recent:
                kept[pid] = recent
        self._conns = kept
