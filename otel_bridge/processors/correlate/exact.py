"""Exact identity links (ExecWeave sections III-B, V-E and IX-E): shared identifiers, no heuristics.

Three routes, each recorded ``attribution=exact_identity, identity_exact=true, inferred=false,
causal=false`` (sharing an identifier proves identity, not causation):

* ``traceparent``: a process whose start/exec observation states a ``traceparent`` (its
  ``ProcessFacts.traceparent``, read from ``process.env.traceparent``) is linked to the entity
  of the span it names: the tool call of that span, else the agent of that span, else (for a
  plain span) the first such entity up its reported ``child_of`` chain. A process that merely
  inherited the same ``TRACEPARENT`` from an observed parent is not linked again: its parent
  already is (counted ``correlate.exact.inherited``).
* ``resource_pid``: a span whose resource carries ``process.pid`` (with ``host.id`` and
  ``process.creation.time`` when present) resolves to the one observed process with that pid
  alive at span time on that host, exactly that start time when given; the agent of the span is
  linked to it. A model call that no agent or tool call made (a root span, or one whose nearest
  ancestors are plain spans, as instrumentors that trace only the client call emit) makes that
  process its caller: ``process requested model``. With no creation time and several live
  matches nothing is linked.
* ``transport_peer``: a span whose resource states no ``process.pid`` but whose request came
  from a loopback transport peer (:mod:`.peer`): when exactly one followed process was observed
  holding the sender's end of that connection on the receiver's host, the agent of the span
  (or, for a callerless model call, the model it requested) is linked to that process, which
  *sent* the spans (a relay between the agent and the receiver would be named instead). The
  connection observations are the link's support; only a TCP connection holds a sender's end.
  No holder (counted ``transport_peer.no_connection``: at the end, after ``retention``, or, in
  a standing collector, :meth:`ExactLinker.overdue` once ``sender_grace`` passed; the claim
  then stays open and a later holder still links it, correcting the sentence:
  ``transport_peer.corrected``), several (``transport_peer.several_processes``) or a peer that
  is not loopback (``transport_peer.not_loopback``): no link. A stated pid
  always wins; a peer whose one holder is another process than the stated pid's is counted
  (``transport_peer.disagrees``), not resolved.
* ``request_id``: ``sem``, ``gw`` and ``model`` observations sharing ``request.id`` give
  ``same_request`` relations between their (distinct) subjects, from the earlier channel in the
  order sem, gw, model to the later.

A link is decided once the watermark passes the times of the observations it rests on, so its
support (the earliest observation of each side) does not depend on arrival order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from time import monotonic_ns

from otel_bridge.identity import (
    is_loopback,
    parse_traceparent,
    process_id,
    str_value,
)
from otel_bridge.model import (
    OPERATION_KINDS,
    SENDER_CORRECTED_ATTR,
    SENDER_SKIP_ATTR,
    AgentFacts,
    AnyValue,
    Attribution,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    Observation,
    ProcessFacts,
    RelationKind,
    Source,
    ToolCallFacts,
    TransportPeer,
)
from otel_bridge.processors.correlate.index import ProcEvent
from otel_bridge.processors.correlate.peer import Holder, PeerKey, SenderIndex, peer_key

_CHANNEL_ORDER = (Channel.SEM, Channel.GW, Channel.MODEL)
# Looking up an enum member costs ~0.2 us on Python 3.11: the hot paths use these.
_AGENT = EntityKind.AGENT
_MODEL = EntityKind.MODEL
_STAND_INS = frozenset({EntityKind.SPAN, *OPERATION_KINDS})
"""Nodes that stand in for a model call's caller when no agent or tool call made it."""
_REQUESTED = RelationKind.REQUESTED
_SENT_BY_MAX = 4096
"""Resolved peers kept (cleared when full: a later claim then needs its connection again)."""
_CHILD_OF = RelationKind.CHILD_OF


def process_entity(identity: str, facts: ProcessFacts) -> Entity:
    """The process entity a derived relation points at: its identity facts only.

    Only the facts that never change over a process's life (host, pid, start time) are carried,
    with no key or label: a derived relation is stamped later than the OS records it rests on
    (its support ids), so an image or argv copied from one of them would outrank a later exec in
    the graph's latest-by-time merge and name an image the process no longer ran.
    """
    return Entity(
        kind=EntityKind.PROCESS,
        id=identity,
        attrs={"process.pid": facts.pid, "host.id": facts.host_id},
        facts=ProcessFacts(host_id=facts.host_id, pid=facts.pid, start_time_ms=facts.start_time_ms),
    )


