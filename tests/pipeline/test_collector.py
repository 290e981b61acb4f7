"""The pipeline runtime: sharing, routing, fan-out, start/shutdown order, failures, signals."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from otel_bridge.component import (
    EXPORTER,
    PIPELINE,
    PROCESSOR,
    RECEIVER,
    Component,
    Consumer,
    CreateSettings,
    Factory,
    Host,
    require_consumer,
)
from otel_bridge.config import CollectorConfig, parse_config
from otel_bridge.errors import ComponentError, RefusedError, StartupError
from otel_bridge.model import Batch
from otel_bridge.pipeline import Collector, FanOut, select_for_pipeline
from otel_bridge.processors import batch as batch_processor
from otel_bridge.registry import Registry
from otel_bridge.testing import (
    ListReceiver,
    RecordingConsumer,
    double_registry,
    make_log,
    make_span,
)

EVENTS: list[str] = []


@dataclass(slots=True)
class TrackConfig:
    """Config of the tracking components."""

    fail_start: bool = False


class Tracker:
    """A pass-through processor (or sink exporter) that logs its lifecycle to EVENTS."""

    def __init__(self, name: str, config: TrackConfig, nxt: Consumer | None) -> None:
        self.name = name
        self.config = config
        self.next = nxt

    def start(self, host: Host) -> None:
        """Log, and fail when configured to."""
        EVENTS.append(f"start {self.name}")
        if self.config.fail_start:
            raise RuntimeError("boom")

    def shutdown(self) -> None:
        """Log."""
        EVENTS.append(f"shutdown {self.name}")

    def consume(self, batch: Batch) -> None:
        """Pass on."""
        if self.next is not None:
            self.next.consume(batch)


def tracker_factory(kind: str) -> Factory[TrackConfig]:
    """A factory for :class:`Tracker` of ``kind``."""

    def create(settings: CreateSettings, config: TrackConfig, nxt: Consumer | None) -> Component:
        name = f"{settings.pipeline}/{settings.id}" if settings.pipeline else settings.id
        if kind == PROCESSOR:
            require_consumer(nxt, settings.id)
        return Tracker(name, config, nxt)

    return Factory(type_name=f"track_{kind}", kind=kind, default_config=TrackConfig, create=create)


def registry() -> Registry:
    """Doubles, trackers and the real batch processor."""
    return double_registry(
        tracker_factory(PROCESSOR), tracker_factory(EXPORTER), batch_processor.factory
    )


def config(doc: dict[str, Any]) -> CollectorConfig:
    """Parse ``doc`` with the test registry."""
    return parse_config(doc, env={}, registry=registry())


def three_pipelines() -> CollectorConfig:
    """One receiver and one exporter shared by a traces, a logs and an evidence pipeline."""
    return config(
        {
            "receivers": {"list": None},
            "processors": {"batch": {"send_batch_size": 1}},
            "exporters": {"recording": None, "recording/evidence": None},
            "service": {
                "pipelines": {
                    "traces": {
                        "receivers": ["list"],
                        "processors": ["batch"],
                        "exporters": ["recording"],
                    },
                    "logs": {
                        "receivers": ["list"],
                        "processors": ["batch"],
                        "exporters": ["recording"],
                    },
                    "evidence": {"receivers": ["list"], "exporters": ["recording/evidence"]},
                }
            },
        }
    )


def test_shared_receiver_and_exporter_one_processor_per_pipeline() -> None:
    """Receivers and exporters are one instance across pipelines; processors one per pipeline."""
    collector = Collector(three_pipelines())
    assert set(collector.receivers) == {"list"}
    assert set(collector.exporters) == {"recording", "recording/evidence"}
    traces_batch = collector.processors("traces")
    logs_batch = collector.processors("logs")
    assert len(traces_batch) == len(logs_batch) == 1
    assert traces_batch[0] is not logs_batch[0]
    assert collector.component("list") is collector.receivers["list"]
    with pytest.raises(KeyError, match="running: list, recording"):
        collector.component("batch")
    collector.shutdown()


def test_routing_by_pipeline_type() -> None:
    """Traces pipelines get only spans, logs pipelines only logs, evidence everything."""
    collector = Collector(three_pipelines())
    collector.start()
    receiver = collector.component("list")
    assert isinstance(receiver, ListReceiver)
    spans = (make_span(1), make_span(2))
    logs = (make_log(1),)
    receiver.emit(Batch(spans=spans, logs=logs))
    receiver.emit(Batch(logs=(make_log(2),)))
    collector.shutdown()
    shared = collector.component("recording")
    evidence = collector.component("recording/evidence")
    assert isinstance(shared, RecordingConsumer)
    assert isinstance(evidence, RecordingConsumer)
    assert sorted(s.name for s in shared.spans) == ["span-1", "span-2"]
    assert sorted(str(r.body) for r in shared.logs) == ["log-1", "log-2"]
    assert all(not b.spans or not b.logs for b in shared.batches)
    assert evidence.batches == [Batch(spans=spans, logs=logs), Batch(logs=(make_log(2),))]
    telemetry = collector.host.telemetry
    assert telemetry.value("routed", kind=RECEIVER, id="list", label="spans") == 2
    assert telemetry.by_label("routed", kind=RECEIVER, id="list") == {"spans": 2, "logs": 2}
    assert telemetry.counters()["receiver.list.routed.spans"] == 2
    assert telemetry.undeclared() == {}


def test_select_for_pipeline() -> None:
    """select_for_pipeline keeps the carried part and returns the batch itself when whole."""
    only_spans = Batch(spans=(make_span(),))
    mixed = Batch(spans=(make_span(),), logs=(make_log(),))
    assert select_for_pipeline(only_spans, "traces") is only_spans
    assert select_for_pipeline(mixed, "traces") == only_spans
    assert select_for_pipeline(mixed, "logs") == Batch(logs=mixed.logs)
    assert select_for_pipeline(mixed, "evidence") is mixed
    assert len(select_for_pipeline(only_spans, "logs")) == 0


def test_fanout_failure_does_not_stop_other_exporters() -> None:
    """An exporter that raises is counted; the other exporters still get the batch."""
    host = Host()
    good, bad = RecordingConsumer(), RecordingConsumer(error=OSError("disk full"))
    fan = FanOut([("bad", bad), ("good", good)], kind=EXPORTER, host=host)
    batch = Batch(spans=(make_span(),))
    fan.consume(batch)
    fan.consume(batch)
    assert good.batches == [batch, batch]
    assert host.telemetry.value("failed", kind=EXPORTER, id="bad") == 2
    assert host.telemetry.value("sent", kind=EXPORTER, id="good") == 2
    assert host.telemetry.counters()["exporter.good.sent"] == 2


def test_fanout_raises_when_every_consumer_fails() -> None:
    """When every consumer fails the caller sees an error naming each one."""
    fan = FanOut(
        [
            ("a", RecordingConsumer(error=OSError("x"))),
            ("b", RecordingConsumer(error=OSError("y"))),
        ],
        kind=EXPORTER,
        host=Host(),
    )
    with pytest.raises(ComponentError, match=r"every consumer failed: a: x; b: y"):
        fan.consume(Batch(spans=(make_span(),)))


def test_fanout_propagates_refusal_after_delivering() -> None:
    """A refusal (retryable) reaches the caller, after the others got the batch."""
    good = RecordingConsumer()
    fan = FanOut(
        [("full", RecordingConsumer(error=RefusedError("over limit"))), ("good", good)],
        kind=EXPORTER,
        host=Host(),
    )
    with pytest.raises(RefusedError, match="over limit"):
        fan.consume(Batch(spans=(make_span(),)))
    assert len(good.batches) == 1


def test_single_consumer_error_propagates() -> None:
    """With one consumer its error reaches the caller unchanged and is counted."""
    host = Host()
    fan = FanOut([("a", RecordingConsumer(error=OSError("x")))], kind=PIPELINE, host=host)
    with pytest.raises(OSError, match="x"):
        fan.consume(Batch(spans=(make_span(),)))
    assert host.telemetry.value("failed", kind=PIPELINE, id="a") == 1


def tracked(fail: str = "") -> CollectorConfig:
    """Two pipelines of trackers; ``fail`` names the component whose start fails."""

    def body(cid: str) -> dict[str, Any]:
        return {"fail_start": cid == fail}

    return config(
        {
            "receivers": {"list": {"fail_start": "no port" if fail == "list" else ""}},
            "processors": {"track_processor/a": body("a"), "track_processor/b": body("b")},
            "exporters": {"track_exporter": body("exp"), "recording": None},
            "service": {
                "pipelines": {
                    "traces": {
                        "receivers": ["list"],
                        "processors": ["track_processor/a", "track_processor/b"],
                        "exporters": ["track_exporter", "recording"],
                    },
                }
            },
        }
    )


def test_start_and_shutdown_order() -> None:
    """Exporters start first, then processors downstream-first; shutdown is the reverse."""
    EVENTS.clear()
    collector = Collector(tracked())
    collector.start()
    assert EVENTS == [
        "start track_exporter",
        "start traces/track_processor/b",
        "start traces/track_processor/a",
    ]
    receiver = collector.component("list")
    assert isinstance(receiver, ListReceiver)
    assert receiver.started
    EVENTS.clear()
    collector.shutdown()
    assert EVENTS == [
        "shutdown traces/track_processor/a",
        "shutdown traces/track_processor/b",
        "shutdown track_exporter",
    ]
    assert receiver.shutdown_count == 1
    EVENTS.clear()
    collector.shutdown()
    assert EVENTS == []
    assert receiver.shutdown_count == 1


def test_startup_failure_shuts_down_what_started() -> None:
    """A failing start raises StartupError naming the component; started ones shut down."""
    EVENTS.clear()
    collector = Collector(tracked(fail="b"))
    with pytest.raises(StartupError, match=r"processor traces/track_processor/b: boom"):
        collector.start()
    assert EVENTS[:2] == ["start track_exporter", "start traces/track_processor/b"]
    assert "start traces/track_processor/a" not in EVENTS
    assert EVENTS.index("shutdown track_exporter") > EVENTS.index("start traces/track_processor/b")
    receiver = collector.component("list")
    assert isinstance(receiver, ListReceiver)
    assert not receiver.started
    recording = collector.component("recording")
    assert isinstance(recording, RecordingConsumer)
    assert recording.shutdown_count == 1
    collector.shutdown()
    assert recording.shutdown_count == 1


def test_receiver_startup_failure() -> None:
    """A receiver that cannot start aborts start-up after exporters and processors ran."""
    EVENTS.clear()
    collector = Collector(tracked(fail="list"))
    with pytest.raises(StartupError, match="receiver list: no port"):
        collector.start()
    assert EVENTS[-3:] == [
        "shutdown traces/track_processor/a",
        "shutdown traces/track_processor/b",
        "shutdown track_exporter",
    ]


def test_start_twice_is_an_error_and_shutdown_before_start_is_safe() -> None:
    """start() runs once; shutdown() before start is a no-op that still releases."""
    collector = Collector(tracked())
    collector.shutdown()
    with pytest.raises(ComponentError, match="shut down"):
        collector.start()
    other = Collector(tracked())
    other.start()
    with pytest.raises(ComponentError, match="running"):
        other.start()
    other.shutdown()


def test_create_failure_names_the_component() -> None:
    """A factory that raises at create time is reported as a ComponentError with the id."""

    def create(settings: CreateSettings, cfg: TrackConfig, nxt: Consumer | None) -> Component:
        raise ValueError("bad regex")

    reg = double_registry(
        Factory(type_name="broken", kind=EXPORTER, default_config=TrackConfig, create=create)
    )
    cfg = parse_config(
        {
            "receivers": {"list": None},
            "exporters": {"broken": None},
            "service": {"pipelines": {"logs": {"receivers": ["list"], "exporters": ["broken"]}}},
        },
        env={},
        registry=reg,
    )
    with pytest.raises(ComponentError, match="exporter broken: create failed: bad regex"):
        Collector(cfg)


def test_shutdown_drains_batch_processor() -> None:
    """Everything a receiver handed over is exported at shutdown, even still batched."""
    cfg = config(
        {
            "receivers": {"list": None},
            "processors": {"batch": {"send_batch_size": 1000, "timeout": "1h"}},
            "exporters": {"recording": None},
            "service": {
                "pipelines": {
                    "evidence": {
                        "receivers": ["list"],
                        "processors": ["batch"],
                        "exporters": ["recording"],
                    }
                }
            },
        }
    )
    collector = Collector(cfg)
    collector.start()
    receiver = collector.component("list")
    assert isinstance(receiver, ListReceiver)
    for i in range(50):
        receiver.emit(Batch(spans=(make_span(i),)))
    sink = collector.component("recording")
    assert isinstance(sink, RecordingConsumer)
    assert sink.record_count == 0
    collector.shutdown()
    assert sorted(s.name for s in sink.spans) == sorted(f"span-{i}" for i in range(50))


def test_run_until_signal_drains_on_sigterm() -> None:
    """SIGTERM stops run_until_signal, which drains and restores the previous handler."""
    previous = signal.getsignal(signal.SIGTERM)
    collector = Collector(tracked())
    ticks: list[int] = []
    started = threading.Event()

    def kill_soon() -> None:
        started.wait(5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=kill_soon, daemon=True).start()
    got = collector.run_until_signal(
        on_started=started.set, on_tick=lambda: ticks.append(1), tick_interval=0.01
    )
    assert got == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == previous
    receiver = collector.component("list")
    assert isinstance(receiver, ListReceiver)
    assert receiver.shutdown_count == 1


def test_request_stop_from_another_thread() -> None:
    """request_stop() ends run_until_signal, which returns None."""
    collector = Collector(tracked())
    timer = threading.Timer(0.05, collector.request_stop)
    timer.start()
    assert collector.run_until_signal(tick_interval=0.01) is None
    timer.join()
    recording = collector.component("recording")
    assert isinstance(recording, RecordingConsumer)
    assert (recording.start_count, recording.shutdown_count) == (1, 1)


def test_concurrent_receivers_lose_nothing() -> None:
    """Several threads emitting through a shared pipeline deliver every record exactly once."""
    cfg = config(
        {
            "receivers": {"list": None, "list/2": None},
            "processors": {"batch": {"send_batch_size": 7, "timeout": "5ms"}},
            "exporters": {"recording": None},
            "service": {
                "pipelines": {
                    "traces": {
                        "receivers": ["list", "list/2"],
                        "processors": ["batch"],
                        "exporters": ["recording"],
                    }
                }
            },
        }
    )
    collector = Collector(cfg)
    collector.start()
    receivers = [collector.component("list"), collector.component("list/2")]

    def emit(worker: int) -> None:
        receiver = receivers[worker % 2]
        assert isinstance(receiver, ListReceiver)
        for i in range(200):
            receiver.emit(Batch(spans=(make_span(worker * 1000 + i),)))

    threads = [threading.Thread(target=emit, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    collector.shutdown()
    sink = collector.component("recording")
    assert isinstance(sink, RecordingConsumer)
    names = [s.name for s in sink.spans]
    assert len(names) == 800
    assert len(set(names)) == 800
