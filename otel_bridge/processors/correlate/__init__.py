"""The ``correlate`` processor: exact identity first, the singleton bridge second, abstention.

It runs in an ``evidence`` pipeline after ``normalize``. Every input record passes through
unchanged; derived ``correlated_with_process`` and ``same_request`` observations are appended.

Streaming: declarations and process events are buffered. A declaration is decided once its
window has closed below the **watermark** (the largest observation time seen minus
``allowed_lateness``), or at shutdown. Exact links are decided once the watermark passes the
observations they rest on. Events older than ``retention`` below the watermark are evicted, and a
declaration that starts before the evicted horizon is skipped as ``late_declaration`` rather than
decided on partial evidence. As long as no observation arrives more than ``allowed_lateness``
behind the newest one, the derived set does not depend on arrival order.

Cost grows linearly with the stream. A process record is reduced once to a ``ProcEvent`` and
filed by time under its executable names and argument tails (:mod:`.index`); its further
observations only touch a dict. Deciding a declaration costs a few bisects plus the events and
declarations that share its names or arguments in its window, and a step visits only the windows
that closed (:mod:`.windows`). Eviction, every eighth of ``retention``, walks the retained state
and the processes that exited, not every process ever seen. ``benchmarks/correlation_scale.py``
times it; ``tests/correlate/test_scaling.py`` checks the growth of the work done.

Counts reach the run summary through ``status().outcomes`` and the counter family
``processor.<id>.outcome.<kind>``: ``bridge``, ``exact.<method>``, ``skip.<reason>``
(``no_candidate``, ``several_candidates``, ``process_ambiguous``, ``exact_identity_preferred``,
``contradicts_exact``, ``late_declaration``, ``unsupported_command.<sub-reason>``) and
``late_conflict`` (a declaration that arrived after a process it is compatible with was
bridged to another one; such a bridge cannot be recalled), and ``skipped.no_facts`` (an
observation correlation would use, a process start/exec/exit or a ``declared_command``, whose
entity carries no typed facts: it is skipped, never parsed back out of attribute strings).
:attr:`CorrelateProcessor.outcomes` exposes the same counts. A sender whose spans named no
pid and that could not be linked (``exact.transport_peer.<reason>``) is also said in words: a
warning on the log and a sentence in ``status().notes``, once each. A standing collector says
``no_connection`` once ``sender_grace`` has passed since the spans arrived and the host receiver
has settled what it was asked to follow (``ProcessInterests.settled_since``), from a thread of
its own; a later link replaces the sentence by its correction (``docs/architecture.md``).

**An idle standing collector decides too.** The watermark moves with the observations' own
times, so in a standing collector (not ``observe``, which decides everything at its end) the
last calls before the input goes quiet would wait for the next agent's data, while ``enrich``
released their spans as unlinked. The same thread therefore moves the watermark on with the
collector's clock once nothing has arrived for ``allowed_lateness``: an observation timed more
than ``allowed_lateness`` before now that has not arrived by then is late, as it would be if
later ones had come (the host plane and the agents share this clock; an agent whose clock runs
behind the collector's by more than ``allowed_lateness`` has its calls decided before its
processes' events arrive).

Everything is read from the entities' typed facts (``ProcessFacts``, ``ToolCallFacts``,
``CommandFacts``); the derived process entities carry the ``ProcessFacts`` of the observation
they rest on and its stable key.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace

from otel_bridge.component import (
    PROCESSOR,
    Component,
    ComponentStatus,
    Consumer,
    CounterSpec,
    CreateSettings,
    Factory,
    Host,
    ProcessInterests,
    Telemetry,
    require_consumer,
)
from otel_bridge.model import (
    BRIDGE_SKIP_ATTR,
    Attribution,
    Batch,
    Channel,
    Entity,
    Evidence,
    Observation,
    RelationKind,
    Source,
    ToolCallFacts,
)
from otel_bridge.processors.correlate.exact import ExactLinker, derived, process_entity
from otel_bridge.processors.correlate.index import proc_event
from otel_bridge.processors.correlate.model_calls import ModelCallLinker
from otel_bridge.processors.correlate.shared import (
    DEFAULT_ALLOWED_LATENESS_S,
    DEFAULT_MAX_WINDOW_S,
    EXIT_EVENT,
    START_EVENTS,
    lacks_process_facts,
    process_facts_of,
)
from otel_bridge.processors.correlate.singleton import (
    OURS,
    Bridge,
    Outcome,
    Policy,
    Scope,
    SingletonEngine,
    Skip,
    declaration_of,
    lacks_declaration_facts,
)

_NS = 1_000_000_000
DEFAULT_SENDER_GRACE_S = 5.0
"""``sender_grace``'s default: far above the host receiver's follow of a sender (a ``strace``
attach and its read of the held sockets take well under a second here; the ``linux`` and
``portable`` scans run every 10 to 20 ms), and the time it waits for a follow in progress is
not counted in it (``ProcessInterests.unsettled``)."""
# Looking up an enum member costs ~0.2 us on Python 3.11: the hot paths use these.
_OS = Channel.OS
_CONNECTED, _ATTEMPTED = RelationKind.CONNECTED_TO, RelationKind.ATTEMPTED_CONNECT


@dataclass(slots=True)
class Config:
    """Settings of the correlate processor (durations in seconds or ``"3s"`` strings)."""

    max_window: float = DEFAULT_MAX_WINDOW_S
    """Upper bound of a declaration's search window (section V-D: 3 s)."""
    allowed_lateness: float = field(default=DEFAULT_ALLOWED_LATENESS_S, metadata={"duration": True})
    """How far behind the newest observation a record may still arrive and count."""
    retention: float = field(default=600.0, metadata={"duration": True})
    """How long process events are kept below the watermark for late-arriving declarations."""
    sender_grace: float = field(default=DEFAULT_SENDER_GRACE_S, metadata={"duration": True})
    """A standing collector says ``no_connection`` for spans that named no pid once this long
    (on its clock) has passed since their first request arrived with no process seen holding
    its connection, and the host receiver has settled every sender it was asked to follow;
    otherwise at ``retention`` or at shutdown, as before."""
    scope: str = "emitter"
    """``emitter``: a window ends at the call's own end (or ``max_window``), never cut by another
    call; declarations are grouped by agent process or trace. ``global``: the paper's literal
    rule, any later declaration's start cuts it, even while the call still runs."""
    exact: bool = True
    """Derive exact-identity links (traceparent, resource pid, transport peer, request id)."""
    singleton: bool = True
    """Derive singleton bridges."""
    model_endpoints: bool = True
    """Join model calls to the connections of their process (:mod:`.model_calls`)."""

    def validate(self) -> list[str]:
        """Problems with the settings, as ``key: message``."""
        problems = []
        if not self.max_window > 0:
            problems.append("max_window: must be positive")
        if self.allowed_lateness < 0:
            problems.append("allowed_lateness: must not be negative")
        if self.retention < self.max_window:
            problems.append("retention: must be at least max_window")
        if not self.sender_grace > 0:
            problems.append("sender_grace: must be positive")
        if self.scope not in ("emitter", "global"):
            problems.append("scope: must be 'emitter' or 'global'")
        return problems


