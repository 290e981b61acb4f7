"""Shared machinery of every host backend: the lineage, process identities, OS-event records and
the batching emitter.

Backends only decide *what* happened; this module decides how it is written down, so every
backend emits the same record shapes (the table in ``docs/contracts.md``) with the same identity
for the same process.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from otel_bridge import __version__
from otel_bridge.component import Consumer, Telemetry
from otel_bridge.identity import host_id, iso_ms
from otel_bridge.launch import GATE, GATE_NAME
from otel_bridge.model import AnyValue, Batch, CollectionState, LogRecord, Resource, Scope
from otel_bridge.receivers.host.capture import ContentCapture
from otel_bridge.receivers.host.config import HostConfig
from otel_bridge.receivers.host.counters import host_telemetry
from otel_bridge.receivers.host.procfs import (
    ProcessInfo,
    approx_start_ms,
    descendants_of,
    read_process,
)
from otel_bridge.redaction import Redactor
from otel_bridge.strings import clean

SYSCALL = "syscall"
SAMPLED = "sampled_process"
SESSION = "session_observation"
_IDENTITIES_KEPT = 65_536
"""Per-pid identity attributes kept at most (the table starts over when full)."""
PLANES: tuple[str, ...] = ("process", "file", "network")
"""The collections a backend covers; per-plane ``auto`` picks a backend for each."""


def is_gate(info: ProcessInfo) -> bool:
    """Whether ``info`` is ``observe``'s gate before it exec'd CMD (``sh -c GATE
    otel-bridge-gate FIFO CMD...``, :mod:`otel_bridge.launch`): a backend that reads the running
    root from /proc (``strace``, ``ebpf``) would otherwise report its script as a process."""
    return len(info.argv) >= 4 and info.argv[1:4] == ["-c", GATE, GATE_NAME]


class Lineage:
    """The observed workload: the root pid and every descendant seen so far. Thread-safe.

    A pid leaves the lineage when it exits (so a recycled pid is not mistaken for it). A backend
    may keep an exited pid a while (its late file events still count) and mark it :meth:`ended`
    meanwhile: it holds no descriptor any more, so :meth:`live` leaves it out.
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self._pids: set[int] = {root} if root else set()
        self._ended: set[int] = set()
        self._lock = threading.Lock()

    def __contains__(self, pid: object) -> bool:
        return pid in self._pids

    def add(self, pid: int) -> None:
        """Track ``pid``."""
        with self._lock:
            self._pids.add(pid)
            self._ended.discard(pid)

    def ended(self, pid: int) -> None:
        """``pid`` exited but stays tracked for now (see the class docstring)."""
        with self._lock:
            if pid in self._pids:
                self._ended.add(pid)

    def discard(self, pid: int) -> None:
        """Stop tracking ``pid`` (it exited)."""
        with self._lock:
            self._pids.discard(pid)
            self._ended.discard(pid)

    def empty(self) -> bool:
        """True while no pid is tracked (a standing collector that follows nothing yet)."""
        return not self._pids

    def snapshot(self) -> list[int]:
        """The tracked pids now."""
        with self._lock:
            return sorted(self._pids)

    def live(self) -> list[int]:
        """The tracked pids now, without those marked :meth:`ended` (the ones that can hold
        descriptors: what a socket scan reads)."""
        with self._lock:
            return sorted(self._pids - self._ended)


