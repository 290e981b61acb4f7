"""The write-ahead log of the persistent sending queue: order, acks, torn tails, bounds, safety."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.exporters.otlp import wal
from otel_bridge.exporters.otlp.wal import StorageError, WriteAheadLog, parse_log

NAME = "exporter_otlp"


def open_wal(storage: Path, **bounds: int) -> tuple[WriteAheadLog, wal.Recovery]:
    """An opened log in ``storage`` with generous default bounds."""
    log = WriteAheadLog(
        str(storage),
        NAME,
        max_batches=bounds.get("max_batches", 100),
        max_bytes=bounds.get("max_bytes", 1 << 20),
    )
    return log, log.open()


def log_file(storage: Path) -> Path:
    """The log file of the queue."""
    return storage / NAME / "wal.log"


def test_unacknowledged_batches_replay_in_order(tmp_path: Path) -> None:
    """Appended, partly acknowledged, reopened: the rest come back in order with their payloads."""
    log, recovery = open_wal(tmp_path)
    assert recovery.pending == []
    seqs = [log.append("traces" if i % 2 else "logs", i + 1, f"p{i}".encode()) for i in range(5)]
    assert seqs == [0, 1, 2, 3, 4]
    log.ack(1)
    log.ack(3)
    assert log.pending()[0] == 3
    log.close()
    log, recovery = open_wal(tmp_path)
    assert [(e.seq, e.signal, e.count, e.payload) for e in recovery.pending] == [
        (0, "logs", 1, b"p0"),
        (2, "logs", 3, b"p2"),
        (4, "logs", 5, b"p4"),
    ]
    assert recovery.torn_records == 0
    assert log.append("traces", 1, b"next") == 5  # sequence numbers are never reused
    log.close()


def test_torn_tail_is_cut_off_and_counted(tmp_path: Path) -> None:
    """A record cut short (kill -9 mid-write) is truncated at start, counted, never fatal."""
    log, _ = open_wal(tmp_path)
    for i in range(3):
        log.append("traces", 1, b"x" * 50 + bytes([i]))
    log.close()
    path = log_file(tmp_path)
    whole = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(whole - 7)
    log, recovery = open_wal(tmp_path)
    assert [e.payload[-1] for e in recovery.pending] == [0, 1]
    assert recovery.torn_records == 1
    assert recovery.torn_bytes == 50 + 1 + wal._RECORD.size - 7
    log.close()
    _, entries, valid = parse_log(path.read_bytes())
    assert len(entries) == 2
    assert valid == path.stat().st_size


def test_crc_mismatch_ends_the_log(tmp_path: Path) -> None:
    """A flipped payload byte fails the CRC: that record and everything after it are cut off."""
    log, _ = open_wal(tmp_path)
    for i in range(3):
        log.append("logs", 2, b"payload-%d" % i)
    log.close()
    path = log_file(tmp_path)
    data = bytearray(path.read_bytes())
    second = wal._HEADER.size + wal._RECORD.size + len(b"payload-0")
    data[second + wal._RECORD.size] ^= 0xFF
    path.write_bytes(bytes(data))
    log, recovery = open_wal(tmp_path)
    assert [e.payload for e in recovery.pending] == [b"payload-0"]
    assert recovery.torn_records == 1
    log.close()


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=0, max_value=400), garbage=st.binary(max_size=40))
def test_any_truncation_or_garbage_recovers_a_prefix(
    tmp_path_factory: pytest.TempPathFactory, cut: int, garbage: bytes
) -> None:
    """Whatever the file was cut to (and whatever follows), start-up recovers a prefix."""
    storage = tmp_path_factory.mktemp("wal")
    log, _ = open_wal(storage)
    payloads = [bytes([i]) * (10 + i) for i in range(8)]
    for p in payloads:
        log.append("traces", 1, p)
    log.close()
    path = log_file(storage)
    path.write_bytes(path.read_bytes()[:cut] + garbage)
    log, recovery = open_wal(storage)
    got = [e.payload for e in recovery.pending]
    assert got == payloads[: len(got)]
    log.close()


def test_bounds_refuse_new_batches(tmp_path: Path) -> None:
    """Past ``max_batches`` or ``max_bytes`` an append is refused (the caller counts a drop)."""
    log, _ = open_wal(tmp_path, max_batches=2)
    assert log.append("traces", 1, b"a") is not None
    assert log.append("traces", 1, b"b") is not None
    assert log.append("traces", 1, b"c") is None
    log.ack(0)
    assert log.append("traces", 1, b"c") is not None
    log.close()
    small, _ = WriteAheadLog(str(tmp_path / "b"), NAME, max_batches=9, max_bytes=100), None
    small.open()
    assert small.append("traces", 1, b"x" * 60) is not None
    assert small.append("traces", 1, b"x" * 60) is None
    assert small.pending() == (1, wal._RECORD.size + 60)
    small.close()


def test_drained_queue_resets_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once everything is acknowledged and the log grew past RESET_BYTES, it starts over."""
    monkeypatch.setattr(wal, "RESET_BYTES", 100)
    log, _ = open_wal(tmp_path)
    seqs = [log.append("traces", 1, b"y" * 100) for _ in range(3)]
    for seq in seqs:
        assert seq is not None
        log.ack(seq)
    assert log_file(tmp_path).stat().st_size == wal._HEADER.size
    assert (tmp_path / NAME / "wal.ack").stat().st_size == 0
    assert log.append("traces", 1, b"z") == 3
    log.close()


