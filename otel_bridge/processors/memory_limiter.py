"""The ``memory_limiter`` processor: refuses data, rather than dropping it, when memory is short.

Two limits, either or both:

* **Process memory** (as the Collector's): every ``check_interval`` the process's resident set
  size is read (``/proc/self/statm`` through a descriptor kept open, psutil where there is no
  such file), and again on the data path whenever the last reading is older than
  :data:`INLINE_INTERVAL`, or for every batch once usage is within one spike of the soft limit
  (so a flood between two periodic checks cannot run far past the limit). At or above the soft
  limit (``limit_mib - spike_limit_mib``) new data is refused until usage falls back; the
  periodic check then frees reference cycles (a collection of the young generations, a full one
  above the hard limit) and returns freed memory to the system (``malloc_trim`` where glibc has
  it), so usage does fall once the pressure is gone.
  ``limit_percentage`` sets the limit as a share of physical memory instead. What the
  receivers read and decode before this processor sees it is bounded too: while it runs, the
  limiter registers with :mod:`otel_bridge.admission`, so the OTLP receivers refuse a request
  *before reading it* while this limiter refuses, and hold at most half the spike headroom
  (hard minus soft limit) of requests in flight; memory then stays under the hard limit
  however many clients send at once. At start it bounds glibc's malloc arenas
  (``malloc_arenas``, :func:`bound_malloc_arenas`), so memory freed on many receiver threads
  is reused rather than kept resident.
* **Retained state** (``retained_after``): memory can stay over the soft limit with nothing in
  flight because the pipeline *keeps* it (the graph exporter's graph, bounded by its
  ``bounds``, ``docs/exporters.md``), not because of data in flight; refusing would then last
  forever. When usage has stayed over the soft limit for ``retained_after`` seconds, the
  limiter admits data again one batch at a time (nothing else in flight), each after a fresh
  reading below the hard limit; only the hard limit refuses. It is reported once, and leaves
  this mode when usage falls below the soft limit.
* **A lone batch's own overage**: decoding a large request can itself push usage over the soft
  limit of a collector that rests just under it; refusing that batch would refuse it again on
  every retry, since the periodic check, once it is freed, reads usage under the soft limit
  again. So a batch with nothing else in flight is admitted when the reading on the data path is
  over the soft limit but under the hard limit, provided the last periodic check read usage
  under the soft limit; one such batch per periodic reading, so a stream of batches still stops
  at the soft limit until the next check.
* **Records in flight** (``limit_records``): the number of records currently being handled
  downstream of this processor, across every receiver thread. A batch that would push it past
  the limit is refused (a batch larger than the limit alone still passes when nothing else is
  in flight, or it could never pass).

Refusing raises :class:`~otel_bridge.errors.RefusedError`: nothing was accepted, and receivers
answer their clients with the OTLP throttling status (gRPC ``RESOURCE_EXHAUSTED`` with
``RetryInfo``, HTTP 429 with ``Retry-After``), so an OTel SDK retries after that delay. Every
refusal is counted in ``processor.<id>.refused_records``. Put this processor first in a
pipeline.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from otel_bridge.admission import admission
from otel_bridge.component import (
    PROCESSOR,
    Consumer,
    CounterSpec,
    Factory,
    Host,
    Telemetry,
    named_processor_create,
)
from otel_bridge.errors import RefusedError
from otel_bridge.model import Batch

_MIB = 1024 * 1024
INLINE_INTERVAL = 0.05
"""Seconds after which a batch re-reads memory itself rather than trust the periodic check."""


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
    retained_after: float = field(default=10.0, metadata={"duration": True})
    """Seconds over the soft limit after which the memory is taken as retained state and data
    is admitted one batch at a time below the hard limit; 0 refuses until usage falls."""
    malloc_arenas: int = 2
    """Most glibc malloc arenas while a memory limit runs (``mallopt(M_ARENA_MAX)``); 0 leaves
    the C library's default (eight per core). See :func:`bound_malloc_arenas`."""

    def validate(self) -> list[str]:
        """Problems with this configuration, as ``"key: message"``."""
        problems = []
        if self.check_interval <= 0:
            problems.append("check_interval: must be positive (e.g. 1s)")
        if self.retained_after < 0:
            problems.append("retained_after: must not be negative")
        for name in ("limit_mib", "spike_limit_mib", "limit_records", "malloc_arenas"):
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