def derived(
    *,
    rid: str,
    time: int,
    channel: Channel,
    subject: Entity,
    relation: RelationKind,
    obj: Entity,
    evidence: Evidence,
    attrs: dict[str, object] | None = None,
    span: tuple[str, str] = ("", ""),
) -> Observation:
    """A derived observation: source backend ``correlate``, id and occurrence ``rid``; ``span``
    (trace, span id, hex) names the one span a ``correlated_with_process`` link is about."""
    return Observation(
        id=rid,
        time_unix_nano=time,
        source=Source(
            channel=channel, backend="correlate", record_id=rid, trace_id=span[0], span_id=span[1]
        ),
        subject=subject,
        relation=relation,
        object=obj,
        evidence=evidence,
        occurrence=rid,
        attrs=dict(attrs or {}),  # type: ignore[arg-type]
    )


def exact_evidence(method: str, support: tuple[str, ...]) -> Evidence:
    """The evidence of an exact-identity link."""
    return Evidence(
        attribution=Attribution.EXACT_IDENTITY,
        identity_exact=True,
        inferred=False,
        causal=False,
        method=method,
        support=support,
    )


_Life = tuple[str, str, int, str, int, ProcessFacts]
"""One process seen with a pid: ``(identity, host, start, start observation id, exit time,
facts of that start observation)``.

A plain tuple replaced rather than mutated: there is one per process, and the garbage collector
stops tracking a tuple of strings, ints and (``gc=False``) facts, so it costs no collection time."""


def _began(life: _Life) -> int:
    """When the process of ``life`` started (ns): its start time as its observation states it
    (the kernel's), else when it was first observed. A process a standing collector follows
    from its first span is first observed after the spans it sent before, which name its pid."""
    ms = life[5].start_time_ms
    return life[2] if ms is None else min(life[2], ms * 1_000_000)


@dataclass(slots=True)
class _First:
    """The earliest observation (by time, then id) seen for one key."""

    time: int
    obs_id: str
    entity: Entity
    channel: Channel = Channel.SEM

    def offer(self, time: int, obs_id: str) -> None:
        self.time, self.obs_id = min((self.time, self.obs_id), (time, obs_id))


@dataclass(slots=True)
class _PeerClaim:
    """Spans of ``agent`` that named no pid, sent from ``peer``: waiting for its one holder."""

    agent: Entity
    first: _First
    peer: TransportPeer
    arrived: int
    """When the claim was first made, on the collector's monotonic clock (ns)."""
    said: bool = False
    """``no_connection`` was said for it already (:meth:`ExactLinker.overdue`); it stays open
    for a holder that would correct it."""


