"""A restart that replaces what an earlier run left says so (issue 13: "a restart deletes what
survived the kill, without a word"), and the settings that keep it say nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from otel_bridge.component import CreateSettings, Host, Telemetry
from otel_bridge.exporters import file as file_exporter
from otel_bridge.exporters.graph import GraphExporter, GraphExporterConfig, JournalConfig
from otel_bridge.exporters.graph import factory as graph_factory


def _start_file(path: Path, *, append: bool) -> None:
    config = file_exporter.factory.default_config()
    config.path = str(path)
    config.append = append
    exporter = file_exporter.factory.create(CreateSettings(id="file"), config, None)
    exporter.start(Host(telemetry=Telemetry()))
    exporter.shutdown()


def test_file_exporter_warns_when_it_replaces_earlier_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text('{"earlier": 1}\n')
    with caplog.at_level(logging.WARNING, logger="otel_bridge"):
        _start_file(records, append=False)
    assert "replaced 15 bytes of earlier records" in caplog.text
    assert "append: true" in caplog.text
    caplog.clear()
    records.write_text('{"earlier": 1}\n')
    with caplog.at_level(logging.WARNING, logger="otel_bridge"):
        _start_file(records, append=True)
    assert caplog.text == ""
    assert records.read_text() == '{"earlier": 1}\n'


def _start_graph(tmp_path: Path, journal: str) -> None:
    config = GraphExporterConfig(
        output=str(tmp_path / "graph.json"), flush_interval=0, journal=JournalConfig(path=journal)
    )
    exporter = graph_factory.create(CreateSettings(id="graph"), config, None)
    assert isinstance(exporter, GraphExporter)
    exporter.start(Host(telemetry=Telemetry()))
    exporter.shutdown()


def test_graph_exporter_warns_when_an_earlier_graph_is_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "graph.json").write_text('{"earlier": true}\n')
    with caplog.at_level(logging.WARNING, logger="otel_bridge"):
        _start_graph(tmp_path, journal="")
    assert "holds an earlier graph, which this run replaces" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="otel_bridge"):
        _start_graph(tmp_path, journal=str(tmp_path / "graph.journal"))
    assert "earlier graph" not in caplog.text
