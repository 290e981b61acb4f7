"""The ``host`` receiver: independent OS observation of workload lineages.

It follows a root process (``root_pid``, or :meth:`HostReceiver.set_root_pid` as ``observe``
does) and every descendant; standing (no root), it follows the processes that report spans and
those its selectors match, each from the moment it is known (:mod:`.follow`). It emits what the
machine saw as OTLP log records under a resource tagged ``evidence.channel=os`` (the event
table of ``docs/contracts.md``). Which backend observes is configurable; ``auto`` picks, per
plane, the strongest that works here (:meth:`HostReceiver.start`, :mod:`.selection`).

Backends and their evidence:

========== ======================================== ===================== =================
backend    processes                                files                 network
========== ======================================== ===================== =================
linux      netlink proc connector (syscall, causal) fanotify (syscall):   traced TCP connects
                                                    open, write, create,  (syscall; perf
                                                    delete, rename        events or
                                                                          bpftrace),
                                                                          socket scans
                                                                          (sampled)
ebpf       bpftrace tracepoints (syscall)           openat (syscall)      connect (syscall)
strace     ptrace (syscall)                         open*/unlink/rename   connect/listen
portable   psutil sampling (sampled_process)        watchdog (session,    psutil sampling
                                                    non-causal)
========== ======================================== ===================== =================

Process identity is ``(host.id, pid, start ms)`` computed the same way by every backend, so two
backends observing one process name one node. Descendants that outlive the root are not given
exit events when observation stops.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from otel_bridge.arming import ArmedHost
from otel_bridge.component import (
    RECEIVER,
    ComponentStatus,
    Consumer,
    CreateSettings,
    Factory,
    Host,
    Telemetry,
    require_consumer,
)
from otel_bridge.errors import BackendUnavailableError, StartupError
from otel_bridge.model import CollectionState
from otel_bridge.receivers.host.backend import Backend
from otel_bridge.receivers.host.capture import ContentCapture
from otel_bridge.receivers.host.config import AUTO_ORDER, HostConfig
from otel_bridge.receivers.host.counters import COUNTERS
from otel_bridge.receivers.host.events import PLANES, Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.follow import Follower
from otel_bridge.receivers.host.selection import create_backend
from otel_bridge.receivers.host.selectors import Selectors
from otel_bridge.redaction import Redactor

__all__ = ["COUNTERS", "HostConfig", "HostReceiver", "factory"]


@dataclass(slots=True)
class _Run:
    """One started backend, the planes it was given, its context and emitter."""

    name: str
    backend: Backend
    ctx: HostContext
    emitter: Emitter
    planes: tuple[str, ...]


_FLAGS = {"process": "processes", "file": "files", "network": "network"}
_COVERED = (str(CollectionState.AVAILABLE), str(CollectionState.DEGRADED))


def _running(pid: int) -> bool:
    """Whether a process ``pid`` exists (signal 0: no signal sent; psutil stays off this path,
    whose imports are ``observe``'s fixed cost)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    return True


def _plane_config(config: HostConfig, planes: tuple[str, ...]) -> HostConfig:
    """``config`` with only ``planes`` collected."""
    return replace(
        config,
        processes="process" in planes,
        files="file" in planes,
        network="network" in planes,
    )


class HostReceiver:
    """Runs the backends over the lineage and batches their records to the next consumer."""

    def __init__(
        self, settings: CreateSettings, config: HostConfig, next_consumer: Consumer
    ) -> None:
        self._settings = settings
        self.config = config
        self._next = next_consumer
        self._root_pid = config.root_pid
        self._run_id = config.run_id
        self._runs: list[_Run] = []
        self._follower: Follower | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self.explanation = ""
        """Which backend observes which plane and why (also the telemetry note ``host.backend``)."""
        self.backend_name = ""
        """The backend(s) in use, ``+``-joined (kept after shutdown), ``""`` before start."""
        self.skipped: tuple[str, ...] = ()
        """Stronger backends not used here, each ``name: why`` (``auto``)."""
        self.auto_order: tuple[str, ...] = AUTO_ORDER
        """Backends ``auto`` tries, strongest first."""
        self._stopped = False
        self._armed: ArmedHost | None = None

    def set_armed(self, armed: ArmedHost) -> None:
        """Adopt kernel sources attached before the collector was built (``observe`` arms them
        for its gated command, :mod:`otel_bridge.arming`); the ``linux`` backend reads what they
        queued meanwhile. Before :meth:`start`, with the same root pid."""
        if self._runs or self._stopped:
            raise RuntimeError("host receiver: armed sources must be set before start")
        self._armed = armed

    def set_root_pid(self, pid: int) -> None:
        """Observe the lineage rooted at ``pid`` (before :meth:`start`)."""
        if self._runs or self._stopped:
            raise RuntimeError("host receiver: root pid must be set before start")
        self._root_pid = pid

    def set_run_id(self, run_id: str) -> None:
        """Tag records with run id ``run_id`` (before :meth:`start`)."""
        self._run_id = run_id

    @property
    def context(self) -> HostContext | None:
        """The running context of the first backend (lineage, identities, collection states)."""
        return self._runs[0].ctx if self._runs else None

    @property
    def backends(self) -> list[Backend]:
        """The started backends, the first (strongest) first; per-plane ``auto`` may run more."""
        return [r.backend for r in self._runs]

    @property
    def standing(self) -> bool:
        """True without a root pid: the receiver follows what it learns (:mod:`.follow`)."""
        return self._root_pid <= 0

    def start(self, host: Host) -> None:
        """Pick and start the backends, then follow; ``StartupError`` when none can run.

        ``auto`` chooses per plane: the strongest backend that starts takes every plane it
        covers; a plane it reports ``unavailable`` or ``not_sampled`` goes to the next backend
        that works here, and so on. A plane nobody covers keeps its first backend's gap state.
        """
        # ``run`` with a root_pid: it must be there. Under ``observe`` (a run directory) the
        # root is its command, which may have ended (and its exit been recorded) already.
        if self._root_pid > 0 and host.run_dir is None and not _running(self._root_pid):
            raise StartupError(
                f"{self._settings.id}: root_pid {self._root_pid}: no such process (the root "
                "must be running when the collector starts; without root_pid a standing "
                "collector follows what reports to it)"
            )
        telemetry = host.telemetry.in_scope_of(self._settings.telemetry)
        auto = self.config.backend == "auto"
        names = self.auto_order if auto else (self.config.backend,)
        needed = tuple(p for p in PLANES if getattr(self.config, _FLAGS[p]))
        skipped: list[str] = []
        for name in names:
            if self._runs and not needed:
                break
            run = self._try(name, needed, host, telemetry, skipped, hold=auto)
            if run is None:
                continue
            covered = tuple(p for p in needed if run.ctx.states.get(p, ("",))[0] in _COVERED)
            if self._runs and not covered:  # started for gaps it cannot fill either: drop it
                run.backend.stop()
                run.emitter.close()
                skipped.append(f"{name}: cannot observe {', '.join(needed)} here either")
                continue
            self._runs.append(run)
            needed = tuple(p for p in needed if p not in covered)
        self._release_armed(telemetry)
        if not self._runs:
            raise StartupError(
                f"{self._settings.id}: no host backend can run: {'; '.join(skipped)}"
            )
        self._settle(needed, skipped, telemetry)
        self._start_following(host)

    def _release_armed(self, telemetry: Telemetry) -> None:
        """Close armed sources no backend adopted; say the lineage was not observed meanwhile."""
        armed, self._armed = self._armed, None
        if armed is None:
            return
        armed.close()
        telemetry.note(
            "host.armed",
            "the kernel sources armed before the collector was built were not used (the linux "
            "backend did not start): what the command did before its backend started is unknown",
        )

    def _try(
        self,
        name: str,
        planes: tuple[str, ...],
        host: Host,
        telemetry: Telemetry,
        skipped: list[str],
        *,
        hold: bool,
    ) -> _Run | None:
        """Start backend ``name`` for ``planes``; None (reason in ``skipped``) when it cannot."""
        config = _plane_config(self.config, planes) if self._runs else self.config
        emitter = Emitter(
            self._next, telemetry, batch_size=config.batch_size, interval=config.batch_interval
        )
        ctx = HostContext(
            config=config,
            lineage=Lineage(self._root_pid if self._root_pid > 0 else 0),
            events=EventFactory(name, self._run_id, emitter),
            telemetry=telemetry,
            redactor=Redactor(),
            exclude_paths=(host.run_dir,) if host.run_dir else (),
            planes=frozenset(planes) if self._runs else None,
            hold_gaps=hold,
        )
        if config.capture.file_hashes and config.files:
            ctx.capture = ContentCapture(
                config.capture,
                lambda n, t, a: ctx.events.record(n, t, a, attribution=None),
                emitter.emit,
                ctx.exclude_paths,
            )
            emitter.watch = ctx.capture.note
        try:
            backend = create_backend(name, config)
            if name == "linux" and self._armed is not None:
                from otel_bridge.receivers.host.linux import LinuxBackend  # noqa: PLC0415

                if isinstance(backend, LinuxBackend):
                    backend.adopt(self._armed)
                    self._armed = None  # its start adopts what it uses and closes the rest
            emitter.start()
            backend.start(ctx)
        except (BackendUnavailableError, OSError) as exc:
            emitter.close()
            skipped.append(
                str(exc) if isinstance(exc, BackendUnavailableError) else f"{name}: {exc}"
            )
            return None
        return _Run(name, backend, ctx, emitter, planes)

    def _settle(self, uncovered: tuple[str, ...], skipped: list[str], telemetry: Telemetry) -> None:
        """Emit the gap states nobody covered; name which backend observes which plane."""
        emitted: set[str] = set()
        for run in self._runs:
            run.ctx.hold_gaps = False
            for plane, record in run.ctx.held.items():
                if plane in uncovered and plane not in emitted:
                    emitted.add(plane)
                    run.ctx.emit(record)
            run.ctx.held.clear()
        self.backend_name = "+".join(r.name for r in self._runs)
        first = self._runs[0]
        self.explanation = f"{first.name}: {first.backend.why}"
        if len(self._runs) > 1:
            by_plane = ", ".join(
                f"{p}: {self._plane_owner(p)}" for p in PLANES if self._plane_owner(p)
            )
            self.explanation += f"; per plane: {by_plane}"
        self.skipped = tuple(skipped)
        if skipped:
            self.explanation += f" (skipped: {'; '.join(skipped)})"
        telemetry.note("host.backend", self.explanation)

    def _plane_owner(self, plane: str) -> str:
        """The backend that covers ``plane`` (else the first that reported it), ``""``."""
        reported = [r for r in self._runs if plane in r.ctx.states]
        covering = [r for r in reported if r.ctx.states[plane][0] in _COVERED]
        chosen = (covering or reported)[:1]
        return chosen[0].name if chosen else ""

    def _start_following(self, host: Host) -> None:
        selectors = Selectors.of(self.config, standing=self.standing)
        telemetry_follow = self.standing and self.config.follow_telemetry
        if not selectors and not telemetry_follow:
            return
        follow = [(r.name, r.backend.follow) for r in self._runs]
        self._follower = Follower(
            self._runs[0].ctx,
            follow,
            selectors=selectors,
            telemetry=self._runs[0].ctx.telemetry,
            interval=self.config.selector_interval,
            logger=self._settings.logger,
            settled=self._settled(host) if telemetry_follow else None,
            listening=host.listening,
        )
        self._follower.start()
        if telemetry_follow:
            self._unsubscribe = host.interests.subscribe(self._follower.offer, settles=True)

    def _settled(self, host: Host) -> Callable[[], None]:
        """What the follower calls once an interest is handled: every record it led to so far is
        sent on (each backend's emitter flushed), then ``host.interests`` is told."""

        def settled() -> None:
            try:
                for run in self._runs:
                    run.emitter.flush()
            finally:
                host.interests.settle()

        return settled

    def status(self) -> ComponentStatus:
        """Which backend observes each collection, its state and why (``state: backend: why``),
        and the same in a few words (``briefs``)."""
        collections: dict[str, str] = {}
        briefs: dict[str, str] = {}
        for plane in (*PLANES, *{k for r in self._runs for k in r.ctx.states} - set(PLANES)):
            owner = self._plane_owner(plane)
            run = next((r for r in self._runs if r.name == owner), None)
            if run is None:
                continue
            state, reason = run.ctx.states[plane]
            collections[plane] = f"{state}: {owner}: {reason}"
            briefs[plane] = f"{state}: {owner}: {run.ctx.briefs.get(plane) or reason}"
        self._lineage_status(collections, briefs)
        return ComponentStatus(
            backend=self.backend_name,
            detail=self.explanation,
            collections=collections,
            briefs=briefs,
            skipped=self.skipped,
        )

    def _lineage_status(self, collections: dict[str, str], briefs: dict[str, str]) -> None:
        """The ``lineage`` collection of a standing collector, in full and in a few words:
        processes followed late (their earlier activity unknown), senders not followed."""
        follower = self._follower
        if follower is None:
            return
        full: list[str] = []
        brief: list[str] = []
        state = "unavailable"
        if follower.followed:
            state = "degraded"
            full.append(
                f"{follower.followed} process(es) followed from the moment they "
                "reported telemetry or matched a selector: their earlier activity is unknown"
            )
            brief.append(f"{follower.followed} process(es) followed late: earlier activity unknown")
        if follower.unnamed:
            named = "; ".join(follower.unnamed_why)
            more = follower.unnamed - len(follower.unnamed_why)
            full.append(
                f"{follower.unnamed} telemetry sender(s) stated no process.pid: not followed, "
                f"their OS activity is unknown ({named}{f'; {more} more' if more > 0 else ''})"
            )
            brief.append(f"{follower.unnamed} sender(s) stated no process.pid: not followed")
        if full:
            collections["lineage"] = f"{state}: {'; '.join(full)}"
            briefs["lineage"] = f"{state}: {'; '.join(brief)}"

    def shutdown(self) -> None:
        """Stop following, stop the backends and flush. Safe before start and twice."""
        with self._lock:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            runs = [] if self._stopped else self._runs  # kept: status() after shutdown
            self._stopped = True
            armed, self._armed = self._armed, None
        if armed is not None:  # shut down before start
            armed.close()
        if unsubscribe is not None:
            unsubscribe()
        if self._follower is not None:
            self._follower.stop()
        for run in runs:
            run.backend.stop()
        for run in runs:
            if run.ctx.capture is not None:  # the files the run left behind (opt-in)
                run.ctx.capture.finish()
            run.emitter.close()

    def wait_idle(self, quiet: float = 0.1, timeout: float = 2.0) -> None:
        """Wait until no record was emitted for ``quiet`` seconds (at most ``timeout``)."""
        emitters = [] if self._stopped else [r.emitter for r in self._runs]
        if not emitters:
            return
        deadline = time.monotonic() + timeout
        last = -1
        while time.monotonic() < deadline:
            count = sum(e.emitted for e in emitters)
            if count == last:
                return
            last = count
            time.sleep(quiet)


def _create(
    settings: CreateSettings, config: HostConfig, next_consumer: Consumer | None
) -> HostReceiver:
    """The receiver; an explicit backend that cannot run here is refused now, so ``validate``
    (which creates every component) refuses what ``run`` would (``auto`` always finds one)."""
    if config.backend != "auto":
        try:
            create_backend(config.backend, config)  # constructing is the check; holds nothing
        except BackendUnavailableError as exc:
            raise StartupError(f"receivers.{settings.id}.backend: {exc}") from exc
    return HostReceiver(settings, config, require_consumer(next_consumer, "host"))


factory: Factory[HostConfig] = Factory(
    type_name="host",
    kind=RECEIVER,
    default_config=HostConfig,
    create=_create,
    signals=frozenset({"logs", "evidence"}),
    counters=COUNTERS,
)
