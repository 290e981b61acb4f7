"""The on-disk write-ahead log behind a persistent ``sending_queue``.

A queue directory (one per exporter, under the configured ``storage`` directory) holds:

* ``wal.log``: an 16-byte header (``OBWAL001`` and the next sequence number, little-endian u64),
  then one record per accepted batch::

      u32 payload length | u32 CRC-32 | u64 seq | u8 signal | u32 record count | payload

  The CRC covers ``seq``, ``signal``, ``count`` and the payload; the payload is the encoded
  OTLP export request exactly as it will be sent.
* ``wal.ack``: one 12-byte entry (``u64 seq | u32 CRC-32 of seq``) per batch the backend
  acknowledged (or that ended for good: a permanent error, retries exhausted).
* ``lock``: held with ``flock`` while a collector uses the directory, so two never share it.

Durability. :meth:`WriteAheadLog.append` writes the record with one ``write`` on an
``O_APPEND`` descriptor and, with ``fsync: true`` (the default), ``fdatasync``\\ s it before it
returns, so a batch the exporter accepted survives kill -9 and power loss. Acks are written
without ``fsync``: a power loss may replay a batch the backend already has (at-least-once, like
the Collector), never lose one. Without ``fsync`` a batch survives a killed process (the page
cache is the kernel's) but not a power loss.

Recovery. :meth:`WriteAheadLog.open` reads the log in order; the first record that is cut short
or fails its CRC (a write torn by kill -9 or a crash) and everything after it are cut off
(``ftruncate``) and counted, never a start-up failure. Acknowledged records are skipped; the rest
are returned for replay in their original order, and the log is rewritten with just them (to a
temporary file, ``fsync``, ``rename``). At run time, once the acknowledged records in the log
outweigh both :data:`RESET_BYTES` and the pending ones, the log is compacted the same way, so
the files stay within about twice ``max_bytes`` (plus :data:`RESET_BYTES`).

Safety. The directories are created ``0700`` and the files ``0600``; every open uses
``O_NOFOLLOW`` relative to a directory descriptor opened with ``O_NOFOLLOW`` too, so a symlink
planted in the storage path is refused rather than followed. A directory owned by another user
is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import struct
import threading
import zlib
from dataclasses import dataclass, field
from typing import Literal

from otel_bridge.rundir import (
    EXPORTER_QUEUE_PREFIX,
    WAL_ACKS,
    WAL_LOCK,
    WAL_LOG,
    WAL_TMP,
)

Signal = Literal["traces", "logs"]

MAGIC = b"OBWAL001"
_HEADER = struct.Struct("<8sQ")
_RECORD = struct.Struct("<IIQBI")
_ACK = struct.Struct("<QI")
_SIGNALS: tuple[Signal, Signal] = ("traces", "logs")
_LOG, _ACKS, _LOCK, _TMP = WAL_LOG, WAL_ACKS, WAL_LOCK, WAL_TMP
RESET_BYTES = 4 << 20
"""Bytes of acknowledged records past which the log is compacted (if they also outweigh the
pending ones)."""
_FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class StorageError(Exception):
    """The queue directory cannot be used (in use, not ours, a symlink, unwritable)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One batch held in the log."""

    seq: int
    signal: Signal
    count: int
    """Spans or log records in the batch."""
    payload: bytes
    """The encoded export request."""

    @property
    def size(self) -> int:
        """Bytes the entry takes on disk."""
        return _RECORD.size + len(self.payload)


@dataclass(slots=True)
class Recovery:
    """What :meth:`WriteAheadLog.open` found."""

    pending: list[Entry] = field(default_factory=list)
    """Batches never acknowledged, in the order they were accepted."""
    torn_records: int = 0
    """Records cut off because they were incomplete or failed their CRC (0 or 1 per start)."""
    torn_bytes: int = 0


def _record_crc(seq: int, signal: int, count: int, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(struct.pack("<QBI", seq, signal, count)))


def encode_entry(entry: Entry) -> bytes:
    """The on-disk bytes of ``entry``."""
    signal = _SIGNALS.index(entry.signal)
    crc = _record_crc(entry.seq, signal, entry.count, entry.payload)
    return _RECORD.pack(len(entry.payload), crc, entry.seq, signal, entry.count) + entry.payload


def parse_log(data: bytes) -> tuple[int, list[Entry], int]:
    """``(next seq in the header, entries, bytes of the valid prefix)`` of a log file's bytes.

    Parsing stops at the first record that is incomplete or fails its CRC; the valid prefix
    ends there. A missing or damaged header gives no entries and a prefix of 0.
    """
    if len(data) < _HEADER.size:
        return 0, [], 0
    magic, next_seq = _HEADER.unpack_from(data)
    if magic != MAGIC:
        return 0, [], 0
    entries: list[Entry] = []
    pos = _HEADER.size
    while pos + _RECORD.size <= len(data):
        length, crc, seq, signal, count = _RECORD.unpack_from(data, pos)
        end = pos + _RECORD.size + length
        if end > len(data) or signal >= len(_SIGNALS):
            break
        payload = data[pos + _RECORD.size : end]
        if _record_crc(seq, signal, count, payload) != crc:
            break
        entries.append(Entry(seq, _SIGNALS[signal], count, payload))
        pos = end
    return next_seq, entries, pos


def parse_acks(data: bytes) -> set[int]:
    """The acknowledged sequence numbers in an ack file's bytes (a torn tail is ignored)."""
    acked: set[int] = set()
    for pos in range(0, len(data) - _ACK.size + 1, _ACK.size):
        seq, crc = _ACK.unpack_from(data, pos)
        if zlib.crc32(struct.pack("<Q", seq)) != crc:
            break
        acked.add(seq)
    return acked


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    """Create (``0700``) and open directory ``name`` without following a symlink; must be ours."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o700, dir_fd=dir_fd)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise StorageError(f"cannot open queue directory {name!r}: {exc}") from exc
    if os.fstat(fd).st_uid != os.geteuid():
        os.close(fd)
        raise StorageError(f"queue directory {name!r} belongs to another user")
    os.fchmod(fd, 0o700)
    return fd


def queue_dir_name(component_id: str, prefix: str = EXPORTER_QUEUE_PREFIX) -> str:
    """The directory of one component's log inside the storage directory: an exporter's
    queue, or with ``prefix`` :data:`otel_bridge.rundir.PROCESSOR_QUEUE_PREFIX` an ``enrich``
    processor's journal."""
    return prefix + re.sub(r"[^A-Za-z0-9_.-]", "_", component_id)


