"""The ``enrich`` processor: bridges onto tool spans, and the OS plane as spans.

Placed after ``correlate`` (and ``grade``) in an ``evidence`` pipeline that ends in an OTLP
exporter. It holds each span for ``hold_delay`` (default: correlate's default window plus its
default lateness plus a 1 s margin) so the bridge decided for it can still be attached, then
emits it unchanged except:

* one **span link** per ``correlated_with_process`` observation naming the span (exact links and
  singleton bridges), pointing at the process's OS-plane span, with the evidence as link
  attributes (Jaeger shows links);
* **attributes** ``otel_bridge.bridge.process.pid``, ``.process.id``, ``.method``, ``.score``,
  ``.inferred``, ``.causal``, ``.identity_exact``, ``.grade``, ``.support``, ``.time_delta_ms``,
  ``.count`` for the strongest such link (exact before heuristic), and a span **event**
  ``otel_bridge.bridge`` per link, because Phoenix drops links;
* on a **tool-call span no process was linked to** (one ``normalize`` read as a tool call),
  ``otel_bridge.link.status=unlinked``, ``otel_bridge.link.reason`` (a stable code: the
  ``correlate`` processor's skip reason for the call, else ``no_command`` or ``no_match``) and
  ``otel_bridge.link.explanation`` (the same words as ``report.md``,
  :mod:`otel_bridge.linkreasons`): it was looked for and not linked, and why, which a span
  enrich never saw as a tool call does not say (``docs/exporters.md``). When a standing
  collector's host receiver was not following the calling agent's process while the call ran
  (its ``lineage`` record, matched by the resource's ``process.pid`` or the sender's end of the
  connection), an absence reason becomes ``agent_not_followed``, ``agent_followed_late`` or
  ``agent_unavailable``, with ``otel_bridge.link.agent_observed_since_unix_nano``: nothing
  could have been seen, which is not the same as nothing fitting.

The **OS plane**: one span per observed process, under its own Resource (``service.name=
otel-bridge-host``, ``evidence.channel=os``, ``host.id``), parented by the observed process tree.
Its trace id is the run's (from ``traceparent`` in the config, else the collector's
``TRACEPARENT`` environment variable; root processes then hang under that span), else a
deterministic id derived from the run id. A span starts at the process's start event and ends at
its exit event; a process with no observed exit is emitted at shutdown ending at the last time it
was observed, marked ``otel_bridge.process.exit_observed=false``: no exit is fabricated. File and
network observations become span events: the first ``max_events_per_process`` on the process
span, and each further ``max_events_per_process`` in a **more-events span** (a child of the
process span, in the same trace and Resource, ``otel_bridge.os_plane.more=true``), sent as soon
as it is full and the last one with the process span: no event is dropped for want of room (a
busy agent's hundred file reads do not push its connection out). Only ``max_events_per_process:
0`` drops them, counted in ``dropped_events_count``. Counted: ``os_plane.more_spans``.

**Late OS events are never dropped.** A process span is sent ``hold_delay`` after the process's
exit; an observation of the process that reaches enrich after that (a socket seen by a scan or a
destroy notification behind the exit, a backend drained at shutdown) goes out in a **late-events
span**: a child of the process span, in the same trace, under the same Resource, with the same
``process.pid`` and ``otel_bridge.process.id``, ``otel_bridge.os_plane.late=true``, and the late
observations as its events (a late exit as a ``process.exit`` event with its code). Late events
are gathered for ``late_delay`` seconds (at shutdown: at once) so a burst becomes one span; each
is counted (``os_plane.late_event``, ``os_plane.late_spans``). A process whose start was never
observed but that has events is sent at shutdown too, marked
``otel_bridge.process.start_observed=false`` and starting at its first observed event. A process
a standing collector followed late (the host receiver's ``lineage`` ``degraded`` record) states
when observation began, ``otel_bridge.process.observed_since_unix_nano``: its earlier files,
connections and children are unknown, not absent.

Processes are read from their entities' typed ``ProcessFacts``; the process span's ``process.*``
attributes are written from those fields (only the ones observed). An OS observation whose process
entity carries no facts is skipped and counted (``enrich.os_plane.skipped.no_facts``).

**Durable hold** (opt-in, ``journal: {path: DIR}``): every input is journaled before ``consume``
returns and replayed at start until what it became was handed on, at-least-once; see
:mod:`otel_bridge.processors.enrich_journal`.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from otel_bridge.component import (
    PROCESSOR,
    Component,
    Consumer,
    CounterSpec,
    CreateSettings,
    Factory,
    Host,
    Telemetry,
    require_consumer,
)
from otel_bridge.grading import grade_evidence
from otel_bridge.identity import iso_ms, iso_to_ms, parse_traceparent, process_id
from otel_bridge.linkreasons import (
    ABSENCE_REASONS,
    AGENT_FOLLOWED_LATE,
    AGENT_NOT_FOLLOWED,
    AGENT_UNAVAILABLE,
    UNOBSERVED,
    unlinked_reason,
)
from otel_bridge.model import (
    BRIDGE_SKIP_ATTR,
    AnyValue,
    Attribution,
    Batch,
    Channel,
    CollectionState,
    CommandFacts,
    EmitterFacts,
    LogRecord,
    Observation,
    ProcessFacts,
    RelationKind,
    Resource,
    Scope,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    ToolCallFacts,
)
from otel_bridge.processors.correlate.shared import (
    DEFAULT_ALLOWED_LATENESS_S,
    DEFAULT_MAX_WINDOW_S,
    EXIT_EVENT,
    START_EVENTS,
    lacks_process_facts,
    process_facts_of,
)
from otel_bridge.processors.enrich_journal import HoldJournal, JournalConfig
from otel_bridge.rundir import QUEUE_DIR

SCOPE = Scope(name="otel_bridge.enrich", version="1")
_PREFIX = "otel_bridge.bridge."
LINK_STATUS = "otel_bridge.link.status"
"""On a tool-call span no process was linked to: ``unlinked`` (it was looked for)."""
LINK_REASON = "otel_bridge.link.reason"
"""Why not, as a stable code (:func:`otel_bridge.linkreasons.unlinked_reason`)."""
LINK_EXPLANATION = "otel_bridge.link.explanation"
"""Why not, in the words ``report.md`` uses."""
LINK_OBSERVED_SINCE = "otel_bridge.link.agent_observed_since_unix_nano"
"""With :data:`~otel_bridge.linkreasons.AGENT_NOT_FOLLOWED` or ``AGENT_FOLLOWED_LATE``: when the
host receiver began following the calling agent's process."""

