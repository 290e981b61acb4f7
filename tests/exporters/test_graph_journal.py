"""The graph exporter's journal: replayed at start, torn tails cut, bounded, safe to open."""

from __future__ import annotations

import math
import os
import random
import struct
import zlib
from pathlib import Path
from typing import Any

import msgspec
import pytest

from otel_bridge.component import CreateSettings, Host, Telemetry
from otel_bridge.errors import StartupError
from otel_bridge.exporters.graph import GraphExporter, GraphExporterConfig, JournalConfig, factory
from otel_bridge.exporters.graph.journal import MAGIC, Journal, JournalError, encode_frame
from otel_bridge.exporters.graph.redelivery import Delivered
from otel_bridge.model import Batch, Channel, CoverageRecord, Source
from otel_bridge.processors.normalize import Normalizer
from otel_bridge.testing import make_span


def _batches(n: int, start: int = 0) -> list[Batch]:
    """Normalized batches of plain spans whose attributes JSON has no type for."""
    normalizer = Normalizer()
    out = []
    for i in range(start, start + n):
        span = make_span(
            i,
            attributes={"raw": b"\x00\xff", "ratio": math.inf, "nested": {"$bytes": "x"}},
            parent_span_id=(i or 1).to_bytes(8, "big") if i % 3 else b"",
        )
        batch = normalizer(Batch(spans=(span,)))
        source = Source(channel=Channel.OS, backend="test", record_id=f"c{i}")
        out.append(
            Batch(
                observations=batch.observations,
                coverage=(CoverageRecord(source=source, reason="gap"),),
            )
        )
    return out


def _exporter(tmp_path: Path, telemetry: Telemetry | None = None, **journal: Any) -> GraphExporter:
    config = GraphExporterConfig(
        output=str(tmp_path / "graph.json"),
        flush_interval=0,
        journal=JournalConfig(path=str(tmp_path / "state" / "graph.journal"), **journal),
    )
    exporter = factory.create(CreateSettings(id="graph"), config, None)
    assert isinstance(exporter, GraphExporter)
    exporter.start(Host(telemetry=telemetry or Telemetry()))
    return exporter


def test_restart_without_shutdown_rebuilds_the_same_graph(tmp_path: Path) -> None:
    """A collector that never shut down (the journal left as kill -9 leaves it) restarts into the
    same graph, and writes graph.json at once; the journal is 0600 in a 0700 directory."""
    first = _exporter(tmp_path)
    for batch in _batches(12):
        first.consume(batch)
    expected = first.snapshot()
    assert first.journal is not None
    first.journal.close()  # what a kill leaves: no shutdown, no graph.json
    assert not (tmp_path / "graph.json").exists()

    telemetry = Telemetry()
    second = _exporter(tmp_path, telemetry)
    try:
        assert second.snapshot() == expected
        assert (tmp_path / "graph.json").exists(), "graph.json rebuilt at start"
        assert (
            telemetry.total("journal_replayed", kind="exporter")
            == expected["summary"]["observations"]
        )
        journal = tmp_path / "state" / "graph.journal"
        assert journal.stat().st_mode & 0o777 == 0o600
        assert journal.parent.stat().st_mode & 0o777 == 0o700
        for batch in _batches(3, start=12):
            second.consume(batch)
    finally:
        second.shutdown()
    third = _exporter(tmp_path)
    try:
        assert third.snapshot()["summary"]["observations"] == len(
            [o for b in _batches(15) for o in b.observations]
        )
    finally:
        third.shutdown()


