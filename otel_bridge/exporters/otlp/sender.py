"""A bounded queue of export items drained by sender threads, with retry and backoff.

The exporter puts items (a signal and its records) in; background threads take them out, send
them through a transport and retry retryable failures with exponential backoff and jitter,
honouring a delay the server asks for (HTTP ``Retry-After``, gRPC ``RetryInfo``). A full queue
refuses new items (the exporter counts them as dropped); ``shutdown`` drains the queue within a
deadline and counts whatever it could not send.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from otel_bridge.exporters.otlp.config import QueueConfig, RetryConfig
from otel_bridge.model import LogRecord, Span

Signal = Literal["traces", "logs", "metrics"]
"""What a transport moves; the exporters send traces and logs (metrics only ``observe``'s
forwarding relays, :mod:`otel_bridge.exporters.otlp.relay`)."""


@dataclass(frozen=True, slots=True)
class Item:
    """One unit of work: the records of one batch for one signal."""

    signal: Signal
    records: tuple[Span, ...] | tuple[LogRecord, ...]
    payload: bytes = b""
    """The encoded request, when already encoded (a persistent queue stores it)."""
    count: int = -1
    """Records in the batch when ``records`` is not kept (replayed from disk)."""
    seq: int = -1
    """Sequence number in the persistent queue; -1 when not persisted."""

    @property
    def size(self) -> int:
        """Spans or log records in the item."""
        return self.count if self.count >= 0 else len(self.records)


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of one send attempt."""

    ok: bool
    retryable: bool = False
    retry_after: float | None = None
    """Delay the server asked for, in seconds, when it gave one."""
    message: str = ""
    rejected: int = 0
    """Records the server rejected in a partial success (never retried)."""
    unsupported: bool = False
    """The server does not accept this signal at all (HTTP 404/405/415, gRPC UNIMPLEMENTED)."""
    aborted: bool = False
    """Shutdown interrupted the retries: the batch was neither delivered nor given up on."""


OK = SendResult(ok=True)


class Backoff:
    """Exponential backoff with jitter, as the Collector's ``retry_on_failure`` computes it."""

    def __init__(self, config: RetryConfig, rng: random.Random | None = None) -> None:
        self._config = config
        self._interval = config.initial_interval
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """The next delay in seconds; each call grows the interval up to ``max_interval``."""
        c = self._config
        spread = c.randomization_factor * self._interval
        delay = self._rng.uniform(self._interval - spread, self._interval + spread)
        self._interval = min(self._interval * c.multiplier, c.max_interval)
        return delay


class Sender:
    """Delivers items through ``attempt`` with retries; optionally from a bounded queue."""

    def __init__(
        self,
        attempt: Callable[[Item], SendResult],
        retry: RetryConfig,
        queue: QueueConfig,
        on_done: Callable[[Item, SendResult], None],
        name: str = "otlp-exporter",
    ) -> None:
        self._attempt = attempt
        self._retry = retry
        self._queue_config = queue
        self._on_done = on_done
        self._name = name
        self._items: deque[Item] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._abort = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Start the sender threads (when the queue is enabled)."""
        if not self._queue_config.enabled:
            return
        for i in range(self._queue_config.num_consumers):
            thread = threading.Thread(target=self._run, name=f"{self._name}-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def submit(self, item: Item, *, force: bool = False) -> bool:
        """Queue ``item``; False when the queue is full or closing (the caller counts a drop).

        ``force`` skips the size bound (a persistent queue bounds itself on disk).
        """
        with self._cond:
            if self._closing:
                return False
            if not force and len(self._items) >= self._queue_config.queue_size:
                return False
            self._items.append(item)
            self._cond.notify()
            return True

    def send(self, item: Item) -> SendResult:
        """Deliver ``item`` now, in the calling thread, with retries; the final result."""
        result = self._deliver(item)
        self._on_done(item, result)
        return result

    def pending(self) -> int:
        """Items waiting in the queue."""
        with self._cond:
            return len(self._items)

    def shutdown(self, timeout: float) -> list[Item]:
        """Stop taking items, drain the queue for up to ``timeout`` seconds.

        Returns the items that could not be sent in time (the caller counts them).
        """
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        # Past the deadline: interrupt backoff waits, so in-flight items finish as failed.
        self._abort.set()
        for thread in self._threads:
            thread.join(5.0)
        with self._cond:
            left = list(self._items)
            self._items.clear()
        return left

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._closing:
                    self._cond.wait()
                if not self._items or self._abort.is_set():
                    return
                item = self._items.popleft()
            self.send(item)

    def _deliver(self, item: Item) -> SendResult:
        backoff = Backoff(self._retry)
        started = time.monotonic()
        while True:
            try:
                result = self._attempt(item)
            except Exception as exc:  # a transport bug must not kill the sender thread
                result = SendResult(ok=False, message=f"send failed: {exc!r}")
            if result.ok or not result.retryable or not self._retry.enabled:
                return result
            delay = backoff.next_delay() if result.retry_after is None else result.retry_after
            limit = self._retry.max_elapsed_time
            if limit and time.monotonic() - started + delay > limit:
                return SendResult(
                    ok=False, message=f"gave up after {limit:g}s of retries: {result.message}"
                )
            if self._abort.wait(delay):
                return SendResult(
                    ok=False, aborted=True, message=f"shut down while retrying: {result.message}"
                )
