"""The ``batch`` processor: size and timeout triggers, splitting, flush on shutdown, threads."""

from __future__ import annotations

import threading
import time

from hypothesis import given
from hypothesis import strategies as st

from otel_bridge.component import CreateSettings, Host, Telemetry
from otel_bridge.model import Batch
from otel_bridge.processors.batch import BatchProcessor, Config, factory, split_batch
from otel_bridge.testing import RecordingConsumer, make_log, make_span


def make(config: Config, sink: RecordingConsumer) -> BatchProcessor:
    """A started batch processor writing to ``sink``."""
    proc = factory.create(CreateSettings(id="batch", pipeline="traces"), config, sink)
    assert isinstance(proc, BatchProcessor)
    proc.start(Host())
    return proc


def spans(n: int, offset: int = 0) -> Batch:
    """A batch of ``n`` spans."""
    return Batch(spans=tuple(make_span(offset + i) for i in range(n)))


def test_sends_when_size_reached() -> None:
    """Buffered records go out as one batch once send_batch_size is reached."""
    sink = RecordingConsumer()
    proc = make(Config(send_batch_size=5, timeout=60), sink)
    for i in range(4):
        proc.consume(spans(1, i))
    assert sink.batches == []
    proc.consume(spans(1, 4))
    assert [len(b) for b in sink.batches] == [5]
    assert [s.name for s in sink.spans] == [f"span-{i}" for i in range(5)]
    proc.shutdown()


def test_sends_after_timeout() -> None:
    """A partial buffer is sent once timeout has passed since its first record."""
    sink = RecordingConsumer()
    proc = make(Config(send_batch_size=1000, timeout=0.05), sink)
    start = time.monotonic()
    proc.consume(spans(3))
    assert sink.wait_for(3, timeout=2)
    assert time.monotonic() - start >= 0.04
    proc.shutdown()
    assert len(sink.batches) == 1


def test_flush_on_shutdown_and_passthrough_after() -> None:
    """shutdown sends what is buffered; later batches pass straight through."""
    sink = RecordingConsumer()
    proc = make(Config(send_batch_size=1000, timeout=3600), sink)
    proc.consume(spans(2))
    proc.consume(Batch(logs=(make_log(),)))
    proc.shutdown()
    assert len(sink.batches) == 1
    assert sink.batches[0].logs == (make_log(),)
    proc.shutdown()
    proc.consume(spans(1, 9))
    assert sink.record_count == 4


def test_shutdown_before_start_is_safe() -> None:
    """A never-started processor shuts down cleanly, twice."""
    proc = BatchProcessor(Config(), RecordingConsumer(), name="b", telemetry=Telemetry())
    proc.shutdown()
    proc.shutdown()


def test_split_to_max_size() -> None:
    """With send_batch_max_size, large batches are cut into bounded pieces."""
    sink = RecordingConsumer()
    proc = make(Config(send_batch_size=3, send_batch_max_size=4, timeout=60), sink)
    proc.consume(spans(10))
    assert [len(b) for b in sink.batches] == [4, 4, 2]
    proc.shutdown()


def test_downstream_error_is_counted_not_raised() -> None:
    """A failing downstream is counted in the telemetry; consume does not raise."""
    telemetry = Telemetry()
    sink = RecordingConsumer(error=OSError("gone"))
    proc = factory.create(
        CreateSettings(id="batch", telemetry=telemetry), Config(send_batch_size=1), sink
    )
    proc.start(Host(telemetry=telemetry))
    assert isinstance(proc, BatchProcessor)
    proc.consume(spans(2))
    proc.shutdown()
    assert telemetry.counters()["processor.batch.send_failed"] == 2


def test_concurrent_consume_keeps_every_record() -> None:
    """Many threads consuming at once lose and duplicate nothing."""
    sink = RecordingConsumer()
    proc = make(Config(send_batch_size=13, timeout=0.002), sink)

    def worker(w: int) -> None:
        for i in range(300):
            proc.consume(spans(1, w * 10_000 + i))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    proc.shutdown()
    names = [s.name for s in sink.spans]
    assert len(names) == 1200
    assert len(set(names)) == 1200


@given(
    st.integers(0, 6),
    st.integers(0, 6),
    st.integers(0, 6),
    st.integers(1, 5),
)
def test_split_batch_preserves_records(n_spans: int, n_logs: int, n_obs: int, size: int) -> None:
    """split_batch keeps every record in order and bounds each piece."""
    batch = Batch(
        spans=tuple(make_span(i) for i in range(n_spans)),
        logs=tuple(make_log(i) for i in range(n_logs + n_obs)),
    )
    pieces = split_batch(batch, size)
    assert Batch.concat(pieces) == batch
    assert all(0 < len(p) <= size for p in pieces) or len(batch) == 0
