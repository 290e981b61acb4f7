"""The ``memory_limiter`` processor: refuses (never drops) over a memory or in-flight limit."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading

import psutil
import pytest

from otel_bridge.component import CreateSettings, Host, Telemetry
from otel_bridge.errors import RefusedError
from otel_bridge.model import Batch
from otel_bridge.processors.memory_limiter import Config, MemoryLimiter, factory, process_rss
from otel_bridge.testing import RecordingConsumer, make_span

MIB = 1024 * 1024


class FakeMemory:
    """A settable memory reading (the real psutil reading is covered separately)."""

    def __init__(self, mib: int) -> None:
        self.mib = mib

    def __call__(self) -> int:
        return self.mib * MIB


def one() -> Batch:
    """A one-span batch."""
    return Batch(spans=(make_span(),))


def test_default_uses_real_process_memory() -> None:
    """The default config limits RSS to 80% of physical memory, read with psutil."""
    sink = RecordingConsumer()
    proc = factory.create(CreateSettings(id="memory_limiter"), Config(), sink)
    assert isinstance(proc, MemoryLimiter)
    proc.start(Host())
    assert proc.limits is not None
    soft, hard = proc.limits
    assert 0 < soft < hard
    assert 0 < proc.check() < soft
    proc.consume(one())
    assert sink.record_count == 1
    proc.shutdown()
    proc.shutdown()


def _grown_reading() -> tuple[int, int, int]:
    """This process's reading before and after touching 64 MiB, and psutil's after."""
    before = process_rss()
    ballast = bytearray(64 * MIB)  # zero-filled: every page is touched
    after = process_rss()
    reference = psutil.Process().memory_info().rss
    del ballast
    return before, after, reference


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_memory_reading_is_psutils_rss_and_follows_growth() -> None:
    """The kept-open /proc/self/statm reading is the RSS psutil reports, and it moves: a
    descriptor read again at offset 0 gives the current figure, not the first one."""
    before, after, reference = _grown_reading()
    assert after - before >= 60 * MIB
    assert abs(after - reference) <= 4 * MIB


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_memory_reading_in_a_forked_child_is_the_childs() -> None:
    """A child forked after the parent opened its descriptor reads its own memory: the child's
    64 MiB show in its reading and not in the parent's."""
    process_rss()  # the parent's descriptor is open before the fork
    parent_before = process_rss()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its readings, then leave without running pytest's exit
        os.close(read_end)
        try:
            os.write(write_end, repr(_grown_reading()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        child = pipe.read().decode()
    os.waitpid(pid, 0)
    before, after, reference = (int(v) for v in child.strip("()").split(","))
    assert after - before >= 60 * MIB
    assert abs(after - reference) <= 4 * MIB
    assert process_rss() < parent_before + 32 * MIB


def test_refuses_over_soft_limit_and_recovers() -> None:
    """Over the soft limit data is refused with a retryable error, counted; below it flows."""
    telemetry = Telemetry()
    memory = FakeMemory(50)
    sink = RecordingConsumer()
    proc = MemoryLimiter(
        Config(limit_mib=100, spike_limit_mib=20, check_interval=3600),
        sink,
        name="ml",
        telemetry=telemetry,
        read_memory=memory,
    )
    proc.start(Host(telemetry=telemetry))
    assert proc.limits == (80 * MIB, 100 * MIB)
    proc.consume(one())
    memory.mib = 85
    proc.check()
    assert proc.refusing
    with pytest.raises(RefusedError, match=r"ml: data refused, retry later \(memory 85 MiB"):
        proc.consume(one())
    memory.mib = 60
    proc.check()
    proc.consume(one())
    assert sink.record_count == 2
    assert telemetry.counters()["processor.ml.refused_records"] == 1
    proc.shutdown()


def test_periodic_check_notices_growth() -> None:
    """The background check flips to refusing without any consume call."""
    memory = FakeMemory(10)
    proc = MemoryLimiter(
        Config(limit_mib=100, check_interval=0.01),
        RecordingConsumer(),
        name="ml",
        telemetry=Telemetry(),
        read_memory=memory,
    )
    proc.start(Host())
    memory.mib = 99
    for _ in range(200):
        if proc.refusing:
            break
        threading.Event().wait(0.01)
    assert proc.refusing
    proc.shutdown()


def test_percentage_limits() -> None:
    """limit_percentage and spike_limit_percentage scale with physical memory."""
    cfg = Config(limit_percentage=50, spike_limit_percentage=10)
    assert cfg.memory_limits(1000 * MIB) == (400 * MIB, 500 * MIB)
    assert Config(limit_mib=10).memory_limits(0) == (8 * MIB, 10 * MIB)
    assert Config(limit_percentage=0, limit_records=5).memory_limits(1000) is None


class Blocking(RecordingConsumer):
    """A consumer that blocks until released, to hold records in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def consume(self, batch: Batch) -> None:
        """Block, then record."""
        self.entered.set()
        self.release.wait(5)
        super().consume(batch)


def test_records_in_flight_limit() -> None:
    """With limit_records, a batch that would exceed the in-flight count is refused."""
    telemetry = Telemetry()
    sink = Blocking()
    proc = MemoryLimiter(
        Config(limit_percentage=0, limit_records=3), sink, name="ml", telemetry=telemetry
    )
    proc.start(Host())
    first = threading.Thread(target=proc.consume, args=(Batch(spans=(make_span(1), make_span(2))),))
    first.start()
    assert sink.entered.wait(5)
    with pytest.raises(RefusedError, match="2 records in flight, limit_records is 3"):
        proc.consume(Batch(spans=(make_span(3), make_span(4))))
    sink.release.set()
    first.join()
    proc.consume(Batch(spans=(make_span(3), make_span(4))))
    assert sink.record_count == 4
    assert telemetry.counters()["processor.ml.refused_batches"] == 1
    proc.shutdown()


def test_in_flight_released_when_downstream_raises() -> None:
    """A downstream error releases the in-flight count, so later batches still pass."""
    sink = RecordingConsumer(error=OSError("x"))
    proc = MemoryLimiter(
        Config(limit_percentage=0, limit_records=1), sink, name="ml", telemetry=Telemetry()
    )
    for _ in range(3):
        with pytest.raises(OSError, match="x"):
            proc.consume(one())
    sink.error = None
    proc.consume(one())
    assert sink.record_count == 1


_ARENAS = """
import ctypes, sys, threading
from otel_bridge.component import CreateSettings, Host
from otel_bridge.processors.memory_limiter import Config, factory
from otel_bridge.testing import RecordingConsumer

config = Config(limit_mib=100_000, spike_limit_mib=10, malloc_arenas=int(sys.argv[1]))
limiter = factory.create(CreateSettings(id="memory_limiter"), config, RecordingConsumer())
limiter.start(Host())
barrier = threading.Barrier(8)
held = []

def allocate():  # eight threads alive at once, each allocating with malloc (over 512 bytes)
    barrier.wait()
    held.append([bytearray(1000 + i) for i in range(200)])
    barrier.wait()

threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
limiter.shutdown()
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def _arenas(setting: int) -> int:
    done = subprocess.run(
        [sys.executable, "-c", _ARENAS, str(setting)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return sum(1 for line in done.stderr.splitlines() if line.startswith("Arena "))


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc arenas are glibc's")
def test_a_running_limiter_bounds_the_malloc_arenas() -> None:
    """With ``malloc_arenas: 2`` (the default) eight threads allocating at once share at most
    two arenas; with 0 (glibc's default, eight per core) each gets its own. Fewer arenas keep
    the memory a burst of receiver threads freed reusable instead of resident."""
    assert _arenas(2) <= 2
    assert _arenas(0) >= 4


def test_a_negative_arena_bound_is_a_config_error() -> None:
    problems = Config(limit_mib=100, malloc_arenas=-1).validate()
    assert problems == ["malloc_arenas: must not be negative"]