@dataclass(slots=True)
class ExactLinker:
    """Streams observations in, hands out exact-identity links once they are decidable."""

    counts: dict[str, int] = field(default_factory=dict)
    _span_entity: dict[tuple[str, str], tuple[int, Entity, _First]] = field(default_factory=dict)
    _span_parent: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    _tp: dict[str, tuple[ProcEvent, tuple[str, str]]] = field(default_factory=dict)
    _tp_seen: dict[str, tuple[str, str]] = field(default_factory=dict)
    _tp_rank: dict[str, tuple[bool, int, str]] = field(default_factory=dict)
    _lives: dict[int, _Life] = field(default_factory=dict)
    """The first life seen per pid (almost every pid has one: no list per process)."""
    _more_lives: dict[int, list[_Life]] = field(default_factory=dict)
    """Further lives of a reused pid."""
    _exits: list[tuple[int, int]] = field(default_factory=list)
    """Heap of (exit time, pid) for lives with an exit: :meth:`evict` visits only the pids
    whose lives may end, not every process ever seen (lives without an exit are kept)."""
    _life_count: dict[str, int] = field(default_factory=dict)
    """Lives per identity."""
    _dead: set[str] = field(default_factory=set)
    """Identities in ``_tp_seen`` whose last life was evicted (candidates to forget)."""
    _req_pending: set[str] = field(default_factory=set)
    _pid_claims: dict[
        tuple[str, str, int, int | None],
        tuple[Entity, _First, int | None, TransportPeer | None],
    ] = field(default_factory=dict)
    senders: SenderIndex = field(default_factory=SenderIndex)
    """Loopback connections of followed processes, by the sender's end (:mod:`.peer`)."""
    _peer_claims: dict[tuple[str, PeerKey], _PeerClaim] = field(default_factory=dict)
    _sent_by: dict[PeerKey, Holder] = field(default_factory=dict)
    """Peers already resolved to their one sender (kept past the connection's eviction: a
    long-lived exporter connection outlives ``retention``)."""
    _disagreed: set[tuple[str, str]] = field(default_factory=set)
    _remote_peers: set[tuple[str, PeerKey]] = field(default_factory=set)
    _unsent: list[Observation] = field(default_factory=list)
    """Sightings saying why an entity's spans have no sender, not handed out yet."""
    unlinked: list[str] = field(default_factory=list)
    """One plain sentence per entity (and reason) whose spans named no pid and that could not
    be linked to the process that sent them (:func:`unlinked_sentence`), in decision order. A
    ``no_connection`` sentence a later link contradicts is replaced in place by its correction."""
    corrections: list[str] = field(default_factory=list)
    """The corrections (:func:`corrected_sentence`), in decision order."""
    _no_connection_at: dict[str, int] = field(default_factory=dict)
    """Entity id -> index in :attr:`unlinked` of its ``no_connection`` sentence (not corrected)."""
    _requests: dict[str, dict[tuple[Channel, str], _First]] = field(default_factory=dict)
    _emitted: set[str] = field(default_factory=set)

    def _count(self, name: str) -> None:
        self.counts[name] = self.counts.get(name, 0) + 1

    def _lives_of(self, pid: int) -> list[_Life]:
        first = self._lives.get(pid)
        if first is None:
            return []
        more = self._more_lives.get(pid)
        return [first, *more] if more else [first]

    def _replace_life(self, pid: int, old: _Life, new: _Life) -> None:
        if self._lives[pid] is old:
            self._lives[pid] = new
        else:
            more = self._more_lives[pid]
            more[more.index(old)] = new

    def _lower_start(
        self, pid: int, identity: str, time: int, obs_id: str, facts: ProcessFacts | None = None
    ) -> bool:
        """Lower the start of the life of ``identity`` if ``(time, obs_id)`` is earlier; the
        facts follow the start observation (``None``: another observation of the same record).

        False when ``pid`` has no life of that identity.
        """
        for life in self._lives_of(pid):
            ident, host, start, start_id, exit_time, old_facts = life
            if ident == identity:
                if (time, obs_id) < (start, start_id):
                    new = (ident, host, time, obs_id, exit_time, facts or old_facts)
                    self._replace_life(pid, life, new)
                return True
        return False

    def _new_life(self, ev: ProcEvent) -> bool:
        """Note ``ev`` in the lives of its pid; True if it starts a new one."""
        life = (ev.identity, ev.host_id, ev.time, ev.obs_id, 0, ev.facts)
        if ev.pid not in self._lives:
            self._lives[ev.pid] = life
        elif self._lower_start(ev.pid, ev.identity, ev.time, ev.obs_id, ev.facts):
            return False
        else:
            self._more_lives.setdefault(ev.pid, []).append(life)
        return True

    # ------------------------------------------------------------------ input

    def add_event(self, ev: ProcEvent) -> None:
        """A process start/exec event: a life for pid resolution, a traceparent to link."""
        if self._new_life(ev):
            self._life_count[ev.identity] = self._life_count.get(ev.identity, 0) + 1
        tp = parse_traceparent(ev.traceparent) if ev.traceparent else None
        if tp is not None:
            rank = ev.traceparent_rank()
            seen = self._tp_rank.get(ev.identity)
            if seen is None or rank < seen:
                # The best reading so far describes the process, to itself and to its children
                # (inheritance check); a fork-time reading gives way to an exec-time one.
                self._tp_rank[ev.identity] = rank
                self._tp_seen[ev.identity] = tp
                # Queued again even when an earlier reading was already decided (say, as
                # inherited): links are de-duplicated by id when they are emitted.
                self._tp[ev.identity] = (ev, tp)

    def offer(self, identity: str, pid: int, time: int, obs_id: str) -> None:
        """Another observation of an already seen process record (keeps the smallest id)."""
        tp = self._tp.get(identity)
        if tp is not None and (time, obs_id) < (tp[0].time, tp[0].obs_id):
            self._tp[identity] = (tp[0]._replace(obs_id=obs_id, time=time), tp[1])
        self._lower_start(pid, identity, time, obs_id)

    def add_exit(self, identity: str, pid: int, time: int) -> None:
        """A ``process.exit`` observation (at ``time``) of process ``identity`` closes a life."""
        for life in self._lives_of(pid):
            if life[0] == identity:
                ident, host, start, start_id, _, facts = life
                self._replace_life(pid, life, (ident, host, start, start_id, time, facts))
                if time:
                    heapq.heappush(self._exits, (time, pid))

    def add_semantic(self, obs: Observation) -> None:
        """A span-derived observation: span entities, resource pids, request ids."""
        # The span's own ids and its resource's process are typed on the observation's source
        # (``Source.trace_id``/``span_id``, ``Source.emitter``: the agent's process is no entity).
        source = obs.source
        trace, span = source.trace_id, source.span_id
        first = _First(obs.time_unix_nano, obs.id, obs.subject, source.channel)
        if trace and span:
            self._note_span(obs, (trace, span), first)
        agent = _agent_of(obs)
        if agent is None:
            agent = _callerless_model(obs)  # then the model's caller is the span's process
        emitter = source.emitter
        if agent is not None and emitter is not None and emitter.pid is not None:
            host = emitter.host_id or ""
            ms = emitter.start_time_ms
            key = (agent.id, host, emitter.pid, ms)
            claim = self._pid_claims.get(key)
            if claim is None:
                first_seen = _First(obs.time_unix_nano, obs.id, agent, source.channel)
                self._pid_claims[key] = (agent, first_seen, ms, emitter.peer)
            else:
                claim[1].offer(obs.time_unix_nano, obs.id)
        elif agent is not None and emitter is not None and emitter.peer is not None:
            self._claim_peer(agent, emitter.peer, obs)
        rid = str_value(obs.attrs.get("request.id"))
        if rid and obs.source.channel in _CHANNEL_ORDER:
            group = self._requests.setdefault(rid, {})
            self._req_pending.add(rid)
            k = (obs.source.channel, obs.subject.id)
            if k in group:
                group[k].offer(obs.time_unix_nano, obs.id)
            else:
                group[k] = first

    def _claim_peer(self, agent: Entity, peer: TransportPeer, obs: Observation) -> None:
        """The agent of ``obs`` (no pid stated) sent it from ``peer``: a claim to decide."""
        key = (agent.id, peer_key(peer))
        claim = self._peer_claims.get(key)
        if claim is not None:
            claim.first.offer(obs.time_unix_nano, obs.id)
        elif not is_loopback(peer.address):
            # Once per connection: a remote sender's socket is on another host's tables.
            if key not in self._remote_peers:
                self._remote_peers.add(key)
                self._no_sender(
                    agent, "not_loopback", obs.time_unix_nano, obs.id, obs.source.channel, peer=peer
                )
        else:
            first = _First(obs.time_unix_nano, obs.id, agent, obs.source.channel)
            self._peer_claims[key] = _PeerClaim(agent, first, peer, monotonic_ns())

    def _no_sender(
        self,
        entity: Entity,
        why: str,
        time: int,
        obs_id: str,
        channel: Channel,
        *,
        peer: TransportPeer,
    ) -> None:
        """Count ``why`` and say it on a sighting of ``entity`` and in :attr:`unlinked` (once
        per entity and reason)."""
        self._count(f"transport_peer.{why}")
        rid = f"correlate:sender:{why}:{entity.id}"
        if rid in self._emitted:
            return
        self._emitted.add(rid)
        if why == "no_connection":
            self._no_connection_at[entity.id] = len(self.unlinked)
        elif entity.id in self._no_connection_at:
            what = "its connection was found held by several processes after all"
            self._correct(entity, what, time, channel)
        self.unlinked.append(unlinked_sentence(entity, why, peer))
        evidence = Evidence(method="transport_peer", support=(obs_id,))
        self._unsent.append(
            _sighting(entity, rid, time, channel, attrs={SENDER_SKIP_ATTR: why}, evidence=evidence)
        )

    def _claim_unsent(self, claim: _PeerClaim, why: str) -> None:
        """:meth:`_no_sender` for ``claim``'s agent, at its first request."""
        first = claim.first
        self._no_sender(claim.agent, why, first.time, first.obs_id, first.channel, peer=claim.peer)

    def _correct(self, entity: Entity, what: str, time: int, channel: Channel) -> None:
        """Replace the ``no_connection`` sentence of ``entity`` by its correction (said once),
        and mark the entity (:data:`SENDER_CORRECTED_ATTR`) on a sighting."""
        at = self._no_connection_at.pop(entity.id)
        sentence = corrected_sentence(entity, what)
        self.unlinked[at] = sentence
        self.corrections.append(sentence)
        self._count("transport_peer.corrected")
        rid = f"correlate:sender:corrected:{entity.id}"
        self._emitted.add(rid)
        attrs: dict[str, AnyValue] = {SENDER_CORRECTED_ATTR: True}
        evidence = Evidence(method="transport_peer")
        self._unsent.append(_sighting(entity, rid, time, channel, attrs=attrs, evidence=evidence))

    def unsent(self) -> list[Observation]:
        """The sightings saying why an entity has no sender, decided since the last call."""
        out, self._unsent = self._unsent, []
        return out

    def sender(self, peer: TransportPeer) -> Holder | None:
        """The one followed process observed holding ``peer``'s connection, else None."""
        key = peer_key(peer)
        done = self._sent_by.get(key)
        if done is not None:
            return done
        holders = self.senders.holders(peer)
        return holders[0] if len(holders) == 1 else None

    def _note_span(self, obs: Observation, key: tuple[str, str], first: _First) -> None:
        candidates: list[tuple[int, Entity]] = []
        for ent in (obs.subject, obs.object):
            if ent is None:
                continue
            facts = ent.facts
            if isinstance(facts, ToolCallFacts) and (facts.trace_id, facts.span_id) == key:
                candidates.append((0, ent))
            elif ent.kind == _AGENT and ent is obs.subject:
                candidates.append((1, ent))
        if obs.relation == _CHILD_OF and obs.object is not None:
            # A plain span has no facts record: its ids are the span entity's own attributes.
            pa = obs.object.attrs
            parent_span = str_value(pa.get("span_id"))
            if parent_span:
                self._span_parent[key] = (str_value(pa.get("trace_id")) or key[0], parent_span)
        for rank, ent in candidates:
            cur = self._span_entity.get(key)
            if cur is None or rank < cur[0] or (rank == cur[0] and ent.id < cur[1].id):
                self._span_entity[key] = (rank, ent, first)
            elif rank == cur[0] and ent.id == cur[1].id:
                cur[2].offer(first.time, first.obs_id)

    # ----------------------------------------------------------------- output

    def decide(self, watermark: int, final: bool = False) -> list[Observation]:
        """Links decidable at ``watermark`` (everything at ``final``)."""
        if final:
            watermark = 2**63
        out: list[Observation] = []
        out.extend(self._traceparent_links(watermark, final))
        out.extend(self._pid_links(watermark, final))
        out.extend(self._peer_links(watermark, final))
        out.extend(self.unsent())
        out.extend(self._request_links(watermark))
        out.sort(key=lambda o: o.id)
        return out

    def _resolve_span(self, key: tuple[str, str]) -> tuple[Entity, _First] | None:
        for _ in range(64):
            found = self._span_entity.get(key)
            if found is not None:
                return found[1], found[2]
            parent = self._span_parent.get(key)
            if parent is None:
                return None
            key = parent
        return None

    def _traceparent_links(self, watermark: int, final: bool) -> list[Observation]:
        out: list[Observation] = []
        for identity, (ev, tp) in list(self._tp.items()):
            if ev.time > watermark and not final:
                continue
            if self._tp_seen.get(ev.parent_identity) == tp:
                self._count("inherited")
                del self._tp[identity]
                continue
            resolved = self._resolve_span(tp)
            if resolved is None:
                if final:
                    self._count("unresolved_traceparent")
                    del self._tp[identity]
                continue
            entity, first = resolved
            del self._tp[identity]
            self._link_once(
                out,
                "traceparent",
                f"{entity.id}:{identity}",
                time=ev.time,
                channel=first.channel,
                subject=entity,
                relation=RelationKind.CORRELATED_WITH_PROCESS,
                obj=process_entity(identity, ev.facts),
                support=(first.obs_id, ev.obs_id),
                attrs={"trace_id": tp[0], "span_id": tp[1]},
                span=tp,
            )
        return out

    def _link_once(
        self,
        out: list[Observation],
        method: str,
        key: str,
        *,
        time: int,
        channel: Channel,
        subject: Entity,
        relation: RelationKind,
        obj: Entity,
        support: tuple[str, ...],
        attrs: dict[str, object],
        span: tuple[str, str] = ("", ""),
    ) -> None:
        """Append the exact link ``method``/``key`` to ``out`` unless it was emitted before."""
        rid = f"correlate:exact:{method}:{key}"
        if rid in self._emitted:
            return
        self._emitted.add(rid)
        self._count(method)
        out.append(
            derived(
                rid=rid,
                time=time,
                channel=channel,
                subject=subject,
                relation=relation,
                obj=obj,
                evidence=exact_evidence(method, tuple(sorted(support))),
                attrs=attrs,
                span=span,
            )
        )

    def _link_process(
        self,
        out: list[Observation],
        method: str,
        agent: Entity,
        first: _First,
        process: Entity,
        *,
        support: tuple[str, ...],
        attrs: dict[str, object],
    ) -> None:
        """Link ``agent`` to ``process`` (``correlated_with_process``), or, for a model call no
        agent made, ``process requested model``: the process made that root call."""
        caller = agent.kind == _MODEL
        if agent.id in self._no_connection_at:
            pid = process.facts.pid if isinstance(process.facts, ProcessFacts) else "?"
            what = f"it was linked after all: pid {pid} {_HOW_LINKED.get(method, method)}"
            self._correct(agent, what, first.time, first.channel)
        self._link_once(
            out,
            method,
            f"{agent.id}:{process.id}",
            time=first.time,
            channel=first.channel,
            subject=process if caller else agent,
            relation=RelationKind.REQUESTED if caller else RelationKind.CORRELATED_WITH_PROCESS,
            obj=agent if caller else process,
            support=support,
            attrs=attrs,
        )

    def _pid_links(self, watermark: int, final: bool) -> list[Observation]:
        out: list[Observation] = []
        for key, (agent, first, ms, peer) in list(self._pid_claims.items()):
            if first.time > watermark and not final:
                continue
            _, host, pid, _ = key
            lives = [life for life in self._lives_of(pid) if not host or life[1] == host]
            if ms is not None:
                want = {process_id(life[1], pid, ms) for life in lives}
                alive = [life for life in lives if life[0] in want]
            else:
                t = first.time
                alive = [x for x in lives if _began(x) <= t and (not x[4] or x[4] >= t)]
            if len(alive) != 1:
                if final or len(alive) > 1:
                    self._count("unresolved_pid" if not alive else "ambiguous_pid")
                    del self._pid_claims[key]
                continue
            identity, _, _, life_obs_id, _, life_facts = alive[0]
            del self._pid_claims[key]
            if peer is not None:
                self._check_peer(agent, identity, peer)
            self._link_process(
                out,
                "resource_pid",
                agent,
                first,
                process_entity(identity, life_facts),
                support=(first.obs_id, life_obs_id),
                attrs={"host_matched": bool(host)},
            )
        return out

    def _check_peer(self, agent: Entity, identity: str, peer: TransportPeer) -> None:
        """Count (once per agent and process) a loopback peer whose one holder is another
        process than the one the resource's pid names. The stated pid wins."""
        if not is_loopback(peer.address):
            return
        holder = self.sender(peer)
        if holder is not None and holder.identity != identity:
            pair = (agent.id, holder.identity)
            if pair not in self._disagreed:
                self._disagreed.add(pair)
                self._count("transport_peer.disagrees")

    def _holders(self, key: PeerKey, peer: TransportPeer) -> list[Holder]:
        """The processes observed holding ``peer``'s connection, with its resolved sender."""
        holders = self.senders.holders(peer)
        done = self._sent_by.get(key)
        if done is not None and done.identity not in {h.identity for h in holders}:
            holders = [*holders, done]
        return holders

    def overdue(self, now: int, grace: int) -> None:
        """Say ``no_connection`` for each claim with no holder whose first request arrived at
        least ``grace`` ns before ``now`` (the monotonic clock of :class:`_PeerClaim`). The
        claim stays open: a holder that still arrives is linked and the sentence corrected
        (:meth:`_correct`). Sightings via :meth:`unsent`."""
        for key, claim in self._peer_claims.items():
            if claim.said or now - claim.arrived < grace or self._holders(key[1], claim.peer):
                continue
            claim.said = True
            self._claim_unsent(claim, "no_connection")

    def _peer_links(self, watermark: int, final: bool) -> list[Observation]:
        out: list[Observation] = []
        for key, claim in list(self._peer_claims.items()):
            agent, first, peer = claim.agent, claim.first, claim.peer
            if max(first.time, peer.time_unix_nano) > watermark and not final:
                continue
            holders = self._holders(key[1], peer)
            if len(holders) != 1:
                if final or len(holders) > 1:
                    why = "no_connection" if not holders else "several_processes"
                    if why != "no_connection" or not claim.said:
                        self._claim_unsent(claim, why)
                    del self._peer_claims[key]
                continue
            holder = holders[0]
            del self._peer_claims[key]
            if len(self._sent_by) >= _SENT_BY_MAX:
                self._sent_by.clear()
            self._sent_by[key[1]] = holder
            self._link_process(
                out,
                "transport_peer",
                agent,
                first,
                process_entity(holder.identity, holder.facts),
                support=(first.obs_id, *holder.obs_ids),
                attrs={
                    "host_matched": True,
                    "sent_by": True,
                    "network.protocol.name": peer.protocol,
                    "network.peer.address": peer.address,
                    "network.peer.port": peer.port,
                    "server.port": peer.local_port,
                },
            )
        return out

    def _request_links(self, watermark: int) -> list[Observation]:
        out: list[Observation] = []
        for rid_value in sorted(self._req_pending):
            group = self._requests.get(rid_value)
            if group is None:
                self._req_pending.discard(rid_value)
                continue
            waiting = False
            entries = sorted(group.items(), key=lambda kv: (_CHANNEL_ORDER.index(kv[0][0]), kv[0]))
            for i, ((ch_a, _), a) in enumerate(entries):
                for (ch_b, _), b in entries[i + 1 :]:
                    if ch_a == ch_b or a.entity.id == b.entity.id:
                        continue
                    if max(a.time, b.time) > watermark:
                        waiting = True
                        continue
                    self._link_once(
                        out,
                        "request_id",
                        f"{rid_value}:{a.entity.id}:{b.entity.id}",
                        time=min(a.time, b.time),
                        channel=ch_a,
                        subject=a.entity,
                        relation=RelationKind.SAME_REQUEST,
                        obj=b.entity,
                        support=(a.obs_id, b.obs_id),
                        attrs={"request.id": rid_value},
                    )
            if not waiting:
                self._req_pending.discard(rid_value)
        return out

    def evict(self, horizon: int) -> None:
        """Forget state that only observations older than ``horizon`` could still use."""
        self.senders.evict(horizon)
        # A claim still without a holder this long after its request will not get one (its
        # connection would have been observed before it): decided now, not kept to the end.
        for key, claim in list(self._peer_claims.items()):
            if max(claim.first.time, claim.peer.time_unix_nano) < horizon:
                del self._peer_claims[key]
                if not claim.said:
                    self._claim_unsent(claim, "no_connection")
        self._requests = {
            k: g for k, g in self._requests.items() if any(f.time >= horizon for f in g.values())
        }
        self._span_entity = {k: v for k, v in self._span_entity.items() if v[2].time >= horizon}
        # Forget the traceparent of a process with no life left (evicted by an earlier pass)
        # unless its link is still pending.
        for ident in list(self._dead):
            if ident in self._tp_seen and ident in self._tp and not self._life_count.get(ident):
                continue
            self._dead.discard(ident)
            if ident in self._tp_seen and not self._life_count.get(ident):
                del self._tp_seen[ident]
                self._tp_rank.pop(ident, None)
        # Lives that exited before the horizon end; the others (most: no exit seen) stay.
        ended: set[int] = set()
        while self._exits and self._exits[0][0] < horizon:
            ended.add(heapq.heappop(self._exits)[1])
        for pid in ended:
            lives = self._lives_of(pid)
            kept = [x for x in lives if not x[4] or x[4] >= horizon]
            for x in lives:
                if x[4] and x[4] < horizon:
                    left = self._life_count[x[0]] - 1
                    if left:
                        self._life_count[x[0]] = left
                    else:
                        del self._life_count[x[0]]
                        if x[0] in self._tp_seen:
                            self._dead.add(x[0])
            self._more_lives.pop(pid, None)
            if kept:
                self._lives[pid] = kept[0]
                if len(kept) > 1:
                    self._more_lives[pid] = kept[1:]
            elif pid in self._lives:
                del self._lives[pid]