class Emitter:
    """Buffers records and hands them to the next consumer as batches.

    A batch leaves when ``batch_size`` records are pending or ``batch_interval`` has passed since
    the first of them was queued (the flusher sleeps while nothing is).
    Errors from the consumer are counted and reported once, never raised into a backend.
    """

    def __init__(
        self, consumer: Consumer, telemetry: Telemetry, *, batch_size: int, interval: float
    ) -> None:
        self._consumer = consumer
        self._telemetry = host_telemetry(telemetry)
        self._batch_size = batch_size
        self._interval = interval
        self._pending: list[LogRecord] = []
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._stop = threading.Event()
        self._some = threading.Event()
        """Set when a record is queued on an empty batch (the flusher sleeps until then)."""
        self._thread: threading.Thread | None = None
        self.emitted = 0
        self.watch: Callable[[LogRecord], None] | None = None
        """Sees every record on its way out (the opt-in content capture, :mod:`.capture`)."""

    def start(self) -> None:
        """Start the periodic flusher."""
        self._thread = threading.Thread(target=self._run, name="host-emitter", daemon=True)
        self._thread.start()

    def emit(self, record: LogRecord) -> None:
        """Queue one record; flushes at once when the batch is full."""
        if self.watch is not None:
            self.watch(record)
        with self._lock:
            first = not self._pending
            self._pending.append(record)
            full = len(self._pending) >= self._batch_size
        if full:
            self.flush()
        elif first:
            self._some.set()

    def flush(self) -> None:
        """Send everything pending, in batches of at most ``batch_size`` (several threads emit:
        more than that can be pending when the flush takes them)."""
        with self._send_lock:
            with self._lock:
                records, self._pending = self._pending, []
            size = self._batch_size
            for start in range(0, len(records), size):
                self._send(records[start : start + size])

    def _send(self, records: list[LogRecord]) -> None:
        try:
            self._consumer.consume(Batch(logs=tuple(records)))
            self.emitted += len(records)
            self._telemetry.count("events_emitted", len(records))
            # counted here: ``Counter(generator)`` asks ``isinstance(generator, Mapping)``,
            # a walk of the ABC's subclasses the first time in each process (each warm run)
            by_name: dict[str, int] = {}
            for r in records:
                by_name[r.event_name] = by_name.get(r.event_name, 0) + 1
            for name, n in by_name.items():
                self._telemetry.count("events", n, label=name)
        except Exception as exc:  # a consumer failure must not kill the backend
            self._telemetry.count("events_refused", len(records))
            self._telemetry.report_once("host.refused", f"host receiver: batch refused: {exc}")

    def _run(self) -> None:
        # nothing queued: sleep until a record is (a collector with nothing to say stays idle).
        # The stop is checked again before each sleep: the clear below can swallow the wake-up
        # of a close() that came after the interval elapsed, but close() sets the stop first.
        while not self._stop.is_set():
            self._some.wait()
            if self._stop.wait(self._interval):
                return
            self._some.clear()  # before the flush takes the batch: a later record sets it again
            self.flush()

    def close(self) -> None:
        """Stop the flusher and send what is left."""
        self._stop.set()  # before the wake-up (see _run)
        self._some.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()


