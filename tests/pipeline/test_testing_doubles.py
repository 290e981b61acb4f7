"""The shipped test doubles (``otel_bridge.testing``) and the ``run`` helpers, as documented."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from waiting import poll

from otel_bridge.commands.run import describe_endpoints, progress_line
from otel_bridge.component import CreateSettings, Host
from otel_bridge.config import parse_config
from otel_bridge.errors import StartupError
from otel_bridge.exporters import file as file_exporter
from otel_bridge.exporters import otlp as otlp_exporter
from otel_bridge.model import Batch
from otel_bridge.pipeline import Collector
from otel_bridge.testing import (
    ListReceiver,
    RecordingConsumer,
    double_registry,
    list_receiver_factory,
    make_log,
    make_span,
    recording_exporter_factory,
)


def test_recording_consumer_records_in_order() -> None:
    """Batches are kept in arrival order and flattened per part."""
    sink = RecordingConsumer()
    a = Batch(spans=(make_span(1),), logs=(make_log(1),))
    b = Batch(spans=(make_span(2),))
    sink.consume(a)
    sink.consume(b)
    assert sink.batches == [a, b]
    assert [s.name for s in sink.spans] == ["span-1", "span-2"]
    assert sink.logs == [make_log(1)]
    assert sink.observations == []
    assert sink.coverage == []
    assert sink.record_count == 3
    sink.clear()
    assert sink.batches == []


def test_recording_consumer_error_does_not_record() -> None:
    """With error set, consume raises it and records nothing."""
    sink = RecordingConsumer(error=ValueError("nope"))
    with pytest.raises(ValueError, match="nope"):
        sink.consume(Batch(spans=(make_span(),)))
    assert sink.record_count == 0


def test_wait_for_wakes_on_delivery_and_times_out() -> None:
    """wait_for returns True once enough records arrive from another thread, False on timeout."""
    sink = RecordingConsumer()
    timer = threading.Timer(0.02, sink.consume, args=(Batch(spans=(make_span(),)),))
    timer.start()
    assert sink.wait_for(1, timeout=5)
    timer.join()
    assert not sink.wait_for(2, timeout=0.01)


def test_recording_consumer_lifecycle_counts() -> None:
    """start and shutdown calls are counted and the host remembered."""
    sink = RecordingConsumer()
    host = Host()
    sink.start(host)
    sink.shutdown()
    sink.shutdown()
    assert (sink.start_count, sink.shutdown_count) == (1, 2)
    assert sink.host is host


def test_list_receiver_emits_pending_and_single() -> None:
    """emit() sends pending batches once; emit(batch) sends just that one."""
    sink = RecordingConsumer()
    first = Batch(spans=(make_span(1),))
    receiver = ListReceiver(sink, [first])
    receiver.start(Host())
    assert receiver.emit() == 1
    assert receiver.emit() == 0
    receiver.add(Batch(logs=(make_log(),)))
    assert receiver.emit() == 1
    assert receiver.emit(Batch(spans=(make_span(3),))) == 1
    assert sink.record_count == 3
    receiver.shutdown()
    assert not receiver.started


def test_list_receiver_emit_on_start_and_fail_start() -> None:
    """emit_on_start sends at start; fail_start raises StartupError."""
    sink = RecordingConsumer()
    ListReceiver(sink, [Batch(spans=(make_span(),))], emit_on_start=True).start(Host())
    assert sink.record_count == 1
    with pytest.raises(StartupError, match="port taken"):
        ListReceiver(sink, fail_start="port taken").start(Host())


def test_list_receiver_propagates_consumer_errors() -> None:
    """A consumer error reaches the caller of emit, as a client would see it."""
    receiver = ListReceiver(RecordingConsumer(error=OSError("full")))
    with pytest.raises(OSError, match="full"):
        receiver.emit(Batch(spans=(make_span(),)))


def test_double_factories() -> None:
    """The double factories build working components with the requested signals."""
    receivers = list_receiver_factory(
        "r", [Batch(spans=(make_span(),))], signals=frozenset({"logs"})
    )
    assert receivers.signals == frozenset({"logs"})
    sink = RecordingConsumer()
    receiver = receivers.create(CreateSettings(id="r"), receivers.default_config(), sink)
    assert isinstance(receiver, ListReceiver)
    assert receiver.emit() == 1
    exporters = recording_exporter_factory("e")
    exporter = exporters.create(CreateSettings(id="e"), exporters.default_config(), None)
    assert isinstance(exporter, RecordingConsumer)
    failing_config = exporters.default_config()
    failing_config.fail_start = "no disk"
    failing = exporters.create(CreateSettings(id="e"), failing_config, None)
    with pytest.raises(StartupError, match="no disk"):
        failing.start(Host())
    reg = double_registry()
    assert set(reg.receivers) == {"list", "logsonly", "spansonly"}
    assert set(reg.exporters) == {"recording"}


def test_make_span_and_log_are_distinct_and_valid() -> None:
    """make_span/make_log give distinct, non-zero ids and accept overrides."""
    a, b = make_span(0), make_span(1)
    assert a.trace_id != b.trace_id
    assert a.trace_id != bytes(16)
    assert a.span_id != bytes(8)
    assert make_span(2, name="x").name == "x"
    assert make_log(1).body == "log-1"
    assert make_log(1, body=None).body is None


def test_progress_line_and_endpoints(tmp_path: Path) -> None:
    """The run helpers describe receivers and exporters and count what flowed."""
    out = tmp_path / "o.jsonl"
    config = parse_config(
        {
            "receivers": {"list": None},
            "exporters": {"file": {"path": str(out)}, "recording": None},
            "service": {
                "pipelines": {
                    "evidence": {"receivers": ["list"], "exporters": ["file", "recording"]}
                }
            },
        },
        env={},
        registry=double_registry(file_exporter.factory),
    )
    collector = Collector(config)
    collector.start()
    receiver = collector.component("list")
    assert isinstance(receiver, ListReceiver)
    receiver.emit(Batch(spans=(make_span(1), make_span(2)), logs=(make_log(),)))
    lines = list(describe_endpoints(collector))
    assert lines == ["receiver list: started", f"exporter file: {out}", "exporter recording"]
    line = progress_line(collector)
    assert "received 2 spans, 1 log records, 0 OS events | refused 0 | rejected 0" in line
    assert "exported" not in line  # records of every kind, once per exporter: meant nothing
    assert "| exporter errors 0" in line  # records an exporter raised on
    collector.shutdown()


def test_progress_line_says_what_never_reached_a_down_destination() -> None:
    """An exporter that queues accepts records before delivering them: the line says how many
    the destination got, and how many it never got, per exporter."""
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = parse_config(
        {
            "receivers": {"list": None},
            "exporters": {
                "otlphttp": {
                    "endpoint": f"http://127.0.0.1:{port}",
                    "retry_on_failure": {"enabled": False},
                }
            },
            "service": {
                "pipelines": {"traces": {"receivers": ["list"], "exporters": ["otlphttp"]}}
            },
        },
        env={},
        registry=double_registry(*otlp_exporter.factories),
    )
    collector = Collector(config)
    collector.start()
    try:
        receiver = collector.component("list")
        assert isinstance(receiver, ListReceiver)
        receiver.emit(Batch(spans=(make_span(1), make_span(2))))
        line = poll(
            lambda: progress_line(collector),
            lambda text: "failed 2" in text,
            30,
        )
        assert line.endswith("| otlphttp: delivered 0 spans, 0 log records, failed 2, dropped 0")
    finally:
        collector.shutdown()


def test_progress_line_says_how_many_copies_an_exporter_did_not_apply_again(
    tmp_path: Path,
) -> None:
    """A batch sent again after a restart (an agent's resend after a kill) is not written twice
    by the ``file`` exporter (``append: true``); the operator sees how many copies it dropped."""
    out = tmp_path / "o.jsonl"

    def collector() -> Collector:
        config = parse_config(
            {
                "receivers": {"list": None},
                "exporters": {"file": {"path": str(out), "append": True}},
                "service": {
                    "pipelines": {"evidence": {"receivers": ["list"], "exporters": ["file"]}}
                },
            },
            env={},
            registry=double_registry(file_exporter.factory),
        )
        return Collector(config)

    batch = Batch(spans=(make_span(1), make_span(2)))
    for attempt in range(2):
        running = collector()
        running.start()
        receiver = running.component("list")
        assert isinstance(receiver, ListReceiver)
        receiver.emit(batch)
        line = progress_line(running)
        running.shutdown()
        if attempt == 0:
            assert "copies not applied again" not in line
    assert line.endswith("| copies not applied again (file 2 lines)")
    assert len(out.read_text().splitlines()) == 2
