"""The ``memory_limiter`` processor: refuses data, rather than dropping it, when memory is short.

Two limits, either or both:

* **Process memory** (as the Collector's): every ``check_interval`` the process's resident set
  size is read with psutil. At or above the soft limit (``limit_mib - spike_limit_mib``) new data
  is refused until usage falls back; above the hard limit (``limit_mib``) a garbage collection is
  also forced. ``limit_percentage`` sets the limit as a share of physical memory instead.
* **Records in flight** (``limit_records``): the number of records currently being handled
  downstream of this processor, across every receiver thread. A batch that would push it past
  the limit is refused (a batch larger than the limit alone still passes when nothing else is
  in flight, or it could never pass).

Refusing raises :class:`~otel_bridge.errors.RefusedError`: nothing was accepted, and receivers
answer their clients with a retryable status (gRPC ``UNAVAILABLE``, HTTP 503), so an OTel SDK
retries with backoff. Every refusal is counted in ``processor.<id>.refused_records``. Put this
processor first in a pipeline.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from dataclasses import dataclass

import psutil

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
from otel_bridge.errors import RefusedError
from otel_bridge.model import Batch

_MIB = 1024 * 1024


@dataclass(slots=True)
class Config:
    """Configuration of the ``memory_limiter`` processor."""

    check_interval: float = 1.0
    """Seconds between two reads of process memory (``"1s"``)."""
    limit_mib: int = 0
    """Hard limit of resident memory in MiB; 0 means use ``limit_percentage``."""
    spike_limit_mib: int = 0
    """Headroom below the hard limit where refusing starts; 0 means 20% of the limit."""
    limit_percentage: int = 80
    """Hard limit as a percentage of physical memory, used when ``limit_mib`` is 0; 0 turns
    the memory limit off."""
    spike_limit_percentage: int = 0
    """Spike headroom as a percentage of physical memory, with ``limit_percentage``."""
    limit_records: int = 0
    """Most records in flight downstream at once; 0 means no such limit."""

    def validate(self) -> list[str]:
        """Problems with this configuration, as ``"key: message"``."""
        problems = []
        if self.check_interval <= 0:
            problems.append("check_interval: must be positive (e.g. 1s)")
        for name in ("limit_mib", "spike_limit_mib", "limit_records"):
            if getattr(self, name) < 0:
                problems.append(f"{name}: must not be negative")
        for name in ("limit_percentage", "spike_limit_percentage"):
            if not 0 <= getattr(self, name) <= 100:
                problems.append(f"{name}: must be between 0 and 100")
        if self.limit_mib > 0 and self.spike_limit_mib >= self.limit_mib:
            problems.append(f"spike_limit_mib: must be less than limit_mib ({self.limit_mib})")
        if (
            self.limit_mib == 0
            and self.limit_percentage
            and self.spike_limit_percentage >= self.limit_percentage
        ):
            problems.append(
                "spike_limit_percentage: must be less than limit_percentage "
                f"({self.limit_percentage})"
            )
        if self.limit_mib == 0 and self.limit_percentage == 0 and self.limit_records == 0:
            problems.append("limit_mib: set a limit (limit_mib, limit_percentage or limit_records)")
        return problems

    def memory_limits(self, total_bytes: int) -> tuple[int, int] | None:
        """``(soft, hard)`` limits in bytes for a machine with ``total_bytes``, or None if off."""
        if self.limit_mib > 0:
            hard = self.limit_mib * _MIB
            spike = self.spike_limit_mib * _MIB or hard // 5
        elif self.limit_percentage > 0:
            hard = total_bytes * self.limit_percentage // 100
            spike = total_bytes * self.spike_limit_percentage // 100 or hard // 5
        else:
            return None
        return hard - spike, hard


def _process_rss() -> int:
    return int(psutil.Process().memory_info().rss)


class MemoryLimiter:
    """Passes batches on while memory and records in flight are under their limits."""

    def __init__(
        self,
        config: Config,
        next_consumer: Consumer,
        *,
        name: str,
        telemetry: Telemetry,
        read_memory: Callable[[], int] = _process_rss,
        total_memory: int | None = None,
    ) -> None:
        self._config = config
        self._next = next_consumer
        self._name = name
        self._telemetry = telemetry.owned_by(factory, name)
        self._read_memory = read_memory
        total = total_memory if total_memory is not None else psutil.virtual_memory().total
        self._limits = config.memory_limits(total)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._over_memory = False
        self._last_usage = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def limits(self) -> tuple[int, int] | None:
        """The ``(soft, hard)`` memory limits in bytes, or None when memory is not limited."""
        return self._limits

    @property
    def refusing(self) -> bool:
        """True while memory usage is over the soft limit."""
        with self._lock:
            return self._over_memory

    def start(self, host: Host) -> None:
        """Read memory once, then start the periodic check."""
        del host
        if self._limits is None or self._thread is not None:
            return
        self.check()
        self._thread = threading.Thread(
            target=self._run, name=f"otel-bridge-{self._name}", daemon=True
        )
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the periodic check. Safe before start and twice."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def check(self) -> int:
        """Read memory now and update the refusing state; returns the usage in bytes."""
        if self._limits is None:
            return 0
        soft, hard = self._limits
        usage = self._read_memory()
        if usage >= hard:
            gc.collect()
            usage = self._read_memory()
        with self._lock:
            was = self._over_memory
            self._over_memory = usage >= soft
            self._last_usage = usage
        if self._over_memory and not was:
            self._telemetry.report_once(
                f"processor.{self._name}.over_limit",
                f"{self._name}: memory {usage // _MIB} MiB is over the soft limit "
                f"{soft // _MIB} MiB; refusing data until it falls",
            )
        return usage

    def _run(self) -> None:
        while not self._stop.wait(self._config.check_interval):
            self.check()

    def consume(self, batch: Batch) -> None:
        """Pass ``batch`` on, or raise :class:`RefusedError` when over a limit."""
        n = len(batch)
        limit = self._config.limit_records
        with self._lock:
            if self._over_memory:
                reason = (
                    f"memory {self._last_usage // _MIB} MiB over the soft limit "
                    f"{self._limits[0] // _MIB if self._limits else 0} MiB"
                )
            elif limit and self._in_flight and self._in_flight + n > limit:
                reason = f"{self._in_flight} records in flight, limit_records is {limit}"
            else:
                reason = ""
                self._in_flight += n
        if reason:
            self._telemetry.count("refused_records", n)
            self._telemetry.count("refused_batches")
            raise RefusedError(f"{self._name}: data refused, retry later ({reason})")
        try:
            self._next.consume(batch)
        finally:
            with self._lock:
                self._in_flight -= n


def _create(settings: CreateSettings, config: Config, next_consumer: Consumer | None) -> Component:
    return MemoryLimiter(
        config,
        require_consumer(next_consumer, settings.id),
        name=settings.instance_name,
        telemetry=settings.telemetry,
    )


factory: Factory[Config] = Factory(
    type_name="memory_limiter",
    kind=PROCESSOR,
    default_config=Config,
    create=_create,
    counters=(
        CounterSpec("refused_records", "records refused (retryable) over a limit"),
        CounterSpec("refused_batches", "batches refused (retryable) over a limit", "{batches}"),
    ),
)
"""The ``memory_limiter`` processor factory."""