def test_a_torn_tail_is_cut_and_counted(tmp_path: Path) -> None:
    """A frame cut short by a kill, or failing its CRC, is cut off; what precedes it replays."""
    first = _exporter(tmp_path)
    batches = _batches(4)
    for batch in batches[:3]:
        first.consume(batch)
    expected = first.snapshot()
    first.shutdown()
    path = tmp_path / "state" / "graph.journal"
    good = path.stat().st_size
    frame = encode_frame(batches[3].observations, batches[3].coverage)
    with path.open("ab") as f:
        f.write(frame[: len(frame) // 2])
    telemetry = Telemetry()
    second = _exporter(tmp_path, telemetry)
    second.shutdown()
    assert second.snapshot() == expected
    assert telemetry.total("journal_torn_bytes", kind="exporter") == len(frame) // 2
    assert path.stat().st_size == good

    damaged = bytearray(path.read_bytes())
    damaged[-1] ^= 0xFF  # the last frame's payload no longer matches its CRC
    path.write_bytes(bytes(damaged))
    third = _exporter(tmp_path)
    third.shutdown()
    assert third.snapshot()["summary"]["observations"] < expected["summary"]["observations"]


def test_bounded_batches_past_the_bound_are_applied_and_counted(tmp_path: Path) -> None:
    """The journal stays within max_bytes; what does not fit is in the graph and counted."""
    telemetry = Telemetry()
    exporter = _exporter(tmp_path, telemetry, max_bytes=4096)
    batches = _batches(20)
    for batch in batches:
        exporter.consume(batch)
    exporter.shutdown()
    path = tmp_path / "state" / "graph.journal"
    assert path.stat().st_size <= 4096
    total = sum(len(b.observations) for b in batches)
    assert exporter.snapshot()["summary"]["observations"] == total
    dropped = telemetry.total("journal_dropped", kind="exporter")
    assert 0 < dropped < total
    replayed = _exporter(tmp_path)
    replayed.shutdown()
    assert replayed.snapshot()["summary"]["observations"] == total - dropped


def test_refuses_a_symlink_a_foreign_file_and_a_second_user(tmp_path: Path) -> None:
    """A planted symlink is not followed, a non-journal is not overwritten, a journal in use by
    another collector is refused: each a StartupError naming the key."""
    (tmp_path / "state").mkdir(mode=0o700)
    target = tmp_path / "victim"
    target.write_text("keep")
    link = tmp_path / "state" / "graph.journal"
    link.symlink_to(target)
    with pytest.raises(StartupError, match=r"journal\.path"):
        _exporter(tmp_path)
    assert target.read_text() == "keep"
    link.unlink()
    link.write_text("not a journal at all")
    with pytest.raises(StartupError, match="not a graph journal"):
        _exporter(tmp_path)
    link.unlink()
    holder = Journal(str(link), max_bytes=1 << 20)
    holder.open(lambda _o, _c: None)
    try:
        with pytest.raises(StartupError, match="in use"):
            _exporter(tmp_path)
    finally:
        holder.close()


def test_header_torn_at_the_first_write_starts_empty(tmp_path: Path) -> None:
    """A kill during the very first write leaves part of the header: a fresh journal."""
    path = tmp_path / "j"
    path.write_bytes(MAGIC[:3])
    journal = Journal(str(path), max_bytes=1 << 20)
    replay = journal.open(lambda _o, _c: None)
    journal.close()
    assert (replay.batches, path.read_bytes()) == (0, MAGIC)
    with pytest.raises(JournalError, match="closed"):
        journal.append((), ())


def test_validate_names_the_key() -> None:
    """A bound too small to hold anything is a config problem with its key path."""
    config = GraphExporterConfig(journal=JournalConfig(path="j", max_bytes=10))
    assert config.validate() == ["journal.max_bytes: must be at least 1024"]


def test_journal_file_is_not_world_readable_even_with_a_loose_umask(tmp_path: Path) -> None:
    """The journal holds command lines and paths: 0600 whatever the umask."""
    old = os.umask(0)
    try:
        exporter = _exporter(tmp_path)
        exporter.shutdown()
    finally:
        os.umask(old)
    assert (tmp_path / "state" / "graph.journal").stat().st_mode & 0o777 == 0o600


def test_an_intact_but_unreadable_frame_is_skipped_and_later_frames_replay(tmp_path: Path) -> None:
    """A frame whose CRC holds but whose payload is not a journal payload is skipped and
    counted; the frames after it still replay (nothing is cut off)."""
    first = _exporter(tmp_path)
    batches = _batches(2)
    first.consume(batches[0])
    assert first.journal is not None
    path = Path(first.journal.path)
    first.journal.close()
    payload = b"\xc1 not msgpack"
    with path.open("ab") as f:
        f.write(struct.pack("<II", len(payload), zlib.crc32(payload)) + payload)
        f.write(encode_frame(batches[1].observations, batches[1].coverage))
    telemetry = Telemetry()
    second = _exporter(tmp_path, telemetry)
    second.shutdown()
    assert telemetry.total("journal_skipped_frames", kind="exporter") == 1
    assert second.snapshot()["summary"]["observations"] == 2
    assert telemetry.total("journal_torn_bytes", kind="exporter") == 0


def test_a_batch_delivered_again_after_a_kill_counts_once(tmp_path: Path) -> None:
    """The flaky fleet failure, made certain: a gateway journals a batch and is killed before
    the sender learns it was taken; the restarted exporter replays the journal, then the sender
    resends the batch. Each observation counts once, and the copy is not journaled again.
    (Resent here without its coverage record: coverage records carry no id, and a resent one is
    counted again, as documented.)"""
    batches = _batches(5)
    first = _exporter(tmp_path)
    for batch in batches:
        first.consume(batch)
    expected = first.snapshot()
    assert first.journal is not None
    first.journal.close()  # killed: no shutdown
    journal = tmp_path / "state" / "graph.journal"
    size = journal.stat().st_size

    telemetry = Telemetry()
    second = _exporter(tmp_path, telemetry)
    try:
        second.consume(Batch(observations=batches[-1].observations))  # the resend
        assert second.snapshot() == expected
        assert telemetry.total("redelivered", kind="exporter") == len(batches[-1].observations)
        assert journal.stat().st_size == size  # nothing left to journal
        for batch in _batches(2, start=5):  # what is new still counts
            second.consume(batch)
        assert second.snapshot()["summary"]["observations"] == sum(
            len(b.observations) for b in _batches(7)
        )
    finally:
        second.shutdown()


def test_a_copy_counts_once_and_a_restarted_collectors_reused_id_counts(tmp_path: Path) -> None:
    """An SDK's retry (the same observations again, in one batch or the next) adds nothing. A
    collector restarted on its journal counts its OS record ids from 1 again: an observation
    with an id the replayed journal holds, at another time, is new evidence; at the same time it
    is a copy."""
    (batch,) = _batches(1)
    n = len(batch.observations)
    twice = Batch(observations=batch.observations + batch.observations)
    first = _exporter(tmp_path)
    first.consume(twice)
    first.consume(Batch(observations=batch.observations))
    once = first.snapshot()
    assert once["summary"]["observations"] == n
    assert {e["evidence_count"] for e in once["nodes"] if e["kind"] == "span"} == {1}
    assert first.journal is not None
    first.journal.close()  # killed

    second = _exporter(tmp_path)
    try:
        later = tuple(
            msgspec.structs.replace(o, time_unix_nano=o.time_unix_nano + 1)
            for o in batch.observations
        )
        second.consume(Batch(observations=later + batch.observations))
        again = second.snapshot()
        assert again["summary"]["observations"] == 2 * n
        assert {e["evidence_count"] for e in again["nodes"] if e["kind"] == "span"} == {2}
    finally:
        second.shutdown()


def test_the_redelivery_window_is_bounded_and_only_overcounts() -> None:
    """The last ``window // 2`` distinct observations are recognised exactly; a copy of an older
    one counts again (never the reverse); a batch not applied is forgotten."""
    observations = [o for b in _batches(10) for o in b.observations]
    assert len(observations) == 10
    delivered = Delivered(4)
    assert delivered.fresh(tuple(observations[:1])) == tuple(observations[:1])
    assert delivered.fresh(tuple(observations[:2])) == (observations[1],)
    assert len(delivered) <= 4
    assert delivered.fresh(tuple(observations[2:8])) == tuple(observations[2:8])
    assert delivered.fresh((observations[0],)) == (observations[0],)  # forgotten: counts again
    recent = (observations[7],)
    assert delivered.fresh(recent) == ()
    delivered.forget(recent)
    assert delivered.fresh(recent) == recent
    unchanged = tuple(observations[8:10])
    assert delivered.fresh(unchanged) is unchanged  # no copy: no new tuple


def test_the_fast_path_lets_through_what_the_reference_loop_does() -> None:
    """Differential: ``fresh`` (set operations) and ``_fresh`` (one at a time) agree on batches
    drawn with copies from earlier batches, copies within a batch and fresh ones."""
    pool = [o for b in _batches(40) for o in b.observations]
    rng = random.Random(7)
    fast, reference = Delivered(1000), Delivered(1000)
    for _ in range(60):
        batch = tuple(rng.choice(pool) for _ in range(rng.randint(0, 4)))
        assert fast.fresh(batch) == reference._fresh(batch)
    assert len(fast) == len(reference)