_PROCESS: list[psutil.Process] = []
_STATM: list[int] = []
"""A descriptor of this process's ``/proc/<pid>/statm``, kept open (empty: not opened yet, or
forgotten by a forked child, whose descriptor would still name its parent)."""
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_NO_STATM = -1


def _forget_statm() -> None:
    for fd in _STATM:
        if fd != _NO_STATM:
            os.close(fd)
    _STATM.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_statm)


def process_rss() -> int:
    """This process's resident set size in bytes: the second field of ``/proc/self/statm`` (in
    pages, as psutil reads it), read through a descriptor kept open; psutil where there is none.

    Called on the data path (module doc): one ``pread`` costs about a twentieth of psutil's
    ``memory_info`` (which opens, reads and parses the same file on every call).
    """
    if not _STATM:
        try:
            _STATM.append(os.open(f"/proc/{os.getpid()}/statm", os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            _STATM.append(_NO_STATM)
    fd = _STATM[0]
    if fd != _NO_STATM:
        try:
            return int(os.pread(fd, 256, 0).split(None, 2)[1]) * _PAGE
        except (OSError, ValueError, IndexError):
            pass  # an unexpected /proc: psutil below says what it can
    if not _PROCESS:
        _PROCESS.append(psutil.Process())
    return int(_PROCESS[0].memory_info().rss)


def _load_malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim if name else None  # type: ignore[assignment]
    except (OSError, AttributeError):
        return None
    return trim


def release_memory(hard: bool) -> None:
    """Free what the cyclic garbage collector can and return freed memory to the system.

    Called by the periodic check while usage is over the soft limit, so at most once per
    ``check_interval``: a collection of the two young generations (every container made since
    their last collection, so the cycles of the latest requests), of all three when ``hard``;
    then ``malloc_trim``."""
    gc.collect(2 if hard else 1)
    trim = _TRIM[0] if _TRIM else None
    if trim is not None:
        trim(0)


_TRIM: list[Callable[[int], int] | None] = [_load_malloc_trim()]

_M_ARENA_MAX = -8
"""``mallopt``'s parameter number for the most arenas (glibc's ``malloc.h``)."""


def bound_malloc_arenas(arenas: int) -> bool:
    """Let glibc's malloc use at most ``arenas`` arenas from now on; False where it cannot.

    glibc gives a thread that finds the arenas in use a new arena, up to eight per core. The
    receivers decode each request on its own thread, so a burst of concurrent requests spreads
    its freed memory over many arenas, each kept partly resident by a few live objects; the
    resident set a memory limit reads then creeps up with no more live data
    (``tests/chaos/test_admission.py`` read the same retained state at 61 to 77 MiB with two
    arenas and 68 to 85 MiB without the bound). Python threads allocate under the GIL, so fewer
    arenas cost little contention. Arenas that already exist stay; the limiter calls this at
    start, before the receivers start their threads."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        return False
    return bool(mallopt is not None and mallopt(_M_ARENA_MAX, arenas) == 1)


class MemoryLimiter:
    """Passes batches on while memory and records in flight are under their limits."""

    def __init__(
        self,
        config: Config,
        next_consumer: Consumer,
        *,
        name: str,
        telemetry: Telemetry,
        read_memory: Callable[[], int] = process_rss,
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
        self._over_since = 0.0
        self._retained = False
        self._settled_under = False
        self._last_usage = 0
        self._read_at = 0.0
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
        if self._config.malloc_arenas:
            bound_malloc_arenas(self._config.malloc_arenas)
        self.check()
        admission.register(self)
        self._thread = threading.Thread(
            target=self._run, name=f"otel-bridge-{self._name}", daemon=True
        )
        self._thread.start()

    def shutdown(self) -> None:
        """Stop the periodic check. Safe before start and twice."""
        self._stop.set()
        admission.unregister(self)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def retained(self) -> bool:
        """True while memory over the soft limit is taken as retained state (module doc)."""
        with self._lock:
            return self._retained

    def check(self, *, release: bool = True) -> int:
        """Read memory now and update the refusing state; returns the usage in bytes.

        With ``release`` (the periodic check), usage over the soft limit first returns freed
        memory to the system (:func:`release_memory`) and is read again.
        """
        if self._limits is None:
            return 0
        soft, hard = self._limits
        usage = self._read_memory()
        if release and usage >= soft:
            release_memory(usage >= hard)
            usage = self._read_memory()
        now = time.monotonic()
        with self._lock:
            was, was_retained = self._over_memory, self._retained
            self._over_memory = usage >= soft
            self._last_usage = usage
            self._read_at = now
            if release:
                self._settled_under = not self._over_memory
            if not self._over_memory:
                self._retained = False
            elif not was:
                self._over_since = now
            elif (
                self._config.retained_after
                and now - self._over_since >= self._config.retained_after
            ):
                self._retained = True
            retained = self._retained and not was_retained
        self._report(usage, soft, newly_over=self._over_memory and not was, retained=retained)
        return usage

    def _report(self, usage: int, soft: int, *, newly_over: bool, retained: bool) -> None:
        if newly_over:
            self._telemetry.report_once(
                f"processor.{self._name}.over_limit",
                f"{self._name}: memory {usage // _MIB} MiB is over the soft limit "
                f"{soft // _MIB} MiB; refusing data until it falls",
            )
        if retained:
            self._telemetry.report_once(
                f"processor.{self._name}.retained",
                f"{self._name}: memory {usage // _MIB} MiB has stayed over the soft limit "
                f"{soft // _MIB} MiB for {self._config.retained_after:g} s: taken as state the "
                "pipeline keeps (e.g. the graph); admitting one batch at a time below the hard "
                "limit",
            )

    @property
    def admission_budget(self) -> int:
        """Bytes the receivers may hold in flight: half the spike headroom (0: no memory
        limit)."""
        if self._limits is None:
            return 0
        soft, hard = self._limits
        return max((hard - soft) // 2, 1)

    def admission_refusal(self, cost: int, in_flight: int) -> str:
        """Why a request charged ``cost`` bytes is refused before a receiver reads it, with
        ``in_flight`` bytes charged to others ("" to read it). Retained state (module doc):
        read only alone, and only when usage plus ``cost`` stays under the hard limit."""
        if self._limits is None:
            return ""
        hard = self._limits[1]
        with self._lock:
            stale = time.monotonic() - self._read_at >= INLINE_INTERVAL
        if stale:
            self.check(release=False)
        with self._lock:
            reason = self._refusal(0)
            usage = self._last_usage
            if not reason and self._retained and (in_flight or usage + cost >= hard):
                reason = (
                    f"memory {usage // _MIB} MiB is retained; a request of ~{cost // _MIB} MiB "
                    f"decoded is read alone and below the hard limit {hard // _MIB} MiB"
                )
        return f"{self._name}: data refused, retry later ({reason})" if reason else ""

    def _run(self) -> None:
        while not self._stop.wait(self._config.check_interval):
            self.check()

    def _refusal(self, n: int) -> str:
        """Why a batch of ``n`` records is refused now ("" to admit it); holds ``_lock``."""
        limit = self._config.limit_records
        if self._over_memory and self._limits is not None:
            soft, hard = self._limits
            if self._retained and not self._in_flight and self._last_usage < hard:
                return ""
            bound, which = (hard, "hard") if self._retained else (soft, "soft")
            return (
                f"memory {self._last_usage // _MIB} MiB over the {which} limit {bound // _MIB} MiB"
            )
        if limit and self._in_flight and self._in_flight + n > limit:
            return f"{self._in_flight} records in flight, limit_records is {limit}"
        return ""

    def _lone_overage(self) -> bool:
        """True when the soft limit is passed only by a lone batch's own decoded form (module
        doc): nothing in flight, the last periodic reading under the soft limit, this reading
        under the hard limit. Holds ``_lock``."""
        return (
            self._over_memory
            and self._limits is not None
            and not self._in_flight
            and self._settled_under
            and self._last_usage < self._limits[1]
        )

    def consume(self, batch: Batch) -> None:
        """Pass ``batch`` on, or raise :class:`RefusedError` when over a limit."""
        n = len(batch)
        if self._limits is not None:
            soft, hard = self._limits
            with self._lock:
                stale = (
                    self._retained
                    or self._last_usage >= soft - (hard - soft)  # near the limit: every batch
                    or time.monotonic() - self._read_at >= INLINE_INTERVAL
                )
            if stale:
                self.check(release=False)
        with self._lock:
            reason = self._refusal(n)
            if reason and self._lone_overage():
                reason = ""
                self._settled_under = False  # one such batch per periodic reading
            if not reason:
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


factory: Factory[Config] = Factory(
    type_name="memory_limiter",
    kind=PROCESSOR,
    default_config=Config,
    create=named_processor_create(MemoryLimiter),
    counters=(
        CounterSpec("refused_records", "records refused (retryable) over a limit"),
        CounterSpec("refused_batches", "batches refused (retryable) over a limit", "{batches}"),
    ),
)
"""The ``memory_limiter`` processor factory."""