SAME_PROCESS_MS = 1000
"""A ``lineage`` record names the process a span's resource states when their start times are
this close (clock-tick rounding and the SDK's own reading; far below pid reuse)."""
_FOLLOWS_KEPT = 65_536
"""``lineage`` records kept for telling unlinked calls of unfollowed agents (oldest go first)."""


@dataclass(frozen=True, slots=True)
class _Follow:
    """One ``lineage`` record of the host receiver: when it began to follow a process (None:
    it could not follow it), and the process's start and host as the record states them."""

    since_ns: int | None
    start_ms: int | None
    host: str | None


@dataclass(slots=True)
class _ToolSeen:
    """What enrich learned of a tool-call span from the observations about it."""

    command: str = ""
    """The command it declared (``declared_command``), ``""`` when none."""
    skip: str | None = None
    """The bridge's reason for linking no process to it (``correlate.skip``), if it gave one."""
    emitter: EmitterFacts | None = None
    """The process that sent the span, as its resource or its transport peer states it."""


HOLD_MARGIN_S = 1.0
"""What the default hold adds to correlate's default window and lateness."""


@dataclass(slots=True)
class Config:
    """Settings of the enrich processor."""

    hold_delay: float = DEFAULT_MAX_WINDOW_S + DEFAULT_ALLOWED_LATENESS_S + HOLD_MARGIN_S
    """How long a span is held for its bridge (seconds): window + lateness + margin."""
    traceparent: str = ""
    """The run's W3C traceparent; empty: the ``TRACEPARENT`` environment variable, if any."""
    os_plane: bool = True
    """Emit one span per observed process."""
    max_events_per_process: int = 128
    """Events per OS-plane span; the rest go into more-events spans (0: none, counted dropped)."""
    tick_interval: float = 0.2
    """How often held spans are checked for release."""
    late_delay: float = 1.0
    """How long late OS events of an already sent process span are gathered before their
    late-events span is sent (seconds)."""
    journal: JournalConfig = field(default_factory=JournalConfig)
    """The durable hold (:mod:`otel_bridge.processors.enrich_journal`); off without a path."""

    def validate(self) -> list[str]:
        """Problems with the settings."""
        problems = self.journal.validate()
        if self.hold_delay < 0:
            problems.append("hold_delay: must not be negative")
        if self.traceparent and parse_traceparent(self.traceparent) is None:
            problems.append("traceparent: not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)")
        if self.max_events_per_process < 0:
            problems.append("max_events_per_process: must not be negative")
        if not self.tick_interval > 0:
            problems.append("tick_interval: must be positive")
        if self.late_delay < 0:
            problems.append("late_delay: must not be negative")
        return problems


def process_span_id(identity: str) -> bytes:
    """The deterministic OS-plane span id of a process identity."""
    return hashlib.sha256(f"otel-bridge:process:{identity}".encode()).digest()[:8]


