"""The pipeline runtime: builds components from a :class:`CollectorConfig` and runs them.

Graph, as in the OpenTelemetry Collector::

    receiver ─┬─> router ──> [traces  pipeline: processors...] ──> fan-out ─┬─> exporter
              │             (spans only)                                    └─> exporter
              └─> router ──> [evidence pipeline: processors...] ──> fan-out ──> exporter

* One instance per receiver id and per exporter id, shared by every pipeline that names it; one
  processor instance per pipeline.
* A receiver feeds every pipeline naming it. A ``traces`` pipeline receives only spans, a
  ``logs`` pipeline only log records, an ``evidence`` pipeline everything.
* Fan-out hands every consumer the same immutable batch. A consumer that raises does not stop
  delivery to the others: the failure is counted (``exporter.<id>.failed``) and reported once.
  The caller sees an error only when one is worth reporting: a
  :class:`~otel_bridge.errors.RefusedError` (memory limit) from any consumer (retryable), or
  every consumer failing (the first error). A partial permanent failure is not raised, so a
  client does not resend what the healthy consumers already have.
* What a receiver's client is answered: a ``RefusedError`` is retryable (HTTP 429, gRPC
  ``RESOURCE_EXHAUSTED`` with ``RetryInfo``); anything else raised downstream is permanent
  (HTTP 400, gRPC ``INVALID_ARGUMENT``), counted in ``receiver.<id>.rejected``. See
  ``docs/components.md``.
* Counters (declared, :mod:`otel_bridge.component`): per receiver ``routed`` (by part),
  ``refused``, ``rejected``; per exporter ``sent``, ``failed``; per pipeline ``sent``,
  ``failed``; ``collector.service.shutdown_errors``.
* Start order: exporters, processors (downstream first), receivers. Shutdown: the reverse, so
  everything a receiver acknowledged drains through processors (``batch`` flushes) to the
  exporters before they close.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, NoReturn

from otel_bridge.component import (
    COLLECTOR,
    COLLECTOR_COUNTERS,
    EXPORTER,
    PIPELINE,
    PIPELINE_COUNTERS,
    PROCESSOR,
    RECEIVER,
    STANDARD_COUNTERS,
    Component,
    ComponentStatus,
    Consumer,
    CounterScope,
    CounterSpec,
    CreateSettings,
    Endpoint,
    Host,
    ProcessInterest,
    ProcessInterests,
    Telemetry,
    status_of,
)
from otel_bridge.config import CollectorConfig, ComponentConfig
from otel_bridge.errors import ComponentError, StartupError, is_retryable
from otel_bridge.identity import int_value, iso_to_ms, str_value
from otel_bridge.model import Batch
from otel_bridge.registry import Registry

_log = logging.getLogger("otel_bridge.pipeline")

PARTS: tuple[str, ...] = ("spans", "logs", "observations", "coverage")
"""The parts of a batch, the labels of a receiver's ``routed`` counter."""


def select_for_pipeline(batch: Batch, pipeline_type: str) -> Batch:
    """The part of ``batch`` a pipeline of ``pipeline_type`` carries (the batch itself if all)."""
    if pipeline_type == "traces":
        return batch if len(batch) == len(batch.spans) else Batch(spans=batch.spans)
    if pipeline_type == "logs":
        return batch if len(batch) == len(batch.logs) else Batch(logs=batch.logs)
    return batch


def _standard_counters(kind: str) -> tuple[CounterSpec, ...]:
    if kind == PIPELINE:
        return PIPELINE_COUNTERS
    return STANDARD_COUNTERS.get(kind, ())


