"""The graph exporter's bounds: the graph stops growing at max_nodes/max_edges, what would grow
it is spilled in order (or counted as dropped), graph.json says so, restarts do not double it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import msgspec
import pytest

from otel_bridge.component import CreateSettings, Host, Telemetry
from otel_bridge.errors import StartupError
from otel_bridge.exporters.graph import (
    BoundsConfig,
    GraphExporter,
    GraphExporterConfig,
    JournalConfig,
    factory,
)
from otel_bridge.exporters.graph.journal import read_frames
from otel_bridge.graph import GraphFilter, filter_graph, load
from otel_bridge.identity import file_id, process_id
from otel_bridge.model import (
    Attribution,
    Batch,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    Observation,
    RelationKind,
    Source,
)
from otel_bridge.processors.normalize import Normalizer
from otel_bridge.testing import make_span


def _batches(n_batches: int, per_batch: int, start: int = 0) -> list[Batch]:
    """Normalized batches of distinct spans (each adds a node)."""
    normalizer = Normalizer()
    out = []
    for b in range(n_batches):
        first = start + b * per_batch
        spans = tuple(make_span(i) for i in range(first, first + per_batch))
        out.append(normalizer(Batch(spans=spans)))
    return out


PROC = Entity(kind=EntityKind.PROCESS, id=process_id("h", 10, 1), label="python3 (10)")


def _opens(n: int, start: int = 0) -> Batch:
    """One process opening ``n`` distinct files: each observation adds a node and an edge."""
    out = []
    for i in range(start, start + n):
        path = f"/tmp/f{i}"
        out.append(
            Observation(
                id=f"open-{i}",
                time_unix_nano=1_000 + i,
                source=Source(channel=Channel.OS, backend="linux", record_id=f"open-{i}"),
                subject=PROC,
                relation=RelationKind.OPENED,
                object=Entity(kind=EntityKind.FILE, id=file_id(path), label=path),
                evidence=Evidence(attribution=Attribution.SYSCALL, causal=True),
                occurrence=f"open-{i}",
            )
        )
    return Batch(observations=tuple(out))


def _exporter(tmp_path: Path, telemetry: Telemetry, **config: Any) -> GraphExporter:
    cfg = GraphExporterConfig(output=str(tmp_path / "graph.json"), flush_interval=0, **config)
    assert not cfg.validate()
    exporter = factory.create(CreateSettings(id="graph"), cfg, None)
    assert isinstance(exporter, GraphExporter)
    exporter.start(Host(telemetry=telemetry))
    return exporter


def _ids(observations: list[Observation] | tuple[Observation, ...]) -> list[str]:
    return [o.id for o in observations]


def _counter(telemetry: Telemetry, name: str) -> int:
    return telemetry.value(name, kind="exporter", id="graph")


def test_graph_stops_at_its_bounds_and_spills_the_rest_in_order(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Past max_nodes no node or edge is added; every observation that would add one is in the
    spill file, in arrival order, and counted in graph.json and the counters; observations
    about elements the graph holds are still applied (counts stay exact)."""
    caplog.set_level(logging.WARNING)
    telemetry = Telemetry()
    bounds = BoundsConfig(max_nodes=40, max_edges=1000, spill=str(tmp_path / "graph.spill"))
    exporter = _exporter(tmp_path, telemetry, bounds=bounds)
    batches = _batches(10, 10)
    sent = [o for b in batches for o in b.observations]
    for batch in batches:
        exporter.consume(batch)
    # known elements only (new observations of batches[0]'s): applied, nothing spilled
    again = tuple(msgspec.structs.replace(o, id=f"{o.id}.again") for o in batches[0].observations)
    exporter.consume(Batch(observations=again))
    exporter.consume(batches[0])  # a copy of what was applied: dropped, counted
    exporter.shutdown()

    graph = load(tmp_path / "graph.json")
    bounded = graph.summary["bounded"]
    assert len(graph.nodes) <= 40
    assert len(graph.nodes) >= 40 - 2  # filled up to the bound, not stopped far short
    spilled = [o for frame in read_frames(str(tmp_path / "graph.spill")) for o in frame[0]]
    applied = len(sent) + len(again) - len(spilled)
    assert bounded == {
        "max_nodes": 40,
        "max_edges": 1000,
        "over_bounds": len(spilled),
        "spilled": len(spilled),
        "dropped": 0,
        "spill": str(tmp_path / "graph.spill"),
    }
    assert graph.summary["observations"] == applied
    assert spilled
    assert _ids(spilled) == [o.id for o in sent if o.id in set(_ids(spilled))]
    assert set(_ids(again)).isdisjoint(_ids(spilled))
    assert _counter(telemetry, "spilled") == len(spilled)
    assert _counter(telemetry, "redelivered") == len(batches[0].observations)
    assert _counter(telemetry, "bound_dropped") == 0
    supported = {s for e in graph.edges for s in e.support or ()}
    assert supported.isdisjoint(_ids(spilled))  # nothing spilled is in the graph
    assert "reached its bounds" in caplog.text