def test_files_are_private(tmp_path: Path) -> None:
    """Directories 0700, files 0600, even when the storage directory existed wider open."""
    storage = tmp_path / "q"
    storage.mkdir(mode=0o755)
    log, _ = open_wal(storage)
    log.append("traces", 1, b"s")
    assert stat.S_IMODE(storage.stat().st_mode) == 0o700
    assert stat.S_IMODE((storage / NAME).stat().st_mode) == 0o700
    for name in ("wal.log", "wal.ack", "lock"):
        assert stat.S_IMODE((storage / NAME / name).stat().st_mode) == 0o600
    log.close()


def test_symlinks_are_refused(tmp_path: Path) -> None:
    """A symlinked storage directory, queue directory or log file is refused, not followed."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(StorageError):
        open_wal(tmp_path / "link")
    storage = tmp_path / "s"
    storage.mkdir()
    (storage / NAME).symlink_to(target)
    with pytest.raises(StorageError):
        open_wal(storage)
    storage = tmp_path / "t"
    (storage / NAME).mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (storage / NAME / "wal.log").symlink_to(victim)
    with pytest.raises(StorageError):
        open_wal(storage)
    assert victim.read_bytes() == b"keep"


def test_one_process_per_queue_directory(tmp_path: Path) -> None:
    """A second log on the same directory is refused while the first holds it."""
    first, _ = open_wal(tmp_path)
    with pytest.raises(StorageError, match="in use"):
        open_wal(tmp_path)
    first.close()
    second, _ = open_wal(tmp_path)
    second.close()
    assert os.path.isdir(tmp_path / NAME)


def test_acknowledged_records_are_compacted_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With batches still pending, acknowledged ones are compacted out once they outweigh them."""
    monkeypatch.setattr(wal, "RESET_BYTES", 300)
    log, _ = open_wal(tmp_path)
    seqs = [log.append("logs", 1, bytes([i]) * 100) for i in range(6)]
    for seq in seqs[:4]:
        assert seq is not None
        log.ack(seq)
    path = log_file(tmp_path)
    assert path.stat().st_size < wal._HEADER.size + 3 * (wal._RECORD.size + 100)
    log.close()
    log, recovery = open_wal(tmp_path)
    assert [e.seq for e in recovery.pending] == [4, 5]
    assert [e.payload[0] for e in recovery.pending] == [4, 5]
    log.close()
