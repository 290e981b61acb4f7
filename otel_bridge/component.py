"""Component contracts: what a receiver, processor and exporter promise, and what they may assume.

A pipeline is ``receivers -> processors (in order) -> exporters (fan-out)``. Data moves by one
synchronous call, :meth:`Consumer.consume`, carrying an immutable :class:`~otel_bridge.model.Batch`.

Lifecycle (the same for every kind):

* ``create`` (the factory) builds a component from its validated config. It must not open
  sockets, start threads or touch the disk beyond checking paths: that is ``start``'s job.
* ``start(host)`` acquires resources. It is called once, exporters first and receivers last, so
  nothing is consumed before its consumers are ready. Raising :class:`StartupError` aborts the
  whole start-up; components already started are shut down in reverse order.
* ``consume(batch)`` may be called from any thread, concurrently, at any time between ``start``
  and the return of ``shutdown``. It must not mutate the batch. It returns once the batch is
  accepted (queued or handled); a component that cannot accept it raises, and the receiver
  reports the failure to its client. At run time bad input is counted and reported through
  :class:`Telemetry`, never allowed to crash the process.
* ``shutdown()`` flushes what was accepted, then releases resources. It is safe before
  ``start`` and safe twice. Receivers stop first (no new data), exporters last (everything
  accepted upstream is written).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar, runtime_checkable

from otel_bridge.model import Batch

RECEIVER = "receiver"
PROCESSOR = "processor"
EXPORTER = "exporter"
EXTENSION = "extension"


@runtime_checkable
class Consumer(Protocol):
    """Accepts batches. Implemented by processors, exporters and pipeline fan-outs."""

    def consume(self, batch: Batch) -> None:
        """Accept ``batch``; see the module docstring for the contract."""


@runtime_checkable
class Component(Protocol):
    """Something with a lifecycle."""

    def start(self, host: Host) -> None:
        """Acquire resources and begin work. Called once."""

    def shutdown(self) -> None:
        """Flush, then release resources. Safe before start and safe twice."""


class Receiver(Component, Protocol):
    """Produces batches into the consumer it was created with."""


class Processor(Component, Consumer, Protocol):
    """Transforms batches and passes them to the consumer it was created with."""


class Exporter(Component, Consumer, Protocol):
    """Writes batches out of the pipeline."""


class Telemetry:
    """Counters and one-time reports for a running collector. Thread-safe.

    Components count what they accept, drop and reject here; the run summary and ``run``'s
    progress line read it. ``report_once`` logs a problem the first time it happens, so a flood
    of bad input produces one log line and a counter, not a log storm.
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._lock = threading.Lock()
        self._counters: Counter[str] = Counter()
        self._reported: set[str] = set()
        self._notes: dict[str, str] = {}
        self._logger = logger or logging.getLogger("otel_bridge")

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name`` (dotted, e.g. ``receiver.otlp.spans_accepted``)."""
        with self._lock:
            self._counters[name] += n

    def report_once(self, key: str, message: str) -> None:
        """Log ``message`` at warning level the first time ``key`` is reported."""
        with self._lock:
            if key in self._reported:
                return
            self._reported.add(key)
        self._logger.warning("%s", message)

    def note(self, key: str, value: str) -> None:
        """Record a status string for the summary (e.g. which host backend is in use)."""
        with self._lock:
            self._notes[key] = value

    def counters(self) -> dict[str, int]:
        """A snapshot of every counter."""
        with self._lock:
            return dict(self._counters)

    def notes(self) -> dict[str, str]:
        """A snapshot of every status note."""
        with self._lock:
            return dict(self._notes)


@dataclass(slots=True)
class Host:
    """What a started component may use from the collector that runs it."""

    telemetry: Telemetry = field(default_factory=Telemetry)
    extensions: dict[str, object] = field(default_factory=dict)
    run_dir: str | None = None
    """The run directory when running under ``observe``; None otherwise."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateSettings:
    """What a factory is told about the instance it creates."""

    id: str
    """The component id as configured, ``type`` or ``type/name``."""
    pipeline: str = ""
    """For processors: the pipeline the instance belongs to."""
    telemetry: Telemetry = field(default_factory=Telemetry)

    @property
    def instance_name(self) -> str:
        """``pipeline.id`` for a processor (one instance per pipeline), else the id."""
        return f"{self.pipeline}.{self.id}" if self.pipeline else self.id

    @property
    def logger(self) -> logging.Logger:
        """A logger named after the component."""
        return logging.getLogger(f"otel_bridge.{self.id}")


C = TypeVar("C")


@dataclass(frozen=True, slots=True, kw_only=True)
class Factory(Generic[C]):
    """Creates one kind of component from its typed configuration.

    ``default_config`` returns a fresh config dataclass; the loader overlays the user's YAML onto
    it (rejecting unknown keys) and then calls its ``validate()`` if it has one, which returns a
    list of problems as ``"key.path: message"`` relative to the component.
    ``create(settings, config, next_consumer)`` returns the component; ``next_consumer`` is None
    for exporters.
    """

    type_name: str
    kind: str
    default_config: Callable[[], C]
    create: Callable[[CreateSettings, C, Consumer | None], Component]
    signals: frozenset[str] = frozenset({"traces", "logs", "evidence"})
    """Pipeline types the component may be used in."""


class BatchFunction(Protocol):
    """A pure processor step: a batch in, a batch out, or None to drop the batch."""

    def __call__(self, batch: Batch, /) -> Batch | None: ...


class FunctionProcessor:
    """Wraps a pure ``Batch -> Batch | None`` function as a processor.

    Most processors are pure functions (normalize, redact, grade). Empty results are not
    forwarded.
    """

    def __init__(self, fn: BatchFunction, next_consumer: Consumer) -> None:
        self._fn = fn
        self._next = next_consumer

    def start(self, host: Host) -> None:
        """Nothing to acquire."""

    def shutdown(self) -> None:
        """Nothing to flush."""

    def consume(self, batch: Batch) -> None:
        """Apply the function and forward a non-empty result."""
        out = self._fn(batch)
        if out is not None and len(out):
            self._next.consume(out)


def require_consumer(next_consumer: Consumer | None, type_name: str) -> Consumer:
    """The next consumer of a receiver or processor; a factory bug if it is missing."""
    if next_consumer is None:
        raise ValueError(f"{type_name}: a receiver or processor needs a next consumer")
    return next_consumer