_UNLINKED_WHY = {
    "no_connection": "no followed process was seen holding the connection they came over "
    "({peer}): the process was not followed, or its connection was not recorded",
    "several_processes": "several followed processes were seen holding the connection they came "
    "over ({peer}, the same client port reused): not one sender",
    "not_loopback": "they came from another host ({peer}), whose sockets this host's plane does "
    "not see",
}


_HOW_LINKED = {
    "transport_peer": "held the connection its spans came over (recorded after the verdict)",
    "resource_pid": "is the process its spans' resource named",
}


def unlinked_sentence(entity: Entity, why: str, peer: TransportPeer) -> str:
    """Why ``entity`` (an agent, or the model of a call no agent made), whose spans named no
    ``process.pid``, could not be linked to the process that sent them, in plain words."""
    who = _who(entity)
    shown = f"{peer.address}:{peer.port} to port {peer.local_port}"
    reason = _UNLINKED_WHY.get(why, "no sender was found ({peer})").format(peer=shown)
    return (
        f"{who} could not be linked to its process: its spans named no process.pid and {reason}; "
        "state the pid on the resource (OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process,host with "
        "the Python SDK)"
    )


def corrected_sentence(entity: Entity, what: str) -> str:
    """The correction of an earlier ``no_connection`` sentence about ``entity``."""
    return (
        f"correction: {_who(entity)} was said not to be linked to its process (no_connection), "
        f"but {what}"
    )