def run_trace_id(run_id: str) -> bytes:
    """The deterministic OS-plane trace id of a run without a given traceparent."""
    return hashlib.sha256(f"otel-bridge:run:{run_id}".encode()).digest()[:16]


@dataclass(slots=True)
class _Proc:
    identity: str
    host: str
    run: str
    start: int = 0
    first_seen: int = 0
    last_seen: int = 0
    exit_time: int = 0
    exit_code: AnyValue = None
    parent: str = ""
    attrs: dict[str, AnyValue] = field(default_factory=dict)
    events: list[SpanEvent] = field(default_factory=list)
    dropped_events: int = 0
    emitted: bool = False
    due: float = 0.0
    late: list[SpanEvent] = field(default_factory=list)
    """Events that arrived after the process span was sent (see the module docstring)."""
    late_due: float = 0.0
    late_spans: int = 0
    seqs: list[int] = field(default_factory=list)
    """Journal batches that fed the process span (marked done once it is sent)."""
    late_seqs: list[int] = field(default_factory=list)
    more: list[SpanEvent] = field(default_factory=list)
    """Events past the process span's ``max_events_per_process``, for its next more-events span."""
    more_spans: int = 0


class EnrichProcessor:
    """Holds spans until their bridges are known; emits them enriched plus the OS plane."""

    def __init__(
        self,
        config: Config,
        next_consumer: Consumer,
        telemetry: Telemetry,
        clock: Callable[[], float] = time.monotonic,
        journal: HoldJournal | None = None,
    ) -> None:
        self._config = config
        self._next = next_consumer
        self._telemetry = telemetry.owned_by(factory, "enrich")
        self._clock = clock
        self._lock = threading.Lock()
        tp = parse_traceparent(config.traceparent or os.environ.get("TRACEPARENT", ""))
        self._run_trace = (bytes.fromhex(tp[0]), bytes.fromhex(tp[1])) if tp else None
        self._held: list[tuple[float, Span, int]] = []
        self._links: dict[tuple[str, str], dict[str, Observation]] = {}
        self._tools: dict[tuple[str, str], _ToolSeen] = {}
        """(trace, span) ids of the tool-call spans seen (normalize's observations of them)."""
        self._journal = journal
        if journal is not None:
            journal.telemetry = self._telemetry
        self._pins: dict[int, int] = {}
        """Journal batch -> records of it still held (spans, processes, links)."""
        self._unpinned: list[int] = []
        """Journal batches whose last hold was released, marked done once forwarded."""
        self._link_seqs: dict[tuple[str, str], list[int]] = {}
        self._held_keys: dict[tuple[str, str], int] = {}
        """(trace, span) ids of the held spans (kept with a journal only)."""
        self._procs: dict[str, _Proc] = {}
        self._followed: dict[str, int] = {}
        """Process identity -> when a standing collector began to follow it (see ``_follows``)."""
        self._lineage_pid: dict[int, list[_Follow]] = {}
        """pid -> the ``lineage`` records naming it, in arrival order (see ``_follows``)."""
        self._lineage_peer: dict[tuple[str, int], _Follow] = {}
        """A pidless sender's end of its connection -> the ``lineage`` record of its follow."""
        self._full: list[Span] = []
        """More-events and late-events spans that filled up, sent at the next release."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._done = False
        self._run_id = ""

    # ------------------------------------------------------------------ lifecycle

    def start(self, host: Host) -> None:
        """Start the release timer."""
        self._telemetry = host.telemetry.in_scope_of(self._telemetry)
        if self._journal is not None and self._thread is None:
            self._journal.telemetry = self._telemetry
            for seq, batch in self._journal.open():
                self._consume(batch, seq)
        if self._thread is None:
            self._thread = threading.Thread(target=self._tick, name="enrich-release", daemon=True)
            self._thread.start()

    def shutdown(self) -> None:
        """Release every held span and every process span (open ones marked). Safe twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._done:
                return
            self._done = True
            out = self._release(force=True)
            finished = self._take_unpinned()
        try:
            if len(out):
                self._next.consume(out)
            self._mark_done(finished)
        finally:
            if self._journal is not None:
                self._journal.close()

    def _tick(self) -> None:
        while not self._stop.wait(self._config.tick_interval):
            self.flush_due()

    def flush_due(self) -> None:
        """Release the spans and exited processes whose hold has expired."""
        with self._lock:
            out = self._release(force=False)
            finished = self._take_unpinned()
        if len(out):
            self._next.consume(out)
        self._mark_done(finished)

    # ------------------------------------------------------------------ journal pins

    def _pin(self, seq: int) -> None:
        if seq >= 0:
            self._pins[seq] = self._pins.get(seq, 0) + 1

    def _unpin(self, seq: int) -> None:
        if seq < 0:
            return
        left = self._pins[seq] - 1
        if left:
            self._pins[seq] = left
        else:
            del self._pins[seq]
            self._unpinned.append(seq)

    def _take_unpinned(self) -> list[int]:
        finished, self._unpinned = self._unpinned, []
        return finished

    def _mark_done(self, finished: list[int]) -> None:
        """Mark journal batches done: call only after what they became was forwarded."""
        if finished and self._journal is not None:
            self._journal.done(finished)

    # ------------------------------------------------------------------ data

    def consume(self, batch: Batch) -> None:
        """Hold the batch's spans, learn its bridges and processes, forward everything else.

        With a journal the batch is journaled first; RefusedError when the journal is full.
        """
        seq = -1
        if self._journal is not None and (batch.spans or batch.observations):
            seq = self._journal.append(batch)
        self._consume(batch, seq)

    def _consume(self, batch: Batch, seq: int) -> None:
        now = self._clock()
        with self._lock:
            self._pin(seq)  # held while this call forwards the batch
            if not self._run_id:
                for record in batch.logs:
                    run = record.resource.attributes.get("otel_bridge.run.id")
                    if isinstance(run, str) and run:
                        self._run_id = run
                        break
            if self._config.os_plane:
                self._follows(batch.logs)
            if not self._done:  # held first, so a bridge in the same batch pins its batch
                due = now + self._config.hold_delay
                for span in batch.spans:
                    self._held.append((due, span, seq))
                    if seq >= 0:
                        self._pin(seq)
                        key = (span.trace_id.hex(), span.span_id.hex())
                        self._held_keys[key] = self._held_keys.get(key, 0) + 1
            for obs in batch.observations:
                self._learn(obs, now, seq)
            held: tuple[Span, ...] = ()
            if self._done:
                held = tuple(self._enrich(s) for s in batch.spans)
            released = self._release(force=self._done)  # after shutdown: nothing waits
            self._unpin(seq)
            finished = self._take_unpinned()
        rest = batch.replace(spans=held + released.spans)
        if len(rest):
            self._next.consume(rest)
        self._mark_done(finished)

    def _follows(self, logs: tuple[LogRecord, ...]) -> None:
        """Remember what a standing collector followed late, or could not follow: the host
        receiver's ``collection.state`` records for the collection ``lineage`` (``degraded``
        at the moment observation of a process began, ``unavailable`` when it could not
        begin; the process's pid and creation time, or the pidless sender's end of its
        connection as ``network.peer.address`` and ``.port``; ``docs/host.md``)."""
        for record in logs:
            a = record.attributes
            if (record.event_name or a.get("event.name")) != "collection.state" or a.get(
                "collection.name"
            ) != "lineage":
                continue
            state = a.get("collection.state")
            if state not in (CollectionState.DEGRADED, CollectionState.UNAVAILABLE):
                continue
            pid, host = a.get("process.pid"), record.resource.attributes.get("host.id")
            created = a.get("process.creation.time")
            start = iso_to_ms(created) if isinstance(created, str) else None
            host = host if isinstance(host, str) else None
            since = record.time_unix_nano if state == CollectionState.DEGRADED else None
            follow = _Follow(since_ns=since, start_ms=start, host=host)
            if isinstance(pid, int):
                if since is not None and host is not None and start is not None:
                    self._followed.setdefault(process_id(host, pid, start), since)
                self._lineage_pid.setdefault(pid, []).append(follow)
                _bound(self._lineage_pid)
            address, port = a.get("network.peer.address"), a.get("network.peer.port")
            if isinstance(address, str) and isinstance(port, int):
                self._lineage_peer[(address, port)] = follow
                _bound(self._lineage_peer)

    def _unobserved(self, emitter: EmitterFacts | None, span: Span) -> tuple[str, int] | None:
        """Whether the host receiver was not following the process that sent ``span`` (a tool
        call) while it ran: the reason code and when observation began (0: it never did), or
        None when it followed it throughout, or nothing is known of it."""
        if emitter is None:
            return None
        follow: _Follow | None = None
        if emitter.pid is not None:
            for known in reversed(self._lineage_pid.get(emitter.pid, ())):
                if emitter.host_id is not None and known.host not in (None, emitter.host_id):
                    continue
                if (
                    emitter.start_time_ms is not None
                    and known.start_ms is not None
                    and abs(known.start_ms - emitter.start_time_ms) > SAME_PROCESS_MS
                ):
                    continue
                follow = known
                break
        elif emitter.peer is not None:
            follow = self._lineage_peer.get((emitter.peer.address, emitter.peer.port))
        if follow is None:
            return None
        if follow.since_ns is None:
            return AGENT_UNAVAILABLE, 0
        if follow.since_ns >= span.end_time_unix_nano:
            return AGENT_NOT_FOLLOWED, follow.since_ns
        if follow.since_ns > span.start_time_unix_nano:
            return AGENT_FOLLOWED_LATE, follow.since_ns
        return None

    def _learn(self, obs: Observation, now: float, seq: int = -1) -> None:
        if obs.relation == RelationKind.CORRELATED_WITH_PROCESS and obs.object is not None:
            trace, span = obs.source.trace_id, obs.source.span_id  # the span the link is about
            if trace and span:
                self._links.setdefault((trace, span), {})[obs.id] = obs
                self._pin_for((trace, span), seq)
            return
        facts = obs.subject.facts
        if isinstance(facts, ToolCallFacts) and facts.span_id == obs.source.span_id:
            self._learn_tool(obs, facts, seq)
            return
        if not self._config.os_plane or obs.source.channel != Channel.OS:
            return
        found = process_facts_of(obs)
        if found is None:
            if lacks_process_facts(obs):
                self._telemetry.count("os_plane.skipped.no_facts")
            return
        entity, facts = found
        identity = entity.id
        event = obs.source.event
        proc = self._procs.get(identity)
        if proc is None:
            proc = _Proc(identity=identity, host=facts.host_id, run=self._run_id)
            self._procs[identity] = proc
        t = obs.time_unix_nano
        if proc.emitted:
            if self._learn_late(proc, obs, facts, now) and seq >= 0:
                self._pin(seq)  # until the late-events span is released
                proc.late_seqs.append(seq)
            return
        if seq >= 0:
            self._pin(seq)  # until the process span is released
            proc.seqs.append(seq)
        proc.first_seen = min(proc.first_seen, t) if proc.first_seen else t
        proc.last_seen = max(proc.last_seen, t)
        if facts.pid is not None:
            proc.attrs.setdefault("process.pid", facts.pid)
        if event in START_EVENTS:
            if event == "process.start" or not proc.start:
                proc.start = min(proc.start, t) if proc.start else t
            for k, v in process_attributes(facts).items():
                if event == "process.exec":
                    proc.attrs[k] = v  # the new image replaces the old one's attributes
                else:
                    proc.attrs.setdefault(k, v)
            if obs.relation == RelationKind.SPAWNED:
                proc.parent = obs.subject.id
        elif event == EXIT_EVENT:
            proc.exit_time = t
            proc.exit_code = facts.exit_code
            proc.due = now + self._config.hold_delay
        elif (event_ := _relation_event(obs, identity)) is not None:
            cap = self._config.max_events_per_process
            if len(proc.events) < cap:
                proc.events.append(event_)
            elif cap:
                proc.more.append(event_)
                if len(proc.more) >= cap:
                    self._full.append(self._more_span(proc))
            else:
                proc.dropped_events += 1

    def _pin_for(self, key: tuple[str, str], seq: int) -> None:
        """Keep journal batch ``seq`` until the held span ``key`` is released (it fed it)."""
        if seq >= 0 and key in self._held_keys:
            self._pin(seq)
            self._link_seqs.setdefault(key, []).append(seq)

    def _learn_tool(self, obs: Observation, facts: ToolCallFacts, seq: int) -> None:
        """Remember a tool-call span (an observation of its own ``tool_call`` entity): the
        command it declared and the bridge's skip reason, for ``otel_bridge.link.*``.

        ``normalize``'s observations of the span come in the span's own batch, while it is
        held; only they add a span here, so the bridge's later skip reason for a span already
        released adds nothing that would never be taken (memory stays bounded)."""
        key = (facts.trace_id, facts.span_id)
        skip = obs.subject.attrs.get(BRIDGE_SKIP_ATTR)
        seen = self._tools.get(key)
        if seen is None:
            if isinstance(skip, str) or not all(key):
                return
            seen = self._tools[key] = _ToolSeen()
        self._pin_for(key, seq)
        if isinstance(skip, str):
            seen.skip = skip
        if obs.source.emitter is not None:
            seen.emitter = obs.source.emitter
        target = obs.object.facts if obs.object is not None else None
        if obs.relation == RelationKind.DECLARED_COMMAND and isinstance(target, CommandFacts):
            seen.command = target.command

    def _learn_late(self, proc: _Proc, obs: Observation, facts: ProcessFacts, now: float) -> bool:
        """Keep an observation of an already sent process for its late-events span; whether
        it was kept."""
        event = obs.source.event
        late: SpanEvent | None
        if event == EXIT_EVENT:
            attrs: dict[str, AnyValue] = {"evidence.attribution": _attribution(obs)}
            if facts.exit_code is not None:
                attrs["process.exit.code"] = facts.exit_code
            late = SpanEvent(time_unix_nano=obs.time_unix_nano, name=EXIT_EVENT, attributes=attrs)
        else:
            late = _relation_event(obs, proc.identity)
        if late is None:
            return False  # a start or attribute record of a process already sent: nothing new
        self._telemetry.count("os_plane.late_event")
        if not proc.late:
            proc.late_due = now + self._config.late_delay
        cap = self._config.max_events_per_process
        if cap:
            proc.late.append(late)
            if len(proc.late) >= cap:  # sent now; its journal batches stay pinned until the
                self._full.append(self._late_span(proc))  # next regular late release
                proc.late_due = now + self._config.late_delay
        else:
            proc.dropped_events += 1
        return True

    def _release(self, *, force: bool) -> Batch:
        now = self._clock()
        keep: list[tuple[float, Span, int]] = []
        spans, self._full = self._full, []
        for due, span, seq in self._held:
            if force or due <= now:
                spans.append(self._enrich(span, seq))
            else:
                keep.append((due, span, seq))
        self._held = keep
        for proc in self._procs.values():
            if proc.emitted:
                if (proc.late or proc.late_seqs) and (force or proc.late_due <= now):
                    if proc.late:
                        spans.append(self._late_span(proc))
                    for seq in proc.late_seqs:
                        self._unpin(seq)
                    proc.late_seqs = []
                continue
            if not proc.start and not (force and proc.events):
                continue  # a start may still come; at the end, only one with events is sent
            if force or (proc.exit_time and proc.due <= now):
                spans.append(self._process_span(proc))
                if proc.more:
                    spans.append(self._more_span(proc))
                proc.emitted = True
                for seq in proc.seqs:
                    self._unpin(seq)
                proc.seqs = []
                self._telemetry.count("os_plane.spans")
        return Batch(spans=tuple(spans))

    # ------------------------------------------------------------------ builders

    def _trace_for(self, proc: _Proc) -> bytes:
        return self._run_trace[0] if self._run_trace else run_trace_id(proc.run or proc.host)

    def _process_span(self, proc: _Proc) -> Span:
        parent = self._procs.get(proc.parent)
        if parent is not None and parent.start:
            parent_id = process_span_id(parent.identity)
        elif self._run_trace is not None:
            parent_id = self._run_trace[1]
        else:
            parent_id = b""
        attrs: dict[str, AnyValue] = dict(proc.attrs)
        attrs["otel_bridge.process.id"] = proc.identity
        attrs["evidence.channel"] = "os"
        attrs["otel_bridge.process.exit_observed"] = bool(proc.exit_time)
        if not proc.start:
            attrs["otel_bridge.process.start_observed"] = False
        followed = self._followed.get(proc.identity)
        if followed is not None:  # what it did before (children that exited too) is unknown
            attrs["otel_bridge.process.observed_since_unix_nano"] = followed
        if proc.exit_time and proc.exit_code is not None:
            attrs["process.exit.code"] = proc.exit_code
        if not proc.exit_time:
            attrs["otel_bridge.process.last_seen_unix_nano"] = proc.last_seen
        start = proc.start or proc.first_seen
        return Span(
            resource=_resource(proc),
            scope=SCOPE,
            trace_id=self._trace_for(proc),
            span_id=process_span_id(proc.identity),
            parent_span_id=parent_id,
            name=f"process {_name(attrs)}",
            kind=SpanKind.INTERNAL,
            start_time_unix_nano=start,
            end_time_unix_nano=proc.exit_time or max(proc.last_seen, start),
            attributes=attrs,
            events=tuple(sorted(proc.events, key=lambda e: e.time_unix_nano)),
            dropped_events_count=proc.dropped_events,
        )

    def _late_span(self, proc: _Proc) -> Span:
        """The late-events span of ``proc`` (its late events taken), a child of its span."""
        events, proc.late = proc.late, []
        proc.late_spans += 1
        self._telemetry.count("os_plane.late_spans")
        return self._child_span(proc, events, "late", proc.late_spans)

    def _more_span(self, proc: _Proc) -> Span:
        """The next more-events span of ``proc`` (its ``more`` events taken), a child of its
        process span."""
        events, proc.more = proc.more, []
        proc.more_spans += 1
        self._telemetry.count("os_plane.more_spans")
        return self._child_span(proc, events, "more", proc.more_spans)

    def _child_span(self, proc: _Proc, events: list[SpanEvent], kind: str, n: int) -> Span:
        """The ``n``-th ``kind`` (``late``/``more``) events span of ``proc``: a child of its
        process span flagged ``otel_bridge.os_plane.<kind>``, holding ``events`` in time order."""
        events = sorted(events, key=lambda e: e.time_unix_nano)
        attrs: dict[str, AnyValue] = {
            k: v for k, v in proc.attrs.items() if k in ("process.pid", "process.executable.name")
        }
        attrs["otel_bridge.process.id"] = proc.identity
        attrs["evidence.channel"] = "os"
        attrs[f"otel_bridge.os_plane.{kind}"] = True
        return Span(
            resource=_resource(proc),
            scope=SCOPE,
            trace_id=self._trace_for(proc),
            span_id=process_span_id(f"{proc.identity}#{kind}{n}"),
            parent_span_id=process_span_id(proc.identity),
            name=f"process {_name(attrs)} ({kind} events)",
            kind=SpanKind.INTERNAL,
            start_time_unix_nano=events[0].time_unix_nano,
            end_time_unix_nano=events[-1].time_unix_nano,
            attributes=attrs,
            events=tuple(events),
        )

    def _enrich(self, span: Span, seq: int = -1) -> Span:
        key = (span.trace_id.hex(), span.span_id.hex())
        if seq >= 0:
            self._unpin(seq)
            left = self._held_keys.pop(key, 1) - 1
            if left:
                self._held_keys[key] = left
            for link_seq in self._link_seqs.pop(key, ()):
                self._unpin(link_seq)
        links = self._links.pop(key, None)
        tool = self._tools.pop(key, None)
        if not links:
            return span if tool is None else self._unlinked(span, tool)
        ordered = sorted(links.values(), key=_strength)
        new_links: list[SpanLink] = []
        events: list[SpanEvent] = []
        for obs in ordered:
            attrs = _bridge_attrs(obs)
            assert obs.object is not None
            proc = self._procs.get(obs.object.id)
            trace = self._trace_for(proc) if proc else self._trace_for(_Proc(obs.object.id, "", ""))
            new_links.append(
                SpanLink(trace_id=trace, span_id=process_span_id(obs.object.id), attributes=attrs)
            )
            events.append(
                SpanEvent(
                    time_unix_nano=obs.time_unix_nano, name="otel_bridge.bridge", attributes=attrs
                )
            )
        best = dict(_bridge_attrs(ordered[0]))
        span_attrs: dict[str, AnyValue] = dict(span.attributes)
        span_attrs.update({_PREFIX + k.removeprefix(_PREFIX): v for k, v in best.items()})
        span_attrs[_PREFIX + "count"] = len(ordered)
        self._telemetry.count("spans_linked")
        return msgspec.structs.replace(
            span,
            attributes=span_attrs,
            links=span.links + tuple(new_links),
            events=span.events + tuple(events),
        )

    def _unlinked(self, span: Span, tool: _ToolSeen) -> Span:
        """``span``, a tool call no process was linked to, saying so and why."""
        reason, why = unlinked_reason(tool.skip, tool.command)
        attrs: dict[str, AnyValue] = dict(span.attributes)
        gap = self._unobserved(tool.emitter, span) if reason in ABSENCE_REASONS else None
        if gap is not None:  # nothing could have been seen, rather than nothing fitted
            reason, since = gap
            why = UNOBSERVED[reason]
            if since:
                attrs[LINK_OBSERVED_SINCE] = since
            self._telemetry.count("spans_unlinked.unobserved", label=reason)
        attrs[LINK_STATUS] = "unlinked"
        attrs[LINK_REASON] = reason
        attrs[LINK_EXPLANATION] = why
        self._telemetry.count("spans_unlinked")
        return msgspec.structs.replace(span, attributes=attrs)


