"""The exporters answer to the Collector's type names: ``otlp``, ``otlphttp``, ``debug``.

``otlp_grpc`` and ``otlp_http`` stay as aliases that build the very same component.
"""

from __future__ import annotations

import importlib.resources
import io
import json
from typing import Any

import pytest
from exporters_support import downstream

from otel_bridge.component import EXPORTER, CreateSettings, Host
from otel_bridge.config import load_config, parse_config
from otel_bridge.exporters import debug
from otel_bridge.exporters.otlp import ALIASES, OtlpExporter
from otel_bridge.exporters.otlp.config import GrpcExporterConfig, HttpExporterConfig
from otel_bridge.model import (
    Batch,
    Channel,
    CoverageRecord,
    Entity,
    EntityKind,
    Observation,
    Source,
)
from otel_bridge.pipeline import Collector
from otel_bridge.registry import Registry, default_registry
from otel_bridge.testing import ListReceiver, list_receiver_factory, make_log, make_span

EXPORTERS = ("otlp", "otlphttp", "otlp_grpc", "otlp_http")


def registry() -> Registry:
    """Every installed component plus the ``list`` test receiver."""
    reg = default_registry()
    reg.add(list_receiver_factory("list"))
    return reg


def endpoint(type_name: str, receiver: Any) -> str:
    """The receiver's endpoint in the form ``type_name`` expects."""
    if ALIASES.get(type_name, type_name) == "otlp":
        return f"127.0.0.1:{receiver.grpc_port}"
    return f"http://127.0.0.1:{receiver.http_port}"


@pytest.mark.parametrize("type_name", EXPORTERS)
def test_pipeline_with_each_name_delivers_spans(type_name: str) -> None:
    """A config naming the exporter by its Collector name (or alias) validates and delivers."""
    with downstream() as (receiver, sink):
        counters = run_one_batch(type_name, endpoint(type_name, receiver))
        assert sorted(s.name for s in sink.spans) == ["span-1", "span-2"]
    assert counters[f"exporter.{type_name}/out.sent_spans"] == 2


def run_one_batch(type_name: str, target: str) -> dict[str, int]:
    """Run a traces pipeline ``list -> type_name/out`` on one batch of two spans; its counters."""
    doc = {
        "receivers": {"list": None},
        "exporters": {f"{type_name}/out": {"endpoint": target}},
        "service": {
            "pipelines": {"traces": {"receivers": ["list"], "exporters": [f"{type_name}/out"]}}
        },
    }
    config = parse_config(doc, env={}, registry=registry())
    collector = Collector(config, registry=registry())
    collector.start()
    try:
        source = collector.receivers["list"]
        assert isinstance(source, ListReceiver)
        source.emit(Batch(spans=(make_span(1), make_span(2))))
    finally:
        collector.shutdown()  # drains the sending queue
    return collector.host.telemetry.counters()


@pytest.mark.parametrize(("alias", "name"), sorted(ALIASES.items()))
def test_alias_yields_the_same_component(alias: str, name: str) -> None:
    """The alias has the same config type and builds the same exporter class as its name."""
    reg = default_registry()
    original, aliased = reg.exporters[name], reg.exporters[alias]
    assert original.default_config is aliased.default_config
    assert original.create is aliased.create
    config = aliased.default_config()
    assert isinstance(config, GrpcExporterConfig if name == "otlp" else HttpExporterConfig)
    a = aliased.create(CreateSettings(id=alias), config, None)
    b = original.create(CreateSettings(id=name), config, None)
    assert type(a) is type(b) is OtlpExporter


def mixed_batch() -> Batch:
    """A span, a log record, an observation and a coverage record."""
    source = Source(channel=Channel.OS, backend="linux", record_id="r1")
    return Batch(
        spans=(make_span(1),),
        logs=(make_log(1),),
        observations=(
            Observation(
                id="o#1",
                time_unix_nano=1,
                source=source,
                subject=Entity(kind=EntityKind.PROCESS, id="process:h:1:2"),
            ),
        ),
        coverage=(CoverageRecord(source=source, reason="no-permission"),),
    )