def bridge_observation(b: Bridge, support: tuple[str, ...]) -> Observation:
    """The derived observation of a singleton bridge."""
    first = b.events[0]
    rid = f"correlate:bridge:{b.decl.obs_id}"
    return derived(
        rid=rid,
        time=first.time,
        channel=b.decl.channel,
        subject=b.decl.tool,
        relation=RelationKind.CORRELATED_WITH_PROCESS,
        obj=process_entity(b.identity, first.facts),
        evidence=Evidence(
            attribution=Attribution.HEURISTIC,
            inferred=True,
            causal=False,
            identity_exact=False,
            method=f"singleton:{b.category}",
            score=b.score,
            support=support,
        ),
        attrs={
            "time_delta_ms": round(b.time_delta_ns / 1e6, 3),
            "command.line": b.decl.line,
            "trace_id": b.decl.trace_id,
            "span_id": b.decl.span_id,
        },
        span=(b.decl.trace_id, b.decl.span_id),
    )


def skip_observation(k: Skip) -> Observation:
    """The derived sighting of a tool call the singleton bridge skipped: its entity with
    :data:`BRIDGE_SKIP_ATTR` set to the reason, so the graph (and the report) can say why for this
    call, not only how many calls were skipped for that reason. It relates nothing."""
    rid = f"correlate:skip:{k.decl.obs_id}"
    tool = k.decl.tool
    return Observation(
        id=rid,
        time_unix_nano=k.decl.start,
        source=Source(
            channel=k.decl.channel,
            backend="correlate",
            record_id=rid,
            trace_id=k.decl.trace_id,
            span_id=k.decl.span_id,
        ),
        subject=Entity(
            kind=tool.kind,
            id=tool.id,
            label=tool.label,
            attrs={BRIDGE_SKIP_ATTR: k.reason},
            facts=tool.facts,
            key=tool.key,
        ),
        evidence=Evidence(method="singleton", support=(k.decl.obs_id,)),
        occurrence=rid,
    )