def _bound(kept: dict[Any, Any]) -> None:
    """Drop the oldest entries of ``kept`` past :data:`_FOLLOWS_KEPT`."""
    while len(kept) > _FOLLOWS_KEPT:
        del kept[next(iter(kept))]


def process_attributes(facts: ProcessFacts) -> dict[str, AnyValue]:
    """The ``process.*`` span attributes (OpenTelemetry semantic conventions) of what ``facts``
    state; a field that was not observed (None) gives no attribute. The environment
    (``traceparent``) stays off: it is evidence for correlation, not a span attribute."""
    values: dict[str, AnyValue] = {
        "process.pid": facts.pid,
        "process.creation.time": _iso_or_none(facts.start_time_ms),
        "process.parent_pid": facts.parent_pid,
        "process.parent.creation.time": _iso_or_none(facts.parent_start_time_ms),
        "process.executable.path": facts.executable_path,
        "process.executable.name": facts.executable_name,
        "process.command_args": facts.argv,
        "process.command_line": facts.command_line,
        "process.working_directory": facts.cwd,
        "process.owner": facts.user,
    }
    return {k: v for k, v in values.items() if v is not None}


def _relation_event(obs: Observation, identity: str) -> SpanEvent | None:
    """The span event of a file or network observation made by process ``identity``."""
    if obs.relation is None or obs.object is None or obs.subject.id != identity:
        return None
    return SpanEvent(
        time_unix_nano=obs.time_unix_nano,
        name=str(obs.relation),
        attributes={"otel_bridge.target": obs.object.id, "evidence.attribution": _attribution(obs)},
    )


