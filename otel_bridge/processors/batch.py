"""The ``batch`` processor: groups records into larger batches, by size or after a timeout.

As the Collector's batch processor: a batch is sent when ``send_batch_size`` records are buffered
or ``timeout`` after the first buffered record, whichever comes first; batches larger than
``send_batch_max_size`` (when set) are split. ``shutdown`` flushes everything buffered, so with
the pipeline's downstream-first shutdown nothing accepted is lost. Thread-safe: ``consume`` may be
called from several receiver threads; sends are serialized so downstream sees one batch at a time,
in acceptance order.

Errors downstream of a flush cannot reach the client (it was already answered): they are counted
in ``processor.<id>.send_failed`` and reported once. Put ``memory_limiter`` *before* ``batch``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from otel_bridge.component import (
    PROCESSOR,
    Consumer,
    CounterSpec,
    Factory,
    Host,
    Telemetry,
    named_processor_create,
)
from otel_bridge.model import Batch


@dataclass(slots=True)
class Config:
    """Configuration of the ``batch`` processor."""

    send_batch_size: int = 8192
    """Records (spans + logs + observations + coverage) that trigger a send."""
    timeout: float = 0.2
    """Seconds after the first buffered record when the buffer is sent anyway (``"200ms"``)."""
    send_batch_max_size: int = 0
    """Upper bound of a sent batch; larger ones are split. 0 means no bound."""

    def validate(self) -> list[str]:
        """Problems with this configuration, as ``"key: message"``."""
        problems = []
        if self.send_batch_size <= 0:
            problems.append("send_batch_size: must be positive")
        if self.timeout <= 0:
            problems.append("timeout: must be positive (e.g. 200ms)")
        if self.send_batch_max_size < 0:
            problems.append("send_batch_max_size: must be 0 (no bound) or positive")
        elif 0 < self.send_batch_max_size < self.send_batch_size:
            problems.append(
                "send_batch_max_size: must be 0 or at least send_batch_size "
                f"({self.send_batch_size})"
            )
        return problems


def split_batch(batch: Batch, max_size: int) -> list[Batch]:
    """``batch`` cut into batches of at most ``max_size`` records, keeping record order."""
    if max_size <= 0 or len(batch) <= max_size:
        return [batch]
    out: list[Batch] = []
    parts: dict[str, tuple[object, ...]] = {}
    room = max_size
    for name in ("spans", "logs", "observations", "coverage"):
        records: tuple[object, ...] = getattr(batch, name)
        while records:
            take, records = records[:room], records[room:]
            parts[name] = take
            room -= len(take)
            if room == 0:
                out.append(Batch(**parts))  # type: ignore[arg-type]
                parts, room = {}, max_size
    if parts:
        out.append(Batch(**parts))  # type: ignore[arg-type]
    return out


class BatchProcessor:
    """Buffers batches and sends them downstream in larger ones."""

    def __init__(
        self, config: Config, next_consumer: Consumer, *, name: str, telemetry: Telemetry
    ) -> None:
        self._config = config
        self._next = next_consumer
        self._name = name
        self._telemetry = telemetry.owned_by(factory, name)
        self._buffer: list[Batch] = []
        self._buffered = 0
        self._first_at = 0.0
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._closed = False

    def start(self, host: Host) -> None:
        """Start the timeout thread."""
        del host
        with self._cond:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(
                target=self._run, name=f"otel-bridge-{self._name}", daemon=True
            )
        self._thread.start()

    def consume(self, batch: Batch) -> None:
        """Buffer ``batch``; send when ``send_batch_size`` records are buffered."""
        if not len(batch):
            return
        with self._send_lock:
            with self._cond:
                if self._closed:
                    full: list[Batch] | None = [batch]
                else:
                    if not self._buffer:
                        self._first_at = time.monotonic()
                        self._cond.notify_all()
                    self._buffer.append(batch)
                    self._buffered += len(batch)
                    full = self._take() if self._buffered >= self._config.send_batch_size else None
            if full:
                self._send(full, reason="size")

    def shutdown(self) -> None:
        """Stop the timer and send everything buffered. Safe before start and twice."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._send_lock:
            with self._cond:
                pending = self._take()
                self._closed = True
            if pending:
                self._send(pending, reason="shutdown")

    def _take(self) -> list[Batch]:
        """Empty the buffer (caller holds the condition's lock)."""
        taken, self._buffer, self._buffered = self._buffer, [], 0
        return taken

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    if self._buffer:
                        left = self._first_at + self._config.timeout - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                    else:
                        self._cond.wait()
                if self._stopping:
                    return
            with self._send_lock:
                with self._cond:
                    due = self._buffer and time.monotonic() >= self._first_at + self._config.timeout
                    pending = self._take() if due else []
                if pending:
                    self._send(pending, reason="timeout")

    def _send(self, batches: list[Batch], *, reason: str) -> None:
        """Send ``batches`` as one batch, split to the max size (caller holds the send lock)."""
        merged = batches[0] if len(batches) == 1 else Batch.concat(batches)
        prefix = f"processor.{self._name}"
        self._telemetry.count("batches_sent", label=reason)
        for part in split_batch(merged, self._config.send_batch_max_size):
            try:
                self._next.consume(part)
            except Exception as exc:
                self._telemetry.count("send_failed", len(part))
                self._telemetry.report_once(
                    f"{prefix}.send_failed",
                    f"{self._name}: downstream refused a batch of {len(part)} records "
                    f"({type(exc).__name__}: {exc}); counted in {prefix}.send_failed",
                )


factory: Factory[Config] = Factory(
    type_name="batch",
    kind=PROCESSOR,
    default_config=Config,
    create=named_processor_create(BatchProcessor),
    counters=(
        CounterSpec(
            "batches_sent", "batches sent, by reason (size, timeout, shutdown)", "{batches}", True
        ),
        CounterSpec("send_failed", "records whose send downstream raised"),
    ),
)
"""The ``batch`` processor factory."""
