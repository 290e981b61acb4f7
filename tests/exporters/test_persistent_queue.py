"""The OTLP exporters' persistent sending queue, in process: kept across restarts, bounded, safe."""

from __future__ import annotations

from pathlib import Path

import pytest
from exporters_support import downstream

from otel_bridge.component import CreateSettings, Host
from otel_bridge.errors import StartupError
from otel_bridge.exporters.otlp import OtlpExporter, grpc_factory, http_factory
from otel_bridge.exporters.otlp.config import (
    GrpcExporterConfig,
    HttpExporterConfig,
    QueueConfig,
    RetryConfig,
)
from otel_bridge.model import Batch
from otel_bridge.testing import free_port, make_log, make_span

FAST_RETRY = RetryConfig(initial_interval=0.05, max_interval=0.1, max_elapsed_time=0)


def exporter(config: GrpcExporterConfig | HttpExporterConfig) -> tuple[OtlpExporter, Host]:
    """A started exporter named ``otlp/q``."""
    settings = CreateSettings(id="otlp/q")
    if isinstance(config, GrpcExporterConfig):
        made = grpc_factory.create(settings, config, None)
    else:
        made = http_factory.create(settings, config, None)
    assert isinstance(made, OtlpExporter)
    host = Host()
    made.start(host)
    return made, host


def counters(host: Host) -> dict[str, int]:
    """The exporter's counters without the ``exporter.otlp/q.`` prefix."""
    prefix = "exporter.otlp/q."
    return {
        k.removeprefix(prefix): v
        for k, v in host.telemetry.counters().items()
        if k.startswith(prefix)
    }


def batch(i: int) -> Batch:
    """Three spans and one log record."""
    return Batch(spans=tuple(make_span(3 * i + k) for k in range(3)), logs=(make_log(i),))


def test_batches_outlive_a_down_backend_and_a_restart(tmp_path: Path) -> None:
    """Backend down: shutdown keeps the batches on disk; the next start delivers every one."""
    queue = QueueConfig(storage=str(tmp_path / "queue"), num_consumers=1)
    down = GrpcExporterConfig(
        endpoint=f"127.0.0.1:{free_port()}",
        retry_on_failure=FAST_RETRY,
        sending_queue=queue,
        shutdown_timeout=0.3,
    )
    first, host = exporter(down)
    for i in range(4):
        first.consume(batch(i))
    first.shutdown()
    assert counters(host) == {"queue_kept_batches": 8, "queued_spans": 12, "queued_log_records": 4}
    with downstream() as (receiver, sink):
        up = GrpcExporterConfig(
            endpoint=f"127.0.0.1:{receiver.grpc_port}",
            retry_on_failure=FAST_RETRY,
            sending_queue=queue,
        )
        second, host = exporter(up)
        assert sink.wait_for(16, timeout=10)
        second.shutdown()
    assert sorted(s.name for s in sink.spans) == sorted(f"span-{n}" for n in range(12))
    assert len(sink.logs) == 4
    assert counters(host) == {
        "queue_replayed_batches": 8,
        "sent_spans": 12,
        "sent_log_records": 4,
    }
    third, host = exporter(up)  # nothing left to replay
    third.shutdown()
    assert counters(host) == {}


def test_full_persistent_queue_drops_and_counts(tmp_path: Path) -> None:
    """``queue_size`` bounds the batches on disk; the batch past it is dropped and counted."""
    config = HttpExporterConfig(
        endpoint=f"http://127.0.0.1:{free_port()}",
        retry_on_failure=FAST_RETRY,
        sending_queue=QueueConfig(storage=str(tmp_path), queue_size=2, num_consumers=1),
        shutdown_timeout=0.2,
        signals=["traces"],
    )
    sender, host = exporter(config)
    for i in range(3):
        sender.consume(batch(i))
    sender.shutdown()
    assert counters(host) == {"dropped_spans": 3, "queue_kept_batches": 2, "queued_spans": 6}


def test_unusable_storage_fails_start_up(tmp_path: Path) -> None:
    """A symlinked storage directory is a start-up error naming the setting, not a crash later."""
    (tmp_path / "link").symlink_to(tmp_path)
    config = GrpcExporterConfig(sending_queue=QueueConfig(storage=str(tmp_path / "link")))
    made = grpc_factory.create(CreateSettings(id="otlp/q"), config, None)
    with pytest.raises(StartupError, match=r"sending_queue\.storage"):
        made.start(Host())
    made.shutdown()


def test_storage_needs_the_queue_enabled() -> None:
    """A persistent queue without the queue is a config problem."""
    config = GrpcExporterConfig(sending_queue=QueueConfig(enabled=False, storage="/tmp/q"))
    assert "sending_queue.storage: a persistent queue needs enabled: true" in config.validate()


def test_torn_tail_is_counted_and_the_rest_delivered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A log ending in half a record (kill -9 mid-write): start-up cuts it, counts it, warns once,
    and delivers the intact batches before it."""
    queue = QueueConfig(storage=str(tmp_path), num_consumers=1)
    down = GrpcExporterConfig(
        endpoint=f"127.0.0.1:{free_port()}",
        retry_on_failure=FAST_RETRY,
        sending_queue=queue,
        shutdown_timeout=0.2,
        signals=["traces"],
    )
    first, _ = exporter(down)
    for i in range(3):
        first.consume(batch(i))
    first.shutdown()
    log = tmp_path / "exporter_otlp_q" / "wal.log"
    with log.open("r+b") as f:
        f.truncate(log.stat().st_size - 5)
    with downstream() as (receiver, sink):
        up = GrpcExporterConfig(
            endpoint=f"127.0.0.1:{receiver.grpc_port}",
            retry_on_failure=FAST_RETRY,
            sending_queue=queue,
            signals=["traces"],
        )
        second, host = exporter(up)
        assert sink.wait_for(6, timeout=10)
        second.shutdown()
    assert sorted(s.name for s in sink.spans) == sorted(f"span-{n}" for n in range(6))
    assert counters(host) == {
        "queue_torn_records": 1,
        "queue_replayed_batches": 2,
        "sent_spans": 6,
    }
    torn = [r.getMessage() for r in caplog.records if "torn record" in r.getMessage()]
    assert len(torn) == 1