def _attribution(obs: Observation) -> str:
    return str(obs.evidence.attribution or "")


def _resource(proc: _Proc) -> Resource:
    attrs: dict[str, AnyValue] = {
        "service.name": "otel-bridge-host",
        "evidence.channel": "os",
        "host.id": proc.host,
    }
    if proc.run:
        attrs["otel_bridge.run.id"] = proc.run
    return Resource(attributes=attrs)


def _name(attrs: dict[str, AnyValue]) -> str:
    return str(attrs.get("process.executable.name") or attrs.get("process.pid") or "process")


def _iso_or_none(ms: int | None) -> str | None:
    return None if ms is None else iso_ms(ms)


def _strength(obs: Observation) -> tuple[int, str]:
    exact = obs.evidence.identity_exact is True or obs.evidence.attribution == (
        Attribution.EXACT_IDENTITY
    )
    return (0 if exact else 1, obs.id)


def _bridge_attrs(obs: Observation) -> dict[str, AnyValue]:
    ev = obs.evidence
    assert obs.object is not None
    attrs: dict[str, AnyValue] = {
        _PREFIX + "process.id": obs.object.id,
        _PREFIX + "method": ev.method or "",
        _PREFIX + "identity_exact": bool(ev.identity_exact),
        _PREFIX + "grade": str(ev.grade or grade_evidence(ev)),
        _PREFIX + "support": tuple(ev.support),
    }
    facts = obs.object.facts
    if isinstance(facts, ProcessFacts):
        attrs[_PREFIX + "process.pid"] = facts.pid
    if ev.score is not None:
        attrs[_PREFIX + "score"] = ev.score
    if ev.inferred is not None:
        attrs[_PREFIX + "inferred"] = ev.inferred
    if ev.causal is not None:
        attrs[_PREFIX + "causal"] = ev.causal
    delta = obs.attrs.get("time_delta_ms")
    if isinstance(delta, int | float):
        attrs[_PREFIX + "time_delta_ms"] = delta
    return attrs


