"""The memory limiter under load: reads memory on the data path, holds the hard limit, and
recovers when what stays over the soft limit is retained state rather than data in flight."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from waiting import wait_until

from otel_bridge.component import Host, Telemetry
from otel_bridge.errors import RefusedError
from otel_bridge.model import Batch
from otel_bridge.processors.memory_limiter import Config, MemoryLimiter
from otel_bridge.testing import RecordingConsumer, make_span

MIB = 1024 * 1024


class Memory:
    """A settable memory reading standing for the process's RSS."""

    def __init__(self, mib: int) -> None:
        self.mib = mib

    def __call__(self) -> int:
        return self.mib * MIB


def one(n: int = 0) -> Batch:
    """A one-span batch."""
    return Batch(spans=(make_span(n),))


def _limiter(memory: Memory, sink: RecordingConsumer, **kw: float) -> MemoryLimiter:
    config = Config(limit_mib=100, spike_limit_mib=20, check_interval=3600, **kw)  # type: ignore[arg-type]
    proc = MemoryLimiter(config, sink, name="ml", telemetry=Telemetry(), read_memory=memory)
    proc.start(Host())
    return proc


def _refused(proc: MemoryLimiter) -> bool:
    try:
        proc.consume(one())
    except RefusedError:
        return True
    return False


def test_growth_between_periodic_checks_is_refused_on_the_data_path() -> None:
    """With an hour between periodic checks, a batch still re-reads memory once the reading is
    stale, so a flood cannot run past the limit until the next check."""
    memory = Memory(50)
    proc = _limiter(memory, RecordingConsumer())
    proc.consume(one())
    memory.mib = 90
    wait_until(lambda: _refused(proc), 5, "a refusal read on the data path")
    proc.shutdown()


def test_retained_state_is_admitted_one_batch_at_a_time_below_the_hard_limit() -> None:
    """Usage that stays over the soft limit (the graph's own size) stops being refused after
    retained_after: one batch at a time, each after a fresh reading below the hard limit."""
    memory = Memory(85)
    sink = Blocking()
    proc = _limiter(memory, sink, retained_after=0.05)
    with pytest.raises(RefusedError, match="over the soft limit 80 MiB"):
        proc.consume(one())
    wait_until(lambda: proc.check() and proc.retained, 5, "the retained-state mode")
    first = threading.Thread(target=proc.consume, args=(one(1),))
    first.start()
    assert sink.entered.wait(5)
    with pytest.raises(RefusedError, match="over the hard limit 100 MiB"):
        proc.consume(one(2))  # one batch in flight already
    sink.release.set()
    first.join()
    proc.consume(one(3))
    memory.mib = 101
    with pytest.raises(RefusedError, match="memory 101 MiB over the hard limit"):
        proc.consume(one(4))
    memory.mib = 60
    proc.check()
    assert not proc.retained
    assert not proc.refusing
    proc.consume(one(5))
    assert sink.record_count == 3
    proc.shutdown()


def test_a_lone_batch_over_the_soft_limit_by_its_own_decoding_is_admitted_once() -> None:
    """A collector resting just under the soft limit: a large request's decoded form carries
    the data-path reading over it. Alone in flight, under the hard limit, after a periodic
    reading under the soft limit, that batch passes (refused, it would be refused again on every
    retry); the next one waits for the next periodic reading under the soft limit."""
    memory = Memory(78)
    sink = RecordingConsumer()
    proc = _limiter(memory, sink)
    memory.mib = 90  # the lone batch, decoded
    proc.consume(one(1))
    with pytest.raises(RefusedError, match="memory 90 MiB over the soft limit 80 MiB"):
        proc.consume(one(2))
    memory.mib = 78
    proc.check()  # the periodic reading, the first batch gone
    memory.mib = 90
    proc.consume(one(3))
    assert [s.span_id for s in sink.spans] == [one(1).spans[0].span_id, one(3).spans[0].span_id]
    memory.mib = 101
    proc.check()
    memory.mib = 99
    with pytest.raises(RefusedError, match="over the soft limit"):
        proc.consume(one(4))  # the periodic reading was over the soft limit
    memory.mib = 78
    proc.check()
    memory.mib = 100
    with pytest.raises(RefusedError, match="over the soft limit"):
        proc.consume(one(5))  # at the hard limit
    proc.shutdown()


def test_a_batch_over_the_soft_limit_with_another_in_flight_is_refused() -> None:
    """The lone-batch rule needs nothing else in flight."""
    memory = Memory(78)
    sink = Blocking()
    proc = _limiter(memory, sink)
    first = threading.Thread(target=proc.consume, args=(one(1),))
    first.start()
    assert sink.entered.wait(5)
    memory.mib = 90
    with pytest.raises(RefusedError, match="memory 90 MiB over the soft limit"):
        proc.consume(one(2))
    sink.release.set()
    first.join()
    assert sink.record_count == 1
    proc.shutdown()


def test_retained_after_zero_refuses_until_usage_falls() -> None:
    """retained_after: 0 keeps the Collector's behaviour: refuse while over the soft limit."""
    memory = Memory(85)
    proc = _limiter(memory, RecordingConsumer(), retained_after=0)
    for _ in range(3):
        proc.check()
        assert _refused(proc)
    assert not proc.retained
    assert Config(retained_after=-1).validate() == ["retained_after: must not be negative"]
    proc.shutdown()


@contextmanager
def collections_seen() -> Iterator[list[int]]:
    """The generations of the garbage collections run in the block; automatic ones are off
    meanwhile, so only those asked for are seen."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    was_enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(callback)
    try:
        yield seen
    finally:
        gc.callbacks.remove(callback)
        if was_enabled:
            gc.enable()


def test_the_periodic_check_collects_garbage_while_memory_is_over_the_soft_limit() -> None:
    """Over the soft limit the periodic check collects the young generations (where the
    reference cycles of the latest requests are, which a collector process collects only
    every 10,000 allocations), over the hard limit all of them; under the soft limit nothing,
    and the data path's own readings never collect."""
    memory = Memory(50)
    proc = _limiter(memory, RecordingConsumer())
    with collections_seen() as seen:
        proc.check()
        assert seen == []
        memory.mib = 85
        proc.check(release=False)  # the data path's reading
        assert seen == []
        proc.check()
        assert seen == [1]
        memory.mib = 101
        proc.check()
        assert seen == [1, 2]
    proc.shutdown()


class Blocking(RecordingConsumer):
    """A consumer that blocks until released, to hold a batch in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def consume(self, batch: Batch) -> None:
        """Block (the first time), then record."""
        if not self.entered.is_set():
            self.entered.set()
            self.release.wait(5)
        super().consume(batch)
