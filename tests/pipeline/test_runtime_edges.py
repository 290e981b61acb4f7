"""Runtime edge cases with real parts: OTLP in, file out, failing exporters, shutdown, signals."""

from __future__ import annotations

import json
import os
import signal
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.component import (
    COLLECTOR,
    EXPORTER,
    RECEIVER,
    Component,
    Consumer,
    CreateSettings,
    Factory,
    Host,
)
from otel_bridge.config import CollectorConfig, parse_config
from otel_bridge.errors import ComponentError, RefusedError
from otel_bridge.exporters import file as file_exporter
from otel_bridge.model import Batch
from otel_bridge.otlp import json_codec
from otel_bridge.pipeline import Collector, FanOut
from otel_bridge.processors import batch as batch_processor
from otel_bridge.receivers import otlp as otlp_receiver
from otel_bridge.receivers.otlp import OtlpReceiver
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
class BrokenConfig:
    """Config of the ``broken`` exporter."""

    consume_error: str = "disk on fire"
    shutdown_error: str = ""


class Broken:
    """An exporter whose consume (and optionally shutdown) raises; it logs its lifecycle."""

    def __init__(self, config: BrokenConfig) -> None:
        self.config = config
        self.calls = 0

    def start(self, host: Host) -> None:
        """Log."""
        del host
        EVENTS.append("start broken")

    def shutdown(self) -> None:
        """Log, then raise when configured to."""
        EVENTS.append("shutdown broken")
        if self.config.shutdown_error:
            raise RuntimeError(self.config.shutdown_error)

    def consume(self, batch: Batch) -> None:
        """Always fail."""
        del batch
        self.calls += 1
        raise OSError(self.config.consume_error)


def _create_broken(
    settings: CreateSettings, config: BrokenConfig, nxt: Consumer | None
) -> Component:
    del settings, nxt
    return Broken(config)


BROKEN = Factory(
    type_name="broken", kind=EXPORTER, default_config=BrokenConfig, create=_create_broken
)


def registry() -> Registry:
    """Doubles plus the real otlp receiver, batch processor, file exporter and ``broken``."""
    return double_registry(
        otlp_receiver.factory, batch_processor.factory, file_exporter.factory, BROKEN
    )


def otlp_config(tmp_path: Path, *, exporters: list[str], batch: bool = False) -> CollectorConfig:
    """OTLP/HTTP on port 0 into ``exporters`` (file writes to tmp_path/out.jsonl)."""
    doc: dict[str, Any] = {
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": "127.0.0.1:0"}}}},
        "processors": {"batch": {"timeout": "30s", "send_batch_size": 10_000}},
        "exporters": {
            "file": {"path": str(tmp_path / "out.jsonl"), "flush_interval": 0},
            "broken": None,
            "broken/quiet": {"shutdown_error": "stuck"},
            "recording": None,
        },
        "service": {
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"] if batch else [],
                    "exporters": exporters,
                }
            }
        },
    }
    return parse_config(doc, env={}, registry=registry())