def test_without_a_spill_file_what_goes_over_is_counted_as_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``spill: ""`` keeps nothing over the bounds, and graph.json and the counter say how
    many observations the graph does not hold."""
    caplog.set_level(logging.WARNING)
    telemetry = Telemetry()
    exporter = _exporter(tmp_path, telemetry, bounds=BoundsConfig(max_edges=5, spill=""))
    for k in range(4):
        exporter.consume(_opens(5, 5 * k))
    doc = exporter.snapshot()
    exporter.shutdown()
    bounded = doc["summary"]["bounded"]
    assert doc["summary"]["edges"] == 5
    assert bounded["dropped"] == bounded["over_bounds"] == 15
    assert bounded["spill"] is None
    assert bounded["spilled"] == 0
    assert _counter(telemetry, "bound_dropped") == bounded["dropped"]
    assert "kept nowhere" in caplog.text


def test_a_restart_replays_the_journal_into_the_same_bounded_graph_and_spill(
    tmp_path: Path,
) -> None:
    """With a journal, a restart (after kill -9: no shutdown) rebuilds the same bounded graph and
    a new spill file with the same observations, not twice as many."""
    journal = JournalConfig(path=str(tmp_path / "graph.journal"))
    spill = tmp_path / "graph.spill"
    bounds = BoundsConfig(max_nodes=30, spill=str(spill))
    first = _exporter(tmp_path, Telemetry(), bounds=bounds, journal=journal)
    for batch in _batches(6, 10):
        first.consume(batch)
    expected = first.snapshot()
    assert first.journal is not None
    assert first.bounds is not None
    first.journal.close()  # what a kill leaves
    first.bounds.close()
    before = [o.id for f in read_frames(str(spill)) for o in f[0]]
    second = _exporter(tmp_path, Telemetry(), bounds=bounds, journal=journal)
    assert second.snapshot() == expected
    second.shutdown()
    after = [o.id for f in read_frames(str(spill)) for o in f[0]]
    assert after == before
    assert len(before) == expected["summary"]["bounded"]["spilled"] > 0


def test_bounds_are_validated_and_a_filtered_view_keeps_what_was_bounded(tmp_path: Path) -> None:
    """Negative maxima and a tiny spill bound are configuration problems naming the key; a
    filtered view of a bounded graph (``otel-bridge graph --kind``) still says what the whole
    graph could not hold."""
    problems = GraphExporterConfig(
        bounds=BoundsConfig(max_nodes=-1, max_edges=-2, spill_max_bytes=10)
    ).validate()
    assert problems == [
        "bounds.max_nodes: must not be negative",
        "bounds.max_edges: must not be negative",
        "bounds.spill_max_bytes: must be at least 1024",
    ]
    exporter = _exporter(tmp_path, Telemetry(), bounds=BoundsConfig(max_nodes=3, spill=""))
    exporter.consume(_opens(5))
    exporter.shutdown()
    graph = load(tmp_path / "graph.json")
    view = filter_graph(graph, GraphFilter(kinds=frozenset({"file"})))
    assert view.summary["bounded"] == graph.summary["bounded"]
    assert graph.summary["bounded"]["dropped"] == 3


def test_a_foreign_file_or_a_link_at_the_spill_path_is_refused_untouched(tmp_path: Path) -> None:
    """The spill file is emptied at start, but never a file that is not one (its bytes stay)
    nor through a symbolic link (its target stays): both are start-up errors naming the key."""
    foreign = tmp_path / "notes.txt"
    foreign.write_bytes(b"not a spill file")
    link = tmp_path / "link.spill"
    link.symlink_to(foreign)
    for path in (foreign, link):
        cfg = GraphExporterConfig(
            output=str(tmp_path / "graph.json"),
            bounds=BoundsConfig(max_nodes=10, spill=str(path)),
        )
        exporter = factory.create(CreateSettings(id="graph"), cfg, None)
        with pytest.raises(StartupError, match=r"bounds\.spill"):
            exporter.start(Host(telemetry=Telemetry()))
    assert foreign.read_bytes() == b"not a spill file"
