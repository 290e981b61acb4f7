"""The ``host`` receiver: independent OS observation of one workload lineage.

It follows a root process (``root_pid``, or :meth:`HostReceiver.set_root_pid` as ``observe``
does) and every descendant, and emits what the machine saw as OTLP log records under a resource
tagged ``evidence.channel=os`` (the event table of ``docs/contracts.md``). Which backend
observes is configurable; ``auto`` picks the strongest that works here (:mod:`.selection`).

Backends and their evidence:

========== ======================================== ===================== =================
backend    processes                                files                 network
========== ======================================== ===================== =================
linux      netlink proc connector (syscall, causal) fanotify (syscall):   socket scans
                                                    open, write, create,  (sampled)
                                                    delete, rename
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

import threading
import time

from otel_bridge.component import (
    RECEIVER,
    ComponentStatus,
    Consumer,
    CreateSettings,
    Factory,
    Host,
    require_consumer,
)
from otel_bridge.errors import BackendUnavailableError, StartupError
from otel_bridge.receivers.host.backend import Backend
from otel_bridge.receivers.host.config import AUTO_ORDER, HostConfig
from otel_bridge.receivers.host.counters import COUNTERS
from otel_bridge.receivers.host.events import Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.selection import create_backend
from otel_bridge.redaction import Redactor

__all__ = ["COUNTERS", "HostConfig", "HostReceiver", "factory"]


class HostReceiver:
    """Runs one backend over the lineage and batches its records to the next consumer."""

    def __init__(
        self, settings: CreateSettings, config: HostConfig, next_consumer: Consumer
    ) -> None:
        self._settings = settings
        self.config = config
        self._next = next_consumer
        self._root_pid = config.root_pid
        self._run_id = config.run_id
        self._backend: Backend | None = None
        self._emitter: Emitter | None = None
        self._ctx: HostContext | None = None
        self._lock = threading.Lock()
        self.explanation = ""
        """Which backend runs and why (also the telemetry note ``host.backend``)."""
        self.backend_name = ""
        """The backend in use (kept after shutdown), ``""`` before start."""
        self.auto_order: tuple[str, ...] = AUTO_ORDER
        """Backends ``auto`` tries, strongest first."""

    def set_root_pid(self, pid: int) -> None:
        """Observe the lineage rooted at ``pid`` (before :meth:`start`)."""
        if self._backend is not None:
            raise RuntimeError("host receiver: root pid must be set before start")
        self._root_pid = pid

    def set_run_id(self, run_id: str) -> None:
        """Tag records with run id ``run_id`` (before :meth:`start`)."""
        self._run_id = run_id

    @property
    def context(self) -> HostContext | None:
        """The running context (lineage, identities, collection states); None before start."""
        return self._ctx

    def start(self, host: Host) -> None:
        """Pick and start a backend; raises ``StartupError`` when none can run."""
        if self._root_pid <= 0:
            raise StartupError(
                f"{self._settings.id}: no root_pid to observe (set root_pid, or use "
                "`otel-bridge observe`, which sets it to the launched command)"
            )
        telemetry = host.telemetry.in_scope_of(self._settings.telemetry)
        names = self.auto_order if self.config.backend == "auto" else (self.config.backend,)
        skipped: list[str] = []
        for name in names:
            emitter = Emitter(
                self._next,
                telemetry,
                batch_size=self.config.batch_size,
                interval=self.config.batch_interval,
            )
            ctx = HostContext(
                config=self.config,
                lineage=Lineage(self._root_pid),
                events=EventFactory(name, self._run_id, emitter),
                telemetry=telemetry,
                redactor=Redactor(),
                exclude_paths=(host.run_dir,) if host.run_dir else (),
            )
            try:
                backend = create_backend(name, self.config)
                emitter.start()
                backend.start(ctx)
            except BackendUnavailableError as exc:
                emitter.close()
                skipped.append(str(exc))
                continue
            except OSError as exc:
                emitter.close()
                skipped.append(f"{name}: {exc}")
                continue
            self._backend, self._emitter, self._ctx = backend, emitter, ctx
            self.backend_name = name
            self.explanation = f"{name}: {backend.why}"
            if skipped:
                self.explanation += f" (skipped: {'; '.join(skipped)})"
            telemetry.note("host.backend", self.explanation)
            return
        raise StartupError(f"{self._settings.id}: no host backend can run: {'; '.join(skipped)}")

    def status(self) -> ComponentStatus:
        """The backend in use and why, and each collection's state (``state: reason``)."""
        ctx = self._ctx
        states = dict(ctx.states) if ctx is not None else {}
        return ComponentStatus(
            backend=self.backend_name,
            detail=self.explanation,
            collections={name: f"{state}: {reason}" for name, (state, reason) in states.items()},
        )

    def shutdown(self) -> None:
        """Stop the backend and flush. Safe before start and twice."""
        with self._lock:
            backend, self._backend = self._backend, None
            emitter, self._emitter = self._emitter, None
        if backend is not None:
            backend.stop()
        if emitter is not None:
            emitter.close()

    def wait_idle(self, quiet: float = 0.1, timeout: float = 2.0) -> None:
        """Wait until no record was emitted for ``quiet`` seconds (at most ``timeout``)."""
        emitter = self._emitter
        if emitter is None:
            return
        deadline = time.monotonic() + timeout
        last = -1
        while time.monotonic() < deadline:
            count = emitter.emitted
            if count == last:
                return
            last = count
            time.sleep(quiet)


def _create(
    settings: CreateSettings, config: HostConfig, next_consumer: Consumer | None
) -> HostReceiver:
    return HostReceiver(settings, config, require_consumer(next_consumer, "host"))


factory: Factory[HostConfig] = Factory(
    type_name="host",
    kind=RECEIVER,
    default_config=HostConfig,
    create=_create,
    signals=frozenset({"logs", "evidence"}),
    counters=COUNTERS,
)