def _who(entity: Entity) -> str:
    who = f"{entity.kind} {entity.label or entity.id}"
    if isinstance(entity.facts, AgentFacts):
        who += f" (service {entity.facts.service})"
    return who


def _callerless_model(obs: Observation) -> Entity | None:
    """The model of a call no agent or tool call made: a root model call span (``span.root`` on
    its node's observation), or one whose ``requested`` comes from the nearest plain span
    standing in for a caller (a launcher's span the client's trace joined, or a typed operation
    such as a workflow or chain: those stand where plain spans would)."""
    subject, obj = obs.subject, obs.object
    if obs.relation is None:
        return subject if subject.kind == _MODEL and obs.attrs.get("span.root") is True else None
    if obs.relation == _REQUESTED and subject.kind in _STAND_INS and obj is not None:
        return obj if obj.kind == _MODEL else None
    return None


def _agent_of(obs: Observation) -> Entity | None:
    if obs.subject.kind == _AGENT:
        return obs.subject
    if obs.object is not None and obs.object.kind == _AGENT:
        return obs.object
    return None


def _sighting(
    entity: Entity,
    rid: str,
    time: int,
    channel: Channel,
    *,
    attrs: dict[str, AnyValue],
    evidence: Evidence,
) -> Observation:
    """A sighting of ``entity`` by the correlator (record ``rid``) stating ``attrs``."""
    return Observation(
        id=rid,
        time_unix_nano=time,
        source=Source(channel=channel, backend="correlate", record_id=rid),
        subject=Entity(
            kind=entity.kind,
            id=entity.id,
            label=entity.label,
            attrs=attrs,
            facts=entity.facts,
            key=entity.key,
        ),
        evidence=evidence,
        occurrence=rid,
    )