class Correlator:
    """The single-threaded core: feed batches, get derived observations. Used by the processor."""

    def __init__(self, config: Config, policy: Policy | None = None) -> None:
        scope: Scope = "global" if config.scope == "global" else "emitter"
        self.config = config
        # ``scope: global`` is the paper's literal window: cut at any later declaration's start
        literal = scope == "global"
        self.policy = (
            policy if policy is not None else replace(OURS, scope=scope, cut_at_next_start=literal)
        )
        self.engine = SingletonEngine(
            policy=self.policy, max_window_ns=int(config.max_window * _NS)
        )
        self.exact = ExactLinker()
        self.models = ModelCallLinker()
        self._max_time = 0
        self._lateness = int(config.allowed_lateness * _NS)
        self._retention = int(config.retention * _NS)
        self._evicted = 0
        self._min_time = 0
        self._record_process: dict[str, tuple[str, int]] = {}
        """Record id -> (identity, pid) of the process its indexed event is about."""
        self.skipped: Counter[str] = Counter()
        """Observations passed over, by reason (``no_facts``)."""

    @property
    def watermark(self) -> int:
        """Every observation at or before this time is assumed to have arrived."""
        return self._max_time - self._lateness

    def advance_to(self, now_ns: int) -> bool:
        """Move the watermark on as if an observation of time ``now_ns`` had arrived (a
        standing collector's clock while its input is idle); whether it moved."""
        if now_ns <= self._max_time:
            return False
        self._max_time = now_ns
        return True

    @property
    def lateness_ns(self) -> int:
        """``allowed_lateness`` in nanoseconds."""
        return self._lateness

    def add(self, observations: tuple[Observation, ...]) -> None:
        """Buffer what correlation needs from ``observations``."""
        max_time, min_time = self._max_time, self._min_time
        offer = self.engine.index.offer
        record_process = self._record_process
        # The record indexed last, and an id at or above its smallest one: a record's
        # observations arrive together, and those after the first can then be passed over.
        last_rec, last_id = "", ""
        try:
            for obs in observations:
                src = obs.source
                if src.backend == "correlate":
                    continue
                t = obs.time_unix_nano
                if t > max_time:  # noqa: PLR1730 (per observation: a compare, not a call)
                    max_time = t
                if t and (not min_time or t < min_time):
                    min_time = t
                if src.channel != _OS:
                    self._add_semantic(obs)
                    continue
                name = src.event
                if name in START_EVENTS:
                    # A record is indexed once; its other observations can only lower the id
                    # that stands for it.
                    rec, oid = src.record_id, obs.id
                    if rec == last_rec and oid >= last_id:
                        continue  # offer() would say "not lower": nothing to do
                    known = offer(rec, oid)
                    if known is None:
                        if not self._add_process(obs, rec):
                            continue
                    elif known:
                        proc = record_process.get(rec)
                        if proc is not None:
                            self.exact.offer(proc[0], proc[1], t, oid)
                    last_rec, last_id = rec, oid
                elif name == EXIT_EVENT:
                    self._add_exit(obs)
                elif obs.relation is _CONNECTED or obs.relation is _ATTEMPTED:
                    if self.config.model_endpoints:
                        self.models.add_connection(obs)
                    if self.config.exact:
                        self.exact.senders.add_connection(obs)
        finally:
            self._max_time, self._min_time = max_time, min_time

    def _add_process(self, obs: Observation, rec: str) -> bool:
        ev = proc_event(obs)
        if ev is None:
            if lacks_process_facts(obs):
                self.skipped["no_facts"] += 1
            return False
        self._record_process[rec] = (ev.identity, ev.pid)
        self.engine.add_event(ev)
        self.exact.add_event(ev)
        return True

    def _add_exit(self, obs: Observation) -> None:
        found = process_facts_of(obs)
        if found is None:
            if lacks_process_facts(obs):
                self.skipped["no_facts"] += 1
            return
        ent, facts = found
        self.exact.add_exit(ent.id, facts.pid, obs.time_unix_nano)

    def _add_semantic(self, obs: Observation) -> None:
        for ent in (obs.subject, obs.object):
            if ent is not None and isinstance(ent.facts, ToolCallFacts):
                self.engine.note_tool_span(ent.facts.trace_id, ent.facts.span_id)
        if self.config.exact:
            self.exact.add_semantic(obs)
        if self.config.model_endpoints:
            self.models.add_call(obs)
        decl = declaration_of(obs, self.policy.scope)
        if decl is None:
            if lacks_declaration_facts(obs):
                self.skipped["no_facts"] += 1
        elif self.config.singleton:
            self.engine.add_declaration(decl)

    def step(self, final: bool = False) -> list[Observation]:
        """Derived observations decidable now (all remaining ones when ``final``)."""
        wm = self.watermark
        out: list[Observation] = []
        if self.config.exact:
            out.extend(self.exact.decide(wm, final))
        if self.config.model_endpoints:
            out.extend(self.models.decide(wm, final, self.exact.sender))
        outcomes: list[Outcome] = self.engine.finish() if final else self.engine.decide(wm)
        for o in outcomes:
            if isinstance(o, Bridge):
                support = tuple(
                    sorted({o.decl.obs_id, *(self.engine.index.support_id(e) for e in o.events)})
                )
                out.append(bridge_observation(o, support))
            else:
                out.append(skip_observation(o))
        horizon = wm - self._retention
        # Evicting walks the buffers, so do it in steps of an eighth of the retention.
        if (
            not final
            and horizon > self._min_time
            and horizon - self._evicted >= self._retention // 8
        ):
            self._evicted = horizon
            self.engine.evict(horizon)
            self.exact.evict(horizon)
            out.extend(self.exact.unsent())  # claims the eviction decided
            self.models.evict(horizon)
            live = self.engine.index.record_ids()
            self._record_process = {k: v for k, v in self._record_process.items() if k in live}
        return out

    def counts(self) -> Counter[str]:
        """Outcome counts, named as in the run summary without the ``correlate.`` prefix."""
        c: Counter[str] = Counter()
        for k, v in self.engine.counts.items():
            if k in ("bridge", "late_conflict"):
                c[k] += v
            else:
                c[f"skip.{k}"] += v
        for k, v in self.exact.counts.items():
            c[f"exact.{k}"] += v
        for k, v in self.models.counts.items():
            c[k] += v
        for k, v in self.skipped.items():
            c[f"skipped.{k}"] += v
        return c