def _create(settings: CreateSettings, config: Config, next_consumer: Consumer | None) -> Component:
    journal = None
    if config.journal.path:
        journal = HoldJournal(config.journal, settings.instance_name, settings.telemetry)
    return EnrichProcessor(
        config, require_consumer(next_consumer, "enrich"), settings.telemetry, journal=journal
    )


def durable_state(
    settings: Mapping[str, Any], place: Callable[[str], str], name: str
) -> dict[str, Any]:
    """The hold journal (``journal.path``) set in ``settings``, placed in the run directory's
    ``queue/`` beside the exporters' queues (``Factory.durable_state``)."""
    journal = settings.get("journal")
    if isinstance(journal, Mapping) and journal.get("path"):
        return {"journal": {**journal, "path": place(QUEUE_DIR)}}
    return {}


factory: Factory[Config] = Factory(
    type_name="enrich",
    kind=PROCESSOR,
    default_config=Config,
    create=_create,
    durable_state=durable_state,
    signals=frozenset({"evidence"}),
    counters=(
        CounterSpec(
            "os_plane.late_event",
            "OS events that arrived after their process span was sent (sent in a late-events span)",
        ),
        CounterSpec("os_plane.late_spans", "late-events spans emitted", "{spans}"),
        CounterSpec(
            "os_plane.more_spans",
            "more-events spans emitted (a process span's events past max_events_per_process)",
            "{spans}",
        ),
        CounterSpec("os_plane.spans", "OS-plane process spans emitted", "{spans}"),
        CounterSpec("journal.replayed_batches", "journaled batches replayed at start", "{batches}"),
        CounterSpec("journal.replayed_spans", "journaled spans replayed at start", "{spans}"),
        CounterSpec("journal.replayed_observations", "journaled observations replayed at start"),
        CounterSpec("journal.refused", "spans and observations refused: the journal was full"),
        CounterSpec("journal.torn_records", "journal records torn by a kill, cut off at start"),
        CounterSpec("journal.undecodable", "journal records that could not be decoded, dropped"),
        CounterSpec(
            "os_plane.skipped.no_facts",
            "OS process observations without typed facts, skipped (never parsed from strings)",
        ),
        CounterSpec("spans_linked", "agent spans linked to an OS process span", "{spans}"),
        CounterSpec(
            "spans_unlinked",
            "tool-call spans no process was linked to, marked otel_bridge.link.status=unlinked",
            "{spans}",
        ),
        CounterSpec(
            "spans_unlinked.unobserved",
            "of those, calls whose agent's process the host receiver was not following while "
            "they ran (by reason: agent_not_followed, agent_followed_late, agent_unavailable)",
            "{spans}",
            labeled=True,
        ),
    ),
)