class FanOut:
    """Delivers each batch to several consumers; one failing does not stop the others.

    ``kind`` names what the consumers are (:data:`EXPORTER` for a pipeline's exporters,
    :data:`PIPELINE` for a receiver's pipelines): each one's ``sent`` and ``failed`` counters are
    counted as ``<kind>.<name>.sent|failed``.
    """

    def __init__(self, consumers: Sequence[tuple[str, Consumer]], *, kind: str, host: Host) -> None:
        specs = _standard_counters(kind)
        self._consumers = tuple(
            (name, consumer, host.telemetry.scoped(CounterScope.of(kind, name, specs)))
            for name, consumer in consumers
        )
        self._kind = kind

    def consume(self, batch: Batch) -> None:
        """Hand ``batch`` to every consumer; raise only when a retry or a rejection is due."""
        if len(self._consumers) == 1:
            self._deliver(*self._consumers[0], batch, raise_errors=True)
            return
        errors: list[tuple[str, Exception]] = []
        for name, consumer, telemetry in self._consumers:
            error = self._deliver(name, consumer, telemetry, batch, raise_errors=False)
            if error is not None:
                errors.append((name, error))
        if not errors:
            return
        refused = [e for _, e in errors if is_retryable(e)]
        if refused:
            raise refused[0]
        if len(errors) == len(self._consumers):
            detail = "; ".join(f"{name}: {err}" for name, err in errors)
            raise ComponentError(f"every consumer failed: {detail}") from errors[0][1]

    def _deliver(
        self,
        name: str,
        consumer: Consumer,
        telemetry: Telemetry,
        batch: Batch,
        *,
        raise_errors: bool,
    ) -> Exception | None:
        try:
            consumer.consume(batch)
        except Exception as exc:
            telemetry.count("failed", len(batch))
            if not is_retryable(exc):
                telemetry.report_once(
                    f"{self._kind}.{name}.failed",
                    f"{name}: consume failed ({type(exc).__name__}: {exc}); counting further "
                    f"failures in {self._kind}.{name}.failed",
                )
            if raise_errors:
                raise
            return exc
        telemetry.count("sent", len(batch))
        return None


def publish_span_processes(batch: Batch, interests: ProcessInterests, source: str) -> None:
    """Publish the process each span resource of ``batch`` names (``process.pid`` + ``host.id``
    + ``process.creation.time`` + ``service.instance.id`` + ``service.name``) to ``interests``;
    a resource without an integer pid is published with pid 0 and the transport peer of its
    request, from which the host receiver finds its sender (or records it as unknown).
    """
    seen: set[int] = set()
    for span in batch.spans:
        resource = span.resource
        if id(resource) in seen:
            continue
        seen.add(id(resource))
        attrs = resource.attributes
        pid = int_value(attrs.get("process.pid"))
        stated = pid is not None and pid > 0
        key = (
            pid if pid is not None and stated else 0,
            str_value(attrs.get("host.id")) or "",
            iso_to_ms(str_value(attrs.get("process.creation.time"))) if stated else None,
            str_value(attrs.get("service.instance.id")) or "",
            str_value(attrs.get("service.name")) or "",
        )
        if interests.known(key):
            continue
        peer = resource.peer
        interests.publish(
            ProcessInterest(
                pid=key[0],
                host_id=key[1],
                start_time_ms=key[2],
                instance_id=key[3],
                service=key[4],
                seen_ns=time.time_ns(),
                source=source,
                peer=None if stated or peer is None else (peer.address, peer.port, peer.local_port),
            )
        )