@dataclass(slots=True)
class HostContext:
    """What a backend is given: config, lineage, record factory and emitter."""

    config: HostConfig
    lineage: Lineage
    events: EventFactory
    telemetry: Telemetry
    redactor: Redactor
    states: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Per collection: its state and the full reason (what observes it, how, what it misses)."""
    briefs: dict[str, str] = field(default_factory=dict)
    """Per collection: the reason in a few words (the run summary's line; ``docs/host.md``)."""
    exclude_paths: tuple[str, ...] = ()
    """Directories whose file events are the collector's own (the run directory): ignored."""
    planes: frozenset[str] | None = None
    """The collections (``process``, ``file``, ``network``) this backend reports for; None =
    all. Per-plane ``auto`` runs several backends, each for its own planes: a backend's state
    of a plane it was not given is not recorded."""
    hold_gaps: bool = False
    """Hold ``unavailable`` / ``not_sampled`` states in :attr:`held` instead of emitting them
    (per-plane ``auto`` asks the next backend first; the receiver emits what nobody covered)."""
    held: dict[str, LogRecord] = field(default_factory=dict)
    capture: ContentCapture | None = None
    """The opt-in content capture (``capture.file_hashes``), None when off (:mod:`.capture`)."""

    def __post_init__(self) -> None:
        self.telemetry = host_telemetry(self.telemetry)

    def emit(self, record: LogRecord) -> None:
        """Send one record downstream."""
        self.events.emitter.emit(record)

    def snapshot_lineage(self, *, descendants: bool = True, at: int = 0) -> list[int]:
        """Adopt the root and (unless not ``descendants``) its running descendants; their pids.

        An event-driven backend sees only what happens after it attaches, so what already runs
        is read from /proc once and reported as sampled ``process.start`` events. A backend
        whose sources were attached before the root ran anything (armed) snapshots the root
        only: its descendants' forks are in its event queue. ``at``: the records' time (ns; 0:
        now), for an armed backend the moment its sources were attached.
        """
        root = self.lineage.root
        if not root:
            return []  # a standing collector: processes are adopted as they are learned
        return self._identify([root, *descendants_of(root)] if descendants else [root], at=at)

    def adopt(self, root: int, *, track: bool = True) -> list[int]:
        """Adopt ``root`` and its running descendants (sampled ``process.start``); their pids.

        Used for every process the receiver learns to follow after start (:mod:`.follow`);
        pids already in the lineage are skipped. With ``track=False`` they are identified and
        reported but not added to the lineage: a backend that must attach first (``strace``)
        adds them once it observes them, so lineage membership means "observed from now".
        """
        pids = [p for p in (root, *descendants_of(root)) if p not in self.lineage]
        return self._identify(pids, track=track)

    def _identify(self, pids: list[int], *, track: bool = True, at: int = 0) -> list[int]:
        """Identify, track (unless not ``track``) and report ``pids`` (the running ones) as
        sampled starts (at ``at`` ns, 0: now)."""
        now = at or time.time_ns()
        for pid in pids:
            info = read_process(
                pid, self.redactor, capture_environment=self.config.capture_environment
            )
            if info is None:
                continue
            if is_gate(info):
                # observe's gate waiting to exec CMD: its shell script is observe's machinery,
                # not the user's process; CMD's exec (when it happens) names the process
                info = ProcessInfo(
                    pid=info.pid,
                    start_ms=info.start_ms,
                    ppid=info.ppid,
                    approximate=info.approximate,
                )
            self.events.remember(info)
            if track:
                self.lineage.add(pid)  # after its identity: other threads report lineage pids
            if self.config.processes:
                self.emit(
                    self.events.process_event("process.start", info, now, attribution=SAMPLED)
                )
        return pids

    def collection_state(
        self, name: str, state: CollectionState, reason: str, brief: str = ""
    ) -> None:
        """Report the terminal state of one collection (record + telemetry note). ``brief``:
        the reason in a few words, for the run summary's one line per plane (what observes it,
        what it misses); ``reason`` keeps every detail (``reason`` itself when not given)."""
        if self.planes is not None and name in PLANES and name not in self.planes:
            return  # another backend reports this plane
        self.states[name] = (str(state), reason)
        self.briefs[name] = brief or reason
        self.telemetry.note(f"host.collection.{name}", f"{state}: {reason}")
        record = self.events.record(
            "collection.state",
            time.time_ns(),
            {
                "collection.name": name,
                "collection.state": str(state),
                "collection.reason": reason,
            },
            attribution=None,
        )
        if self.hold_gaps and state in (CollectionState.UNAVAILABLE, CollectionState.NOT_SAMPLED):
            self.held[name] = record
            return
        self.emit(record)


class EventFactory:
    """Builds OS-event log records for one backend under one shared resource."""

    def __init__(self, backend: str, run_id: str, emitter: Emitter) -> None:
        self.backend = backend
        self.emitter = emitter
        self.resource = Resource(
            attributes={
                "evidence.channel": "os",
                "evidence.backend": backend,
                "host.id": host_id(),
                "service.name": "otel-bridge-host",
                "otel_bridge.run.id": run_id,
            }
        )
        self.scope = Scope(name="otel_bridge.receivers.host", version=__version__)
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self.processes: dict[int, ProcessInfo] = {}
        """Every process identity seen, by pid (the latest one for a recycled pid)."""
        self._identities: dict[
            int, tuple[ProcessInfo | None, tuple[int, bool] | None, dict[str, AnyValue]]
        ] = {}
        """pid -> (the identity, its start and approximate flag, its :meth:`identity_attrs`),
        for the identity seen last."""

    def record(
        self,
        event_name: str,
        time_ns: int,
        attrs: dict[str, AnyValue],
        *,
        attribution: str | None,
        causal: bool | None = None,
    ) -> LogRecord:
        """One record with a unique ``evidence.record_id``."""
        with self._lock:
            n = next(self._seq)
        full: dict[str, AnyValue] = {"evidence.record_id": f"{self.backend}:{n}"}
        if attribution is not None:
            full["evidence.attribution"] = attribution
        if causal is not None:
            full["evidence.causal"] = causal
        full.update(attrs)
        return LogRecord(
            resource=self.resource,
            scope=self.scope,
            time_unix_nano=time_ns,
            observed_time_unix_nano=time.time_ns(),
            severity_number=9,
            severity_text="INFO",
            event_name=event_name,
            attributes=clean(full),  # OS text that is not valid Unicode: docs/strings.md
        )

    def remember(self, info: ProcessInfo) -> ProcessInfo:
        """Record ``info`` as the current identity of its pid."""
        self.processes[info.pid] = info
        return info

    def identity_attrs(self, pid: int) -> dict[str, AnyValue]:
        """``process.pid`` and ``process.creation.time`` of a known pid (approximate flagged).

        A fresh dict each call (callers add to it); built once per identity (every file event
        of a process carries the same three values)."""
        return dict(self.identity(pid))

    def identity(self, pid: int) -> Mapping[str, AnyValue]:
        """:meth:`identity_attrs` without the copy: the cached attributes, read only (the file
        reader compares a repeated event's identity with this, :mod:`.filemerge`)."""
        info = self.processes.get(pid)
        stamp = None if info is None else (info.start_ms, info.approximate)
        known = self._identities.get(pid)
        if known is not None and known[0] is info and known[1] == stamp:
            return known[2]
        out: dict[str, AnyValue] = {"process.pid": pid}
        if info is not None:
            out["process.creation.time"] = iso_ms(info.start_ms)
            if info.approximate:
                out["process.creation.time.approximate"] = True
        if len(self._identities) >= _IDENTITIES_KEPT:
            self._identities.clear()
        self._identities[pid] = (info, stamp, out)
        return out

    def process_attrs(self, info: ProcessInfo) -> dict[str, AnyValue]:
        """Attributes of ``process.start`` / ``process.exec`` for ``info``."""
        out = self.identity_attrs(info.pid)
        if info.ppid:
            out["process.parent_pid"] = info.ppid
            # the parent's identity only for one the lineage knows: a root's parent is not
            # followed, named by its pid alone, and normalize makes no node of it (docs/host.md)
            parent = self.processes.get(info.ppid)
            if parent is not None:
                out["process.parent.creation.time"] = iso_ms(parent.start_ms)
        if info.exe:
            out["process.executable.path"] = info.exe
        if info.name:
            out["process.executable.name"] = info.name
        if info.argv:
            out["process.command_args"] = tuple(info.argv)
        if info.cwd:
            out["process.working_directory"] = info.cwd
        if info.traceparent:
            out["process.env.traceparent"] = info.traceparent
        if info.env is not None:
            out["process.environment"] = dict(info.env)
        return out

    def process_event(
        self, event_name: str, info: ProcessInfo, time_ns: int, *, attribution: str
    ) -> LogRecord:
        """A ``process.start`` or ``process.exec`` record (causal when kernel-reported)."""
        causal = True if attribution == SYSCALL else None
        return self.record(
            event_name, time_ns, self.process_attrs(info), attribution=attribution, causal=causal
        )

    def exit_event(
        self, pid: int, time_ns: int, code: int | None, *, attribution: str
    ) -> LogRecord:
        """A ``process.exit`` record; ``code`` None when the backend cannot know it."""
        attrs = self.identity_attrs(pid)
        if code is not None:
            attrs["process.exit.code"] = code
        attrs["process.exit.time"] = datetime.fromtimestamp(time_ns / 1e9, tz=UTC).isoformat()
        causal = True if attribution == SYSCALL else None
        return self.record("process.exit", time_ns, attrs, attribution=attribution, causal=causal)


def lookup_process(
    ctx: HostContext, pid: int, *, event_monotonic_ns: int | None = None
) -> ProcessInfo:
    """The identity of ``pid``: read ``/proc`` now, else approximate it (see :mod:`procfs`)."""
    info = read_process(pid, ctx.redactor, capture_environment=ctx.config.capture_environment)
    if info is None:
        known = ctx.events.processes.get(pid)
        if known is not None:
            return known
        start = approx_start_ms(
            event_monotonic_ns if event_monotonic_ns is not None else time.monotonic_ns()
        )
        info = ProcessInfo(pid=pid, start_ms=start, approximate=True)
    return ctx.events.remember(info)