class WriteAheadLog:
    """A bounded, CRC-checked, append-only log of batches; see the module docstring."""

    def __init__(
        self, storage: str, name: str, *, max_batches: int, max_bytes: int, fsync: bool = True
    ) -> None:
        self._storage = storage
        self._name = name
        self._max_batches = max_batches
        self._max_bytes = max_bytes
        self._fsync = fsync
        self._lock = threading.Lock()
        self._dir = self._log = self._acks = self._flock = -1
        self._next_seq = 0
        self._pending: dict[int, int] = {}
        """seq -> on-disk size of every batch not yet acknowledged."""
        self._bytes = 0
        self._log_size = 0

    def open(self) -> Recovery:
        """Open (creating) the queue directory, recover and compact the log; see the module doc."""
        try:
            os.makedirs(os.path.dirname(os.path.abspath(self._storage)), 0o700, exist_ok=True)
            parent = _open_dir(self._storage)
            try:
                self._dir = _open_dir(self._name, parent)
            finally:
                os.close(parent)
            self._flock = self._open_file(_LOCK)
            try:
                fcntl.flock(self._flock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                raise StorageError(
                    f"queue directory {self._storage}/{self._name} is in use by another process"
                ) from exc
            return self._recover()
        except OSError as exc:
            self.close()
            raise StorageError(f"queue directory {self._storage}/{self._name}: {exc}") from exc
        except StorageError:
            self.close()
            raise

    def _open_file(self, name: str, extra: int = 0) -> int:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | _FILE_FLAGS | extra, 0o600, dir_fd=self._dir)
        os.fchmod(fd, 0o600)
        return fd

    def _recover(self) -> Recovery:
        log = self._open_file(_LOG)
        try:
            data = _read_all(log)
        finally:
            os.close(log)
        acks = self._open_file(_ACKS)
        try:
            acked = parse_acks(_read_all(acks))
        finally:
            os.close(acks)
        header_seq, entries, valid = parse_log(data)
        recovery = Recovery(pending=[e for e in entries if e.seq not in acked])
        if valid < len(data) and data:
            recovery.torn_records = 1
            recovery.torn_bytes = len(data) - max(valid, 0)
        last = max((e.seq + 1 for e in entries), default=0)
        self._next_seq = max(header_seq, last)
        self._rewrite(recovery.pending)
        return recovery

    def _rewrite(self, entries: list[Entry]) -> None:
        """Replace the log with ``entries`` (temporary file, fsync, rename), empty the acks."""
        tmp = self._open_file(_TMP, os.O_TRUNC)
        try:
            body = [_HEADER.pack(MAGIC, self._next_seq), *(encode_entry(e) for e in entries)]
            _write_all(tmp, b"".join(body))
            os.fsync(tmp)
        finally:
            os.close(tmp)
        os.replace(_TMP, _LOG, src_dir_fd=self._dir, dst_dir_fd=self._dir)
        os.fsync(self._dir)
        if self._log >= 0:
            os.close(self._log)
        self._log = self._open_file(_LOG, os.O_APPEND)
        if self._acks < 0:
            self._acks = self._open_file(_ACKS, os.O_APPEND)
        os.ftruncate(self._acks, 0)
        self._pending = {e.seq: e.size for e in entries}
        self._bytes = sum(self._pending.values())
        self._log_size = _HEADER.size + self._bytes

    def append(self, signal: Signal, count: int, payload: bytes) -> int | None:
        """Write a batch durably; its sequence number, or None when a size bound is reached."""
        with self._lock:
            if self._log < 0:
                raise StorageError("the write-ahead log is closed")
            size = _RECORD.size + len(payload)
            if len(self._pending) >= self._max_batches or self._bytes + size > self._max_bytes:
                return None
            seq = self._next_seq
            _write_all(self._log, encode_entry(Entry(seq, signal, count, payload)))
            if self._fsync:
                os.fdatasync(self._log)
            self._next_seq += 1
            self._pending[seq] = size
            self._bytes += size
            self._log_size += size
            return seq

    def ack(self, seq: int) -> None:
        """Mark batch ``seq`` done; reset the files when nothing is left pending."""
        with self._lock:
            if self._acks < 0 or seq not in self._pending:
                return
            self._bytes -= self._pending.pop(seq)
            done_bytes = self._log_size - _HEADER.size - self._bytes
            if done_bytes > max(RESET_BYTES, self._bytes):
                self._compact()
            else:
                _write_all(self._acks, _ACK.pack(seq, zlib.crc32(struct.pack("<Q", seq))))

    def _compact(self) -> None:
        """Rewrite the log with only the pending batches (read back from the file)."""
        _, entries, _ = parse_log(_read_all(self._log))
        self._rewrite([e for e in entries if e.seq in self._pending])

    def pending(self) -> tuple[int, int]:
        """``(batches, bytes)`` written and not yet acknowledged."""
        with self._lock:
            return len(self._pending), self._bytes

    def close(self) -> None:
        """Close every descriptor (releasing the directory lock). Safe twice."""
        with self._lock:
            for fd in (self._log, self._acks, self._dir, self._flock):
                if fd >= 0:
                    os.close(fd)
            self._dir = self._log = self._acks = self._flock = -1