class _Router:
    """The consumer a receiver is created with: counts, then routes to its pipelines."""

    def __init__(self, receiver_id: str, host: Host) -> None:
        self._id = receiver_id
        self._telemetry = host.telemetry.scoped(
            CounterScope.of(RECEIVER, receiver_id, STANDARD_COUNTERS[RECEIVER])
        )
        self._targets: list[tuple[str, str, Consumer]] = []
        self._host = host
        self._fan_outs: dict[tuple[int, ...], FanOut] = {}
        """One :class:`FanOut` per set of selected targets, built at its first batch."""

    def add(self, pipeline_id: str, pipeline_type: str, consumer: Consumer) -> None:
        self._targets.append((pipeline_id, pipeline_type, consumer))
        self._fan_outs = {}

    def consume(self, batch: Batch) -> None:
        for part in PARTS:
            n = len(getattr(batch, part))
            if n:
                self._telemetry.count("routed", n, label=part)
        if batch.spans and self._host.interests.wanted:
            publish_span_processes(batch, self._host.interests, self._id)
        selected = tuple(
            i
            for i, target in enumerate(self._targets)
            if len(select_for_pipeline(batch, target[1]))
        )
        if not selected:
            return
        fan_out = self._fan_outs.get(selected)
        if fan_out is None:
            targets = [self._targets[i] for i in selected]
            fan_out = self._fan_outs[selected] = FanOut(
                [(pid, _Selecting(ptype, c)) for pid, ptype, c in targets],
                kind=PIPELINE,
                host=self._host,
            )
        try:
            fan_out.consume(batch)
        except Exception as exc:
            self._telemetry.count("refused" if is_retryable(exc) else "rejected", len(batch))
            raise


class _Selecting:
    """Passes on only the part of a batch its pipeline type carries."""

    def __init__(self, pipeline_type: str, consumer: Consumer) -> None:
        self._type = pipeline_type
        self._consumer = consumer

    def consume(self, batch: Batch) -> None:
        self._consumer.consume(select_for_pipeline(batch, self._type))


