"""The benchmark's protocol at small scale, the schema itself, and concurrent exporting."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from graph_helpers import file_entity, obs
from graph_materialization import main, measure, synthetic_events

from otel_bridge.component import Host
from otel_bridge.exporters.graph import GraphExporter, GraphExporterConfig
from otel_bridge.graph import GraphAccumulator, load, schema
from otel_bridge.model import Batch


def test_synthetic_events_cap_unique_resources() -> None:
    """The generator reuses at most `cap` files: n events, cap + 1 nodes, cap edges."""
    result = measure(120, reps=1)
    assert (result["nodes"], result["edges"]) == (121, 120)
    small = measure(50, reps=1)
    assert (small["nodes"], small["edges"]) == (51, 50)
    events = synthetic_events(30, cap=10)
    assert len({o.object.id for o in events if o.object}) == 10
    assert len({o.occurrence for o in events}) == 30


def test_benchmark_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The benchmark command prints Table V's columns and the events/s line."""
    assert main(["--reps", "1", "--scales", "100,300"]) == 0
    out = capsys.readouterr().out
    assert "| Events | Resources | Nodes | Edges | Apply" in out
    assert "at 300 events: apply" in out


def test_repeated_events_keep_edge_counts() -> None:
    """At 3x the cap every edge has logical and evidence count 3."""
    from otel_bridge.graph import GraphAccumulator

    acc = GraphAccumulator()
    acc.apply_many(synthetic_events(300, cap=100))
    doc = acc.to_dict()
    assert {(e["logical_count"], e["evidence_count"]) for e in doc["edges"]} == {(3, 3)}


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    """The shipped schema passes the metaschema check."""
    import importlib

    validators = importlib.import_module("jsonschema.validators")
    validators.Draft202012Validator.check_schema(schema())
    assert schema()["properties"]["format"] == {"const": "otel-bridge.graph"}


def test_concurrent_consumers_lose_nothing(tmp_path: Path) -> None:
    """Batches consumed from several threads while flushing are all counted."""
    exporter = GraphExporter(
        GraphExporterConfig(output=str(tmp_path / "g.json"), flush_interval=0.01)
    )
    exporter.start(Host())

    def feed(worker: int) -> None:
        for i in range(200):
            target = file_entity(f"/w{worker}/{i % 7}")
            exporter.consume(Batch(observations=(obs(f"w{worker}:{i}", obj=target),)))

    threads = [threading.Thread(target=feed, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    exporter.shutdown()
    graph = load(tmp_path / "g.json")
    assert graph.summary["observations"] == 800
    assert len(graph.edges) == 28
    assert sum(e.evidence_count for e in graph.edges) == 800


def test_benchmark_reports_cpu_time_and_load(capsys: pytest.CaptureFixture[str]) -> None:
    """Wall and process CPU time are printed for every scale, with the machine's load."""
    assert main(["--reps", "1", "--scales", "200"]) == 0
    out = capsys.readouterr().out
    assert "| Apply CPU | Snapshot+JSON CPU |" in out
    assert "process CPU time: apply" in out
    assert out.count("load average") == 2


def test_only_the_snapshot_pauses_the_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The benchmark's harness and the accumulator's apply never turn the garbage collector
    off; the snapshot (``to_dict``, as every caller gets it) pauses it once per snapshot and
    turns it back on."""
    import gc

    calls: list[str] = []
    real_disable, real_enable = gc.disable, gc.enable

    def disable() -> None:
        calls.append("disable")
        real_disable()

    def enable() -> None:
        calls.append("enable")
        real_enable()

    monkeypatch.setattr(gc, "disable", disable)
    monkeypatch.setattr(gc, "enable", enable)
    acc = GraphAccumulator(retain_support=False)
    acc.apply_many(synthetic_events(300))
    assert calls == []
    result = measure(300, reps=2)
    assert gc.isenabled()
    assert calls == ["disable", "enable"] * 2
    assert (result["nodes"], result["edges"]) == (301, 300)
