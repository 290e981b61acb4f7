"""The graph exporter's journal: an append-only log of the observations it applied.

The graph exporter keeps its graph in memory and rewrites ``graph.json`` every
``flush_interval``; without a journal a kill -9 loses what arrived since the last write. With
``journal.path`` set, every batch is appended here *before* it is applied, and at start the
journal is replayed into the accumulator (the same observations in the same order give the same
graph) and ``graph.json`` is rewritten at once.

Format: an 8-byte header ``OBGJ0001``, then one frame per batch::

    u32 payload length | u32 CRC-32 of the payload | payload

The payload is a msgpack array ``[observations, coverage]`` of the lossless dict forms of
:mod:`otel_bridge.jsonl` (bytes, non-finite floats and absent evidence flags survive).

Recovery: frames are read in order; the first one cut short or failing its CRC (a write torn
by kill -9) and everything after it are cut off (``ftruncate``) and counted, never a start-up
failure. An intact frame whose payload cannot be decoded is skipped, counted and left in place.
A file that does not start with the header is refused (it is not ours to overwrite).

Bounds: the journal never grows past ``max_bytes``. A batch that would pass it is applied to
the graph but not journaled: the exporter counts it (``journal_dropped``) and warns once, since
a kill -9 from then on loses what was not journaled. Start a new journal (delete the file, or
point ``path`` elsewhere) to start a new graph.

Durability: one ``write`` per batch on an ``O_APPEND`` descriptor, so a batch the exporter took
survives kill -9 (the page cache is the kernel's); with ``fsync: true`` every append is
``fdatasync``\\ ed as well and survives power loss. Safety: the file is opened with
``O_NOFOLLOW`` (a symlink planted at the path is refused), created ``0600`` in directories
created ``0700``, and held with ``flock`` so two collectors never share one journal.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from otel_bridge import jsonl
from otel_bridge.errors import DecodeError
from otel_bridge.model import CoverageRecord, Observation
from otel_bridge.rundir import make_private_dirs

MAGIC = b"OBGJ0001"
_FRAME = struct.Struct("<II")
_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC

Apply = Callable[[tuple[Observation, ...], tuple[CoverageRecord, ...]], None]


class JournalError(Exception):
    """The journal cannot be used (a symlink, not a journal, in use, unreadable)."""


@dataclass(slots=True)
class Replay:
    """What :meth:`Journal.open` found and replayed."""

    batches: int = 0
    observations: int = 0
    torn_bytes: int = 0
    """Bytes cut off the end: a frame torn by a kill, or damaged."""
    skipped: int = 0
    """Intact frames (CRC correct) whose payload could not be decoded; left in place."""
    bytes: int = 0
    """Size of the journal after recovery."""


def encode_frame(
    observations: tuple[Observation, ...], coverage: tuple[CoverageRecord, ...]
) -> bytes:
    """The bytes of one journal frame holding ``observations`` and ``coverage``."""
    payload = msgspec.msgpack.encode(
        [
            [jsonl.observation_to_dict(o) for o in observations],
            [jsonl.coverage_to_dict(c) for c in coverage],
        ]
    )
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def decode_payload(payload: bytes) -> tuple[tuple[Observation, ...], tuple[CoverageRecord, ...]]:
    """The records of one frame's payload; DecodeError if it is not a journal payload."""
    try:
        data: Any = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"journal frame is not msgpack: {exc}") from None
    if not isinstance(data, list) or len(data) != 2:
        raise DecodeError("journal frame: expected [observations, coverage]")
    observations = tuple(jsonl.observation_from_dict(o, "journal") for o in data[0])
    coverage = tuple(jsonl.coverage_from_dict(c, "journal") for c in data[1])
    return observations, coverage