class Collector:
    """Builds every component a configuration's pipelines use, and runs them.

    Components are *created* in the constructor (factories open nothing) so that
    :meth:`component` works before :meth:`start`. ``registry``, when given, overrides the
    factories the configuration was parsed with (same type names).
    """

    def __init__(
        self,
        config: CollectorConfig,
        *,
        registry: Registry | None = None,
        host: Host | None = None,
    ) -> None:
        self.config = config
        self.host = host if host is not None else Host()
        self.host.listening = self._listening
        self._registry = registry
        self._receivers: dict[str, Component] = {}
        self._routers: dict[str, _Router] = {}
        self._processors: list[tuple[str, str, Component]] = []
        self._exporters: dict[str, Component] = {}
        self._started: list[tuple[str, str, Component]] = []
        self._lock = threading.Lock()
        self._state = "created"
        self._stop = threading.Event()
        self._created_at = time.monotonic()
        self._own_telemetry = self.host.telemetry.scoped(
            CounterScope.of(COLLECTOR, "service", COLLECTOR_COUNTERS)
        )
        try:
            self._build()
        except Exception:
            self._shutdown_all(self._all_components())
            raise

    # -- construction ---------------------------------------------------------------------

    def _create(
        self, component: ComponentConfig, next_consumer: Consumer | None, pipeline: str = ""
    ) -> Component:
        factory = component.factory
        if self._registry is not None:
            factory = self._registry.get(component.kind, component.id.type) or factory
        settings = CreateSettings(
            id=str(component.id),
            pipeline=pipeline,
            telemetry=self.host.telemetry.for_factory(factory, str(component.id)),
        )
        try:
            return factory.create(settings, component.config, next_consumer)
        except Exception as exc:
            raise ComponentError(f"{component.kind} {component.id}: create failed: {exc}") from exc

    def _build(self) -> None:
        cfg = self.config
        pipelines = sorted(cfg.pipelines.items())
        for _, p in pipelines:
            for eid in p.exporters:
                if eid not in self._exporters:
                    self._exporters[eid] = self._create(cfg.exporters[eid], None)
        routers: dict[str, _Router] = {}
        for pid, p in pipelines:
            exporters = [(eid, _as_consumer(self._exporters[eid], eid)) for eid in p.exporters]
            head: Consumer = FanOut(exporters, kind=EXPORTER, host=self.host)
            chain: list[tuple[str, str, Component]] = []
            for proc_id in reversed(p.processors):
                processor = self._create(cfg.processors[proc_id], head, pipeline=pid)
                chain.append((pid, proc_id, processor))
                head = _as_consumer(processor, proc_id)
            # Stored downstream-first, the start order.
            self._processors.extend(chain)
            for rid in p.receivers:
                routers.setdefault(rid, _Router(rid, self.host)).add(pid, p.type, head)
        for rid, router in sorted(routers.items()):
            self._receivers[rid] = self._create(cfg.receivers[rid], router)
        self._routers = routers

    def _all_components(self) -> list[tuple[str, str, Component]]:
        """Every component in start order: exporters, processors, receivers."""
        return [
            *((EXPORTER, eid, c) for eid, c in self._exporters.items()),
            *((PROCESSOR, f"{pid}/{proc_id}", c) for pid, proc_id, c in self._processors),
            *((RECEIVER, rid, c) for rid, c in self._receivers.items()),
        ]

    # -- public API -----------------------------------------------------------------------

    def component(self, component_id: str) -> Component:
        """The one instance of receiver or exporter ``component_id``; KeyError if unused."""
        if component_id in self._receivers:
            return self._receivers[component_id]
        if component_id in self._exporters:
            return self._exporters[component_id]
        known = ", ".join(sorted({*self._receivers, *self._exporters}))
        raise KeyError(f"no receiver or exporter {component_id!r} runs (running: {known})")

    def component_ids(self, kind: str, type_name: str | None = None) -> list[str]:
        """Ids of the running receivers, exporters or processors (``pipeline/id``) of a type."""
        found: list[tuple[str, ComponentConfig]]
        if kind == PROCESSOR:
            found = [
                (f"{pid}/{proc_id}", self.config.processors[proc_id])
                for pid, proc_id, _ in self._processors
            ]
        elif kind == RECEIVER:
            found = [(cid, self.config.receivers[cid]) for cid in self._receivers]
        else:
            found = [(cid, self.config.exporters[cid]) for cid in self._exporters]
        return sorted(cid for cid, c in found if type_name in (None, c.id.type))

    def status(self, component_id: str) -> ComponentStatus:
        """The status of receiver or exporter ``component_id`` (empty when it reports none)."""
        return status_of(self.component(component_id))

    def _listening(self) -> tuple[Endpoint, ...]:
        """Every receiver's bound endpoints (:attr:`Host.listening`)."""
        return tuple(e for r in list(self._receivers.values()) for e in status_of(r).endpoints)

    def pipeline_statuses(self, pipeline_id: str) -> list[ComponentStatus]:
        """The statuses of one pipeline's processors, in pipeline order."""
        return [status_of(c) for c in self.processors(pipeline_id)]

    def inject(self, receiver_id: str, batch: Batch) -> None:
        """Hand ``batch`` to the pipelines of receiver ``receiver_id`` as if it had received it.

        For data the collector's user produces itself (``observe``'s root span). Raises what the
        pipelines raise (:class:`~otel_bridge.errors.RefusedError` when refused).
        """
        router = self._routers.get(receiver_id)
        if router is None:
            raise KeyError(f"no receiver {receiver_id!r} runs")
        router.consume(batch)

    def processors(self, pipeline_id: str) -> list[Component]:
        """The processor instances of one pipeline, in pipeline order."""
        return [c for pid, _, c in reversed(self._processors) if pid == pipeline_id]

    @property
    def receivers(self) -> dict[str, Component]:
        """Receiver instances by id."""
        return dict(self._receivers)

    @property
    def exporters(self) -> dict[str, Component]:
        """Exporter instances by id."""
        return dict(self._exporters)

    @property
    def uptime(self) -> float:
        """Seconds since this collector was built."""
        return time.monotonic() - self._created_at

    def start(self) -> None:
        """Start exporters, then processors, then receivers.

        Every :class:`~otel_bridge.component.Preflight` component is asked first, so a start
        that fails for a reason known beforehand (a receiver's port already taken) starts
        nothing, and no exporter creates or replaces its file. On a failure the components
        already started are shut down in reverse order and a
        :class:`~otel_bridge.errors.StartupError` naming the component is raised.
        """
        with self._lock:
            if self._state != "created":
                raise ComponentError(f"collector cannot start: it is {self._state}")
            self._state = "starting"
        for kind, cid, comp in self._all_components():
            # getattr, not isinstance(comp, Preflight): a runtime protocol check costs about
            # 9 us a component on observe's start path
            preflight = getattr(comp, "preflight", None)
            try:
                if preflight is not None:
                    preflight()
            except Exception as exc:
                self._failed_start(kind, cid, exc)
        for kind, cid, comp in self._all_components():
            try:
                comp.start(self.host)
            except Exception as exc:
                self._failed_start(kind, cid, exc)
            self._started.append((kind, cid, comp))
        with self._lock:
            self._state = "running"

    def _failed_start(self, kind: str, cid: str, exc: Exception) -> NoReturn:
        """Shut down what started (and the rest), then raise the StartupError naming ``cid``."""
        _log.debug("%s %s failed to start", kind, cid, exc_info=True)
        self._shutdown_all(list(self._started))
        # Components never started still hold no resources, but shutting them down
        # is safe and releases anything a factory prepared.
        started = {id(c) for _, _, c in self._started}
        rest = [t for t in self._all_components() if id(t[2]) not in started]
        self._shutdown_all(rest)
        with self._lock:
            self._state = "shut down"
        reason = str(exc).removeprefix(f"{cid}: ")
        raise StartupError(f"{kind} {cid}: {reason}") from exc

    def shutdown(self) -> None:
        """Stop receivers, then processors, then exporters; drains. Safe twice and before start."""
        with self._lock:
            if self._state in ("shutting down", "shut down"):
                return
            self._state = "shutting down"
        self._stop.set()
        self._shutdown_all(self._all_components())
        with self._lock:
            self._state = "shut down"

    def _shutdown_all(self, components: list[tuple[str, str, Component]]) -> None:
        for kind, cid, comp in reversed(components):
            try:
                comp.shutdown()
            except Exception as exc:
                self._own_telemetry.count("shutdown_errors")
                _log.error("%s %s failed to shut down: %s", kind, cid, exc)

    def request_stop(self) -> None:
        """Make :meth:`run_until_signal` return (from any thread)."""
        self._stop.set()

    def run_until_signal(
        self,
        *,
        on_started: Callable[[], None] | None = None,
        on_tick: Callable[[], None] | None = None,
        tick_interval: float = 10.0,
        signals: Sequence[signal.Signals] = (signal.SIGINT, signal.SIGTERM),
    ) -> int | None:
        """Start (if needed), block until SIGINT/SIGTERM or :meth:`request_stop`, then drain.

        Signal handlers are installed only when called from the main thread and restored on
        return, before starting, so nothing acknowledged can be lost to an early signal.
        ``on_started`` runs once everything started; ``on_tick`` runs every ``tick_interval``
        seconds while running. Returns the signal number that stopped the run, or None for
        :meth:`request_stop`.
        """
        received: list[int] = []

        def handler(signum: int, frame: FrameType | None) -> None:
            del frame
            received.append(signum)
            self._stop.set()

        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                previous[sig] = signal.signal(sig, handler)
        try:
            if self._state == "created":
                self.start()
            if on_started is not None:
                on_started()
            while not self._stop.wait(tick_interval):
                if on_tick is not None:
                    on_tick()
        finally:
            try:
                self.shutdown()
            finally:
                for sig, old in previous.items():
                    signal.signal(sig, old)
        return received[0] if received else None


def _as_consumer(component: Component, cid: str) -> Consumer:
    if not isinstance(component, Consumer):
        raise ComponentError(f"{cid}: component has no consume(batch) method")
    return component