def post_spans(collector: Collector, n: int) -> tuple[int, bytes]:
    """POST ``n`` spans as OTLP/JSON to the collector's otlp receiver."""
    receiver = collector.component("otlp")
    assert isinstance(receiver, OtlpReceiver)
    body = json.dumps(json_codec.encode_traces([make_span(i) for i in range(n)])).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{receiver.http_port}/v1/traces",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def file_lines(tmp_path: Path) -> list[dict[str, Any]]:
    """The JSON lines the file exporter wrote."""
    text = (tmp_path / "out.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line]


def test_failing_exporter_does_not_stop_file_exporter_or_the_client(tmp_path: Path) -> None:
    """With one exporter raising, the client still gets 200 and the file gets every span."""
    collector = Collector(otlp_config(tmp_path, exporters=["broken", "file"]))
    collector.start()
    try:
        assert post_spans(collector, 3)[0] == 200
        assert post_spans(collector, 2)[0] == 200
    finally:
        collector.shutdown()
    assert len(file_lines(tmp_path)) == 5
    telemetry = collector.host.telemetry
    assert telemetry.value("failed", kind=EXPORTER, id="broken") == 5
    assert telemetry.value("sent", kind=EXPORTER, id="file") == 5
    assert telemetry.value("routed", kind=RECEIVER, id="otlp", label="spans") == 5
    broken = collector.component("broken")
    assert isinstance(broken, Broken)
    assert broken.calls == 2


def test_every_exporter_failing_is_a_permanent_400(tmp_path: Path) -> None:
    """When all exporters raise (not a refusal), the client is told not to retry; counted."""
    collector = Collector(otlp_config(tmp_path, exporters=["broken", "broken/quiet"]))
    collector.start()
    try:
        status, _ = post_spans(collector, 2)
    finally:
        collector.shutdown()
    assert status == 400
    telemetry = collector.host.telemetry
    assert telemetry.value("rejected", kind=RECEIVER, id="otlp") == 2
    assert telemetry.value("spans_rejected", kind=RECEIVER, id="otlp") == 2
    assert telemetry.total("spans_refused", kind=RECEIVER, type="otlp") == 0


def test_shutdown_error_is_counted_and_the_rest_still_shut_down(tmp_path: Path) -> None:
    """An exporter raising in shutdown is counted; the file exporter still flushes and closes."""
    EVENTS.clear()
    collector = Collector(otlp_config(tmp_path, exporters=["broken/quiet", "file"], batch=True))
    collector.start()
    assert post_spans(collector, 4)[0] == 200
    assert not (tmp_path / "out.jsonl").read_text()  # held by the batch processor
    collector.shutdown()
    collector.shutdown()  # idempotent
    assert len(file_lines(tmp_path)) == 4
    assert collector.host.telemetry.value("shutdown_errors", kind=COLLECTOR, id="service") == 1
    assert collector.host.telemetry.counters()["collector.service.shutdown_errors"] == 1
    assert EVENTS == ["start broken", "shutdown broken"]


def test_receiver_is_closed_before_exporters_shut_down(tmp_path: Path) -> None:
    """After shutdown the OTLP port refuses connections: receivers stop before the drain ends."""
    collector = Collector(otlp_config(tmp_path, exporters=["file"]))
    collector.start()
    receiver = collector.component("otlp")
    assert isinstance(receiver, OtlpReceiver)
    port = receiver.http_port
    collector.shutdown()
    with pytest.raises(urllib.error.URLError, match="refused"):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/traces", data=b"{}", timeout=2)


def test_sigint_drains_batched_otlp_data_to_file(tmp_path: Path) -> None:
    """SIGINT in run_until_signal drains the batch processor to the file and restores handlers."""
    collector = Collector(otlp_config(tmp_path, exporters=["file"], batch=True))
    before = signal.getsignal(signal.SIGINT)

    def started() -> None:
        assert post_spans(collector, 6)[0] == 200
        threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()

    got = collector.run_until_signal(on_started=started, tick_interval=0.02)
    assert got == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is before
    assert len(file_lines(tmp_path)) == 6


def test_on_tick_runs_while_running() -> None:
    """on_tick is called repeatedly until request_stop ends the run, which returns None."""
    doc = {
        "receivers": {"list": None},
        "exporters": {"recording": None},
        "service": {"pipelines": {"logs": {"receivers": ["list"], "exporters": ["recording"]}}},
    }
    collector = Collector(parse_config(doc, env={}, registry=registry()))
    ticks: list[int] = []

    def tick() -> None:
        ticks.append(1)
        if len(ticks) == 3:
            collector.request_stop()

    assert collector.run_until_signal(on_tick=tick, tick_interval=0.01) is None
    assert len(ticks) == 3
    receiver = collector.component("list")
    assert isinstance(receiver, ListReceiver)
    assert receiver.shutdown_count == 1


def test_router_counts_each_part_and_skips_pipelines_without_data() -> None:
    """A logs-only batch reaches only the logs pipeline; the router counts spans and logs apart."""
    doc = {
        "receivers": {"list": None},
        "exporters": {"recording": None, "recording/t": None},
        "service": {
            "pipelines": {
                "logs": {"receivers": ["list"], "exporters": ["recording"]},
                "traces": {"receivers": ["list"], "exporters": ["recording/t"]},
            }
        },
    }
    collector = Collector(parse_config(doc, env={}, registry=registry()))
    collector.start()
    try:
        receiver = collector.component("list")
        assert isinstance(receiver, ListReceiver)
        receiver.emit(Batch(logs=(make_log(1), make_log(2))))
        receiver.emit(Batch(spans=(make_span(1),), logs=(make_log(3),)))
    finally:
        collector.shutdown()
    logs_sink = collector.component("recording")
    traces_sink = collector.component("recording/t")
    assert isinstance(logs_sink, RecordingConsumer)
    assert isinstance(traces_sink, RecordingConsumer)
    assert [len(b.logs) for b in logs_sink.batches] == [2, 1]
    assert all(not b.spans for b in logs_sink.batches)
    assert [len(b.spans) for b in traces_sink.batches] == [1]
    assert all(not b.logs for b in traces_sink.batches)
    routed = collector.host.telemetry.by_label("routed", kind=RECEIVER, id="list")
    assert routed == {"logs": 3, "spans": 1}


def test_fanout_counts_sent_and_failed_per_consumer() -> None:
    """FanOut counts records sent and failed per consumer and reports a failure once."""
    host = Host()
    good, bad = RecordingConsumer(), RecordingConsumer(error=ValueError("nope"))
    fan = FanOut([("good", good), ("bad", bad)], kind=EXPORTER, host=host)
    fan.consume(Batch(spans=(make_span(1), make_span(2))))
    fan.consume(Batch(logs=(make_log(1),)))
    counters = host.telemetry.counters()
    assert counters["exporter.good.sent"] == 3
    assert counters["exporter.bad.failed"] == 3
    assert "exporter.bad.sent" not in counters
    assert len(good.batches) == 2


def test_fanout_refusal_wins_over_other_errors() -> None:
    """With one consumer refusing and one crashing, the refusal (retryable) is what propagates."""
    host = Host()
    refusing = RecordingConsumer(error=RefusedError("memory"))
    crashing = RecordingConsumer(error=ValueError("bug"))
    fan = FanOut([("a", crashing), ("b", refusing)], kind=EXPORTER, host=host)
    with pytest.raises(RefusedError, match="memory"):
        fan.consume(Batch(spans=(make_span(1),)))


def test_fanout_all_failing_names_every_consumer() -> None:
    """When every consumer fails, the ComponentError lists each one with its error."""
    fan = FanOut(
        [
            ("a", RecordingConsumer(error=ValueError("x"))),
            ("b", RecordingConsumer(error=OSError("y"))),
        ],
        kind=EXPORTER,
        host=Host(),
    )
    with pytest.raises(ComponentError, match=r"every consumer failed: a: x; b: y"):
        fan.consume(Batch(spans=(make_span(1),)))


def test_component_lookup_names_what_runs() -> None:
    """Asking for a component that does not run raises KeyError listing the running ones."""
    doc = {
        "receivers": {"list": None},
        "exporters": {"recording": None},
        "service": {"pipelines": {"logs": {"receivers": ["list"], "exporters": ["recording"]}}},
    }
    collector = Collector(parse_config(doc, env={}, registry=registry()))
    with pytest.raises(KeyError, match=r"running: list, recording"):
        collector.component("otlp")
    collector.shutdown()