class Journal:
    """An append-only, CRC-framed, bounded journal of applied batches (see the module doc)."""

    def __init__(self, path: str, *, max_bytes: int, fsync: bool = False) -> None:
        self.path = path
        self._max_bytes = max_bytes
        self._fsync = fsync
        self._fd = -1
        self._size = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """Bytes in the journal."""
        return self._size

    def open(self, apply: Apply) -> Replay:
        """Open (creating) and lock the journal, replay its frames into ``apply`` in order."""
        return self._open(lambda: self._replay(apply))

    def open_empty(self) -> None:
        """Open (creating) and lock the file like :meth:`open`, and empty it without reading
        it (a spill file holds what the current graph does not, so each start begins a new
        one); a file that is not empty and not a journal is refused, as by :meth:`open`."""
        self._open(self._empty)

    def _empty(self) -> Replay:
        if not MAGIC.startswith(os.pread(self._fd, len(MAGIC), 0)):  # empty, torn or ours
            raise JournalError(f"{self.path} is not a graph journal (header mismatch)")
        os.ftruncate(self._fd, 0)
        os.write(self._fd, MAGIC)
        self._size = len(MAGIC)
        return Replay(bytes=self._size)

    def _open(self, then: Callable[[], Replay]) -> Replay:
        try:
            make_private_dirs(os.path.dirname(os.path.abspath(self.path)))
            self._fd = os.open(self.path, _FLAGS, 0o600)
        except OSError as exc:
            raise JournalError(f"cannot open graph journal {self.path}: {exc.strerror}") from exc
        try:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise JournalError(
                    f"graph journal {self.path} is in use by another process"
                ) from None
            os.fchmod(self._fd, 0o600)
            return then()
        except (JournalError, OSError) as exc:
            self.close()
            if isinstance(exc, JournalError):
                raise
            raise JournalError(f"graph journal {self.path}: {exc}") from exc

    def _replay(self, apply: Apply) -> Replay:
        with open(self._fd, "rb", closefd=False) as f:
            data = f.read()
        if not data:
            os.write(self._fd, MAGIC)
            self._size = len(MAGIC)
            return Replay(bytes=self._size)
        if not data.startswith(MAGIC):
            if len(data) < len(MAGIC) and MAGIC.startswith(data):
                data = b""  # a header torn by a kill at the very first write
            else:
                raise JournalError(f"{self.path} is not a graph journal (header mismatch)")
        replay = Replay()
        pos = len(MAGIC)
        while pos + _FRAME.size <= len(data):
            length, crc = _FRAME.unpack_from(data, pos)
            end = pos + _FRAME.size + length
            payload = data[pos + _FRAME.size : end]
            if end > len(data) or zlib.crc32(payload) != crc:
                break
            pos = end
            try:
                observations, coverage = decode_payload(payload)
            except DecodeError:
                replay.skipped += 1  # intact but unreadable: keep it and what follows
                continue
            apply(observations, coverage)
            replay.batches += 1
            replay.observations += len(observations)
        if not data:
            os.ftruncate(self._fd, 0)
            os.write(self._fd, MAGIC)
            pos = len(MAGIC)
        elif pos < len(data):
            replay.torn_bytes = len(data) - pos
            os.ftruncate(self._fd, pos)
        self._size = replay.bytes = pos
        return replay

    def append(
        self, observations: tuple[Observation, ...], coverage: tuple[CoverageRecord, ...]
    ) -> bool:
        """Journal one batch; False (nothing written) when it would pass ``max_bytes``."""
        frame = encode_frame(observations, coverage)
        with self._lock:
            if self._fd < 0:
                raise JournalError("the graph journal is closed")
            if self._size + len(frame) > self._max_bytes:
                return False
            view = memoryview(frame)
            try:
                while view:
                    view = view[os.write(self._fd, view) :]
                if self._fsync:
                    os.fdatasync(self._fd)
            except OSError:
                with contextlib.suppress(OSError):  # no torn frame mid-journal
                    os.ftruncate(self._fd, self._size)
                raise
            self._size += len(frame)
            return True

    def close(self) -> None:
        """Close the journal (releasing its lock). Safe twice."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_frames(
    path: str,
) -> list[tuple[tuple[Observation, ...], tuple[CoverageRecord, ...]]]:
    """The batches of the journal (or spill file) at ``path``, in order, without locking or
    changing it: the intact frames up to the first torn one; DecodeError if it is not one."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(MAGIC):
        raise DecodeError(f"{path} is not a graph journal (header mismatch)")
    out = []
    pos = len(MAGIC)
    while pos + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        payload = data[pos + _FRAME.size : end]
        if end > len(data) or zlib.crc32(payload) != crc:
            break
        out.append(decode_payload(payload))
        pos = end
    return out
