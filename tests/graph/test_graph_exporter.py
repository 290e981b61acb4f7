"""The graph exporter: consumes batches, writes graph.json atomically (0600), periodically."""

from __future__ import annotations

import gc
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from graph_helpers import obs
from graph_scenario import scenario_batches
from waiting import wait_until

from otel_bridge.component import CreateSettings, Host
from otel_bridge.errors import StartupError
from otel_bridge.exporters.graph import GraphExporter, GraphExporterConfig, factory
from otel_bridge.graph import load
from otel_bridge.model import Batch, Channel, CoverageRecord, Source


def _exporter(tmp_path: Path, **kwargs: Any) -> GraphExporter:
    config = GraphExporterConfig(output=str(tmp_path / "out" / "graph.json"), **kwargs)
    exporter = factory.create(CreateSettings(id="graph"), config, None)
    assert isinstance(exporter, GraphExporter)
    return exporter


def test_writes_at_shutdown_with_mode_0600(tmp_path: Path) -> None:
    """At shutdown graph.json holds every observation and coverage record; the file is 0600."""
    exporter = _exporter(tmp_path, flush_interval=0, run={"id": "r"})
    exporter.start(Host())
    exporter.consume(Batch(observations=(obs("a"), obs("b"))))
    source = Source(channel=Channel.OS, backend="linux", record_id="c")
    exporter.consume(Batch(coverage=(CoverageRecord(source=source, reason="gap"),)))
    exporter.shutdown()
    exporter.shutdown()
    path = tmp_path / "out" / "graph.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    graph = load(path)
    assert graph.run == {"id": "r"}
    assert graph.edges[0].evidence_count == 2
    assert graph.edges[0].support == ("a#0", "b#0")
    assert graph.summary["coverage"] == {"gap": 1}
    assert not list(path.parent.glob(".*.tmp"))


def test_flush_pauses_the_cyclic_collector_for_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot is taken with the cyclic garbage collector paused; a flush leaves it
    running when it ran, and paused when the caller had paused it."""
    exporter = _exporter(tmp_path, flush_interval=0)
    exporter.start(Host())
    exporter.consume(Batch(observations=(obs("a"),)))
    enabled: list[bool] = []
    snapshot = exporter.accumulator.to_dict

    def recording() -> dict[str, Any]:
        enabled.append(gc.isenabled())
        return snapshot()

    monkeypatch.setattr(exporter.accumulator, "to_dict", recording)
    exporter.flush()
    assert enabled == [False]
    assert gc.isenabled()
    gc.disable()
    try:
        exporter.flush()
        assert not gc.isenabled()
    finally:
        gc.enable()
    exporter.shutdown()
    assert enabled == [False, False, False]
    assert load(tmp_path / "out" / "graph.json").edges[0].evidence_count == 1


def test_periodic_flush(tmp_path: Path) -> None:
    """With a flush interval the file appears and follows new data before shutdown."""
    exporter = _exporter(tmp_path, flush_interval=0.05)
    exporter.start(Host())
    try:
        exporter.consume(Batch(observations=(obs("a"),)))
        path = tmp_path / "out" / "graph.json"

        def written() -> int:
            return json.loads(path.read_text())["summary"]["observations"] if path.exists() else 0

        wait_until(lambda: written() == 1, 5, "a periodic flush with one observation")
        exporter.consume(Batch(observations=(obs("b"),)))
        wait_until(lambda: written() == 2, 5, "a periodic flush with both observations")
    finally:
        exporter.shutdown()


def test_relative_output_goes_to_the_run_directory(tmp_path: Path) -> None:
    """A relative output path is resolved against host.run_dir."""
    config = GraphExporterConfig(output="graph.json", flush_interval=0)
    exporter = GraphExporter(config)
    exporter.start(Host(run_dir=str(tmp_path)))
    exporter.shutdown()
    assert (tmp_path / "graph.json").exists()


def test_shutdown_before_start_writes_nothing(tmp_path: Path) -> None:
    """Shutdown before start is safe and leaves no file."""
    exporter = _exporter(tmp_path)
    exporter.shutdown()
    assert not (tmp_path / "out").exists()


def test_write_error_is_counted_not_raised(tmp_path: Path) -> None:
    """An output that became unwritable while the collector ran is reported through
    telemetry; shutdown does not crash."""
    out = tmp_path / "out"
    config = GraphExporterConfig(output=str(out / "graph.json"), flush_interval=0)
    exporter = GraphExporter(config)
    host = Host()
    exporter.start(host)
    out.rmdir()
    out.write_text("x")  # its directory is a file now
    exporter.shutdown()
    assert host.telemetry.counters()["exporter.graph.write_errors"] == 1


def test_an_output_that_cannot_be_written_is_refused_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Met as a new user: ``--set exporters.graph.output=/proc/x/graph.json`` started, said it
    was running and never wrote a graph. Now ``start`` refuses it, and nothing more is said
    at shutdown."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    exporter = GraphExporter(GraphExporterConfig(output=str(blocker / "graph.json")))
    with pytest.raises(StartupError, match=r"its directory .*file cannot be created"):
        exporter.start(Host())
    with caplog.at_level(logging.WARNING):
        exporter.shutdown()
    assert not caplog.records


def test_exposes_the_accumulator_and_snapshot(tmp_path: Path) -> None:
    """exporter.accumulator and snapshot() show what was consumed."""
    exporter = _exporter(tmp_path, flush_interval=0, retain_support=False)
    exporter.start(Host())
    exporter.consume(Batch(observations=(obs("a"),)))
    assert exporter.accumulator.edge_count == 1
    assert exporter.snapshot()["edges"][0]["support"] is None
    exporter.shutdown()


def test_config_validation() -> None:
    """Bad values are reported with their key."""
    problems = GraphExporterConfig(output="", flush_interval=-1, occurrence_window=1).validate()
    assert problems == [
        "output: must name a file",
        "flush_interval: must not be negative",
        "occurrence_window: must be at least 2",
    ]
    assert GraphExporterConfig().validate() == []


def test_pipeline_normalize_to_graph(tmp_path: Path) -> None:
    """A real collector pipeline (list receiver -> normalize -> graph) writes the graph."""
    from otel_bridge.config import parse_config
    from otel_bridge.pipeline import Collector
    from otel_bridge.processors.normalize import factory as normalize_factory
    from otel_bridge.testing import double_registry, list_receiver_factory

    registry = double_registry(
        list_receiver_factory("scenario", scenario_batches()), normalize_factory, factory
    )
    out = tmp_path / "graph.json"
    config = parse_config(
        {
            "receivers": {"scenario": {"emit_on_start": True}},
            "processors": {"normalize": {}},
            "exporters": {"graph": {"output": str(out), "flush_interval": "1m"}},
            "service": {
                "pipelines": {
                    "evidence": {
                        "receivers": ["scenario"],
                        "processors": ["normalize"],
                        "exporters": ["graph"],
                    }
                }
            },
        },
        registry=registry,
    )
    collector = Collector(config, registry=registry)
    collector.start()
    collector.shutdown()
    graph = load(out)
    relations = {e.relation for e in graph.edges}
    assert {"invoked", "declared_command", "opened", "spawned"} <= relations