_NOTES_SHOWN = 20
"""Unlinked senders named in the status (each is logged); the rest are counted there."""
_SETTLED_FOR_NS = _NS
"""How long the host receiver must have had nothing left to follow before an early
``no_connection`` (its ``linux`` and ``portable`` scans of a process just followed run within
10 to 20 ms of the follow; ``strace`` reads the held sockets before the follow settles)."""
_IDLE_TICK_S = 0.25
"""The standing collector's clock thread looks at most this long apart (``enrich`` releases a
span one second after correlate's window and lateness: a decision must come well before)."""


class CorrelateProcessor:
    """Passes batches through, appending derived observations; flushes the rest at shutdown.

    A sender whose spans named no pid and that could not be linked to its process
    (``exact.transport_peer.<reason>``) is said once, as it is decided: a warning on the
    collector's log (not under ``observe``, whose report says it) and a sentence in
    ``status().notes`` (``run``'s last lines)."""

    def __init__(
        self,
        config: Config,
        next_consumer: Consumer,
        telemetry: Telemetry,
        logger: logging.Logger | None = None,
    ) -> None:
        self._core = Correlator(config)
        self._next = next_consumer
        self._telemetry = telemetry.owned_by(factory, "correlate")
        self._log = logger or logging.getLogger("otel_bridge.correlate")
        self._lock = threading.Lock()
        self._reported: Counter[str] = Counter()
        self._said = 0
        """Sentences of the core's ``exact.unlinked`` already logged."""
        self._say = True
        """Log them (not under ``observe``, whose report says them: ``Host.run_dir`` set)."""
        self._corrected = 0
        """Corrections of the core's ``exact.corrections`` already logged."""
        self._done = False
        self._grace = int(config.sender_grace * _NS)
        self._interests: ProcessInterests | None = None
        """The host's interests while the early verdict runs (a standing collector)."""
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._arrived_ns = 0
        """When the last batch arrived (``time.time_ns``), for the idle watermark."""

    @property
    def outcomes(self) -> dict[str, int]:
        """Bridges, exact links and skips by reason so far."""
        with self._lock:
            return dict(self._core.counts())

    def start(self, host: Host) -> None:
        """Use the collector's telemetry for the run summary; log unlinked senders unless
        under ``observe``. A standing collector (not ``observe``, which decides at its end and
        reports it) also says ``no_connection`` once ``sender_grace`` has passed, from a thread
        that looks every quarter of it (at most every second)."""
        self._telemetry = host.telemetry.in_scope_of(self._telemetry)
        self._say = host.run_dir is None
        if self._say and self._ticker is None:
            self._interests = host.interests if self._core.config.exact else None
            tick = max(0.05, min(_IDLE_TICK_S, self._core.config.sender_grace / 4))
            self._ticker = threading.Thread(
                target=self._tick, args=(tick,), name="correlate-clock", daemon=True
            )
            self._ticker.start()

    def _tick(self, interval: float) -> None:
        while not self._stop.wait(interval):
            with self._lock:
                if self._done:
                    return
                self._overdue()
                said = self._core.exact.unsent() + self._idle()
                self._publish()
            if not said:
                continue
            try:
                self._next.consume(Batch(observations=tuple(said)))
            except Exception as exc:  # said on the log; the next tick goes on
                self._log.error("correlate: sending what the clock decided failed: %s", exc)

    def _idle(self) -> list[Observation]:
        """What became decidable with the clock (under the lock; a standing collector only):
        once nothing has arrived for ``allowed_lateness``, the watermark follows the clock
        (see the module docstring)."""
        now = time.time_ns()
        if now - self._arrived_ns < self._core.lateness_ns or not self._core.advance_to(now):
            return []
        return self._core.step()

    def _overdue(self) -> None:
        """Early ``no_connection`` verdicts (under the lock; a standing collector only): once
        ``sender_grace`` passed since a claim arrived, the host receiver has nothing left to
        follow and has had nothing for :data:`_SETTLED_FOR_NS`."""
        interests = self._interests
        if interests is None:
            return
        since = interests.settled_since()
        now = time.monotonic_ns()
        if since is not None and now - since >= _SETTLED_FOR_NS:
            self._core.exact.overdue(now, self._grace)

    def status(self) -> ComponentStatus:
        """The outcome counts so far (bridges, exact links, skips by reason) and the senders
        that could not be linked, for the summary."""
        with self._lock:
            counts = self._core.counts()
            unlinked = self._core.exact.unlinked
            notes = tuple(unlinked[:_NOTES_SHOWN])
            if len(unlinked) > _NOTES_SHOWN:
                notes += (f"{len(unlinked) - _NOTES_SHOWN} more sender(s) could not be linked",)
        return ComponentStatus(outcomes={k: v for k, v in counts.items() if v}, notes=notes)

    def consume(self, batch: Batch) -> None:
        """Forward ``batch`` with the derived observations decidable now appended."""
        with self._lock:
            if self._done:
                derived_now: list[Observation] = []
            else:
                self._arrived_ns = time.time_ns()
                self._core.add(batch.observations)
                self._overdue()
                derived_now = self._core.step()
                self._publish()
        if derived_now:
            batch = batch.replace(observations=batch.observations + tuple(derived_now))
        if len(batch):
            self._next.consume(batch)

    def shutdown(self) -> None:
        """Decide everything still pending and forward it. Safe twice."""
        self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join()
        with self._lock:
            if self._done:
                return
            self._done = True
            rest = self._core.step(final=True)
            self._publish()
        if rest:
            self._next.consume(Batch(observations=tuple(rest)))

    def _publish(self) -> None:
        unlinked = self._core.exact.unlinked
        if self._say:
            for sentence in unlinked[self._said :]:
                self._log.warning("%s", sentence)
        self._said = len(unlinked)
        corrections = self._core.exact.corrections
        if self._say:
            for sentence in corrections[self._corrected :]:
                self._log.warning("%s", sentence)
        self._corrected = len(corrections)
        now = self._core.counts()
        for k, v in now.items():
            delta = v - self._reported[k]
            if delta:
                self._telemetry.count("outcome", delta, label=k)
        self._reported = now


def _create(settings: CreateSettings, config: Config, next_consumer: Consumer | None) -> Component:
    return CorrelateProcessor(
        config, require_consumer(next_consumer, "correlate"), settings.telemetry, settings.logger
    )


factory: Factory[Config] = Factory(
    type_name="correlate",
    kind=PROCESSOR,
    default_config=Config,
    create=_create,
    signals=frozenset({"evidence"}),
    counters=(CounterSpec("outcome", "correlation outcomes by kind", "{outcomes}", True),),
)