def run_debug(verbosity: str) -> list[str]:
    """The lines a ``debug`` exporter at ``verbosity`` writes for :func:`mixed_batch`."""
    stream = io.StringIO()
    config = debug.Config(verbosity=verbosity)  # type: ignore[arg-type]
    exporter = debug.DebugExporter(CreateSettings(id="debug"), config, stream)
    host = Host()
    exporter.start(host)
    exporter.consume(mixed_batch())
    exporter.consume(Batch())
    exporter.shutdown()
    assert host.telemetry.value("batches", kind=EXPORTER, id="debug") == 1
    return stream.getvalue().splitlines()


def test_debug_basic_writes_one_summary_line() -> None:
    """``basic``: one line per batch counting each record kind; an empty batch writes nothing."""
    assert run_debug("basic") == [
        "debug: batch: 1 spans, 1 log records, 1 observations, 1 coverage records"
    ]


def test_debug_normal_writes_one_line_per_record() -> None:
    """``normal``: the summary then one line per record, naming it."""
    head, span, log, obs, cov = run_debug("normal")
    assert head.startswith("debug: batch: 1 spans")
    assert span.startswith("debug: span 'span-1'")
    assert make_span(1).trace_id.hex() in span
    assert log.startswith("debug: log ")
    assert obs == "debug: observation o#1 process:h:1:2 - -"
    assert cov == "debug: coverage os/linux: no-permission"


def test_debug_detailed_writes_each_record_as_json() -> None:
    """``detailed``: every record in full, one JSON object per line, ids as hex."""
    lines = run_debug("detailed")
    records = [json.loads(line.removeprefix("debug: ")) for line in lines[1:]]
    assert [r["type"] for r in records] == ["Span", "LogRecord", "Observation", "CoverageRecord"]
    assert records[0]["record"]["trace_id"] == make_span(1).trace_id.hex()
    assert records[2]["record"]["subject"]["id"] == "process:h:1:2"


def test_debug_in_a_pipeline_writes_to_stderr_only(capsys: pytest.CaptureFixture[str]) -> None:
    """Configured by name, the debug exporter writes to stderr and nothing to stdout."""
    doc = {
        "receivers": {"list": None},
        "exporters": {"debug": {"verbosity": "normal"}},
        "service": {"pipelines": {"evidence": {"receivers": ["list"], "exporters": ["debug"]}}},
    }
    collector = Collector(parse_config(doc, env={}, registry=registry()), registry=registry())
    collector.start()
    source = collector.receivers["list"]
    assert isinstance(source, ListReceiver)
    source.emit(mixed_batch())
    collector.shutdown()
    out, err = capsys.readouterr()
    assert out == ""
    assert "debug: observation o#1" in err


def test_debug_rejects_an_unknown_verbosity() -> None:
    """``verbosity`` is one of basic, normal, detailed."""
    doc = {
        "receivers": {"list": None},
        "exporters": {"debug": {"verbosity": "loud"}},
        "service": {"pipelines": {"traces": {"receivers": ["list"], "exporters": ["debug"]}}},
    }
    with pytest.raises(Exception, match="verbosity"):
        parse_config(doc, env={}, registry=registry())


@pytest.mark.parametrize(("name", "type_name"), [("phoenix", "otlphttp"), ("jaeger", "otlp")])
def test_bundled_configs_use_collector_names_and_send_traces_only(
    name: str, type_name: str
) -> None:
    """``configs/phoenix.yaml`` and ``configs/jaeger.yaml``: the Collector's names, traces only."""
    shipped = importlib.resources.files("otel_bridge.configs") / f"{name}.yaml"
    with importlib.resources.as_file(shipped) as path:
        config = load_config(path, env={})
    (exporter_id,) = config.exporters
    assert exporter_id == f"{type_name}/{name}"
    assert config.exporters[exporter_id].config.signals == ["traces"]
