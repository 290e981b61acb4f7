"""Merging a process's repeated file events into one record (the ``linux`` backend's fanotify
reader, ``docs/host.md`` "Merged file records").

A workload that reopens the same files gives the fanotify reader the same fact again and again:
the ``medium`` benchmark workload's 4,000 iterations over 16 files read as about 5,500 file
records of 618 distinct (process, file, kind) facts. Every record costs the whole evidence
pipeline (the receiver's record, redaction, normalisation, the graph, two JSON-lines files).
:class:`FileMerger` holds the first event of a (pid, path, kind) and folds the same pid's later
events of that file and kind into it for :attr:`FileMerger.window` seconds; the record then
says how many events it stands for (:data:`MERGED_EVENTS`) and when the last one was read
(:data:`LAST_TIME`). Its own time stays the first event's. The reader counts the events folded
(``count - 1`` of each record it emits) in the receiver's ``fanotify.merged_events``.

What is never merged: two processes (a pid whose identity changed in between is another
process), two files, two kinds (an open and a write stay two records). Creates, deletes and
renames are never held: a held record can follow, in the stream, a rename that happened after
its first event. Readers order file facts by their times (and a merged record's end time), not
by their place in the stream.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from otel_bridge.model import AnyValue
from otel_bridge.stamping import EARLIEST_TIME

MERGED_EVENTS = "evidence.merged_events"
"""How many file events one record stands for, when more than one (each event read may itself
stand for several operations the kernel merged while it was queued)."""
LAST_TIME = "evidence.last_time_unix_nano"
"""The time of the last event a merged record stands for (nanoseconds since the epoch)."""
MERGED_KINDS = frozenset({"file.open", "file.read", "file.write"})
"""The kinds merged: the ones a process repeats on one file."""
MAX_HELD = 4096
"""Records held at most: a further new one flushes them all first."""


@dataclass(slots=True)
class Held:
    """One record being merged: the first event's time and attributes, the last event's time
    and how many events it stands for."""

    name: str
    pid: int
    attrs: dict[str, AnyValue]
    """The process identity attributes at the first event, ``file.path`` and, when stated, the
    first event's earliest time (:data:`~otel_bridge.stamping.EARLIEST_TIME`)."""
    first_ns: int
    last_ns: int
    count: int
    due: float
    """When it is emitted (monotonic seconds)."""

    def final_attrs(self) -> dict[str, AnyValue]:
        """The record's attributes, with the merge attributes when it stands for more than one
        event."""
        if self.count == 1:
            return self.attrs
        out = dict(self.attrs)
        out[MERGED_EVENTS] = self.count
        out[LAST_TIME] = self.last_ns
        return out


class FileMerger:
    """Holds file records of :data:`MERGED_KINDS` for ``window`` seconds, merging repeats."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._held: dict[tuple[int, str, str], Held] = {}

    def __bool__(self) -> bool:
        return bool(self._held)

    def fold(self, name: str, pid: int, path: str, time_ns: int, creation: AnyValue) -> bool:
        """Fold one event into the record held for ``(pid, path, name)`` when there is one of
        the same process (``creation``: the ``process.creation.time`` its identity attributes
        state now, None when they state none): True when folded (nothing to emit). Else the
        caller builds the identity and calls :meth:`add`. The fast path of :meth:`add` for a
        repeat, which is most events: no attributes are built for it."""
        held = self._held.get((pid, path, name))
        if held is None or held.attrs.get("process.creation.time") != creation:
            return False
        held.count += 1
        held.last_ns = max(held.last_ns, time_ns)
        return True

    def add(  # noqa: PLR0917 (the hot path: one call per event)
        self,
        name: str,
        pid: int,
        path: str,
        time_ns: int,
        identity: dict[str, AnyValue],
        earliest_ns: int | None = None,
    ) -> list[Held]:
        """Hold (or fold) one event of ``pid`` on ``path``; ``identity``: the process identity
        attributes now (a fresh dict, kept); ``earliest_ns``: the earliest the event can have
        happened (None: not stated), kept for the first event only. Returns the records to emit
        first: the one held for an earlier process with this pid, or every held record when the
        table is full."""
        key = (pid, path, name)
        held = self._held.get(key)
        out: list[Held] = []
        if held is not None:
            if held.attrs.get("process.creation.time") == identity.get("process.creation.time"):
                held.count += 1
                held.last_ns = max(held.last_ns, time_ns)
                return out
            out.append(self._held.pop(key))  # the pid names another process now
        elif len(self._held) >= MAX_HELD:
            out = self.flush()
        identity["file.path"] = path
        if earliest_ns is not None:
            identity[EARLIEST_TIME] = earliest_ns
        self._held[key] = Held(
            name, pid, identity, time_ns, time_ns, 1, time.monotonic() + self.window
        )
        return out

    def due(self, now: float | None = None) -> list[Held]:
        """The held records whose window has ended (in the order they were first seen)."""
        if not self._held:
            return []
        now = time.monotonic() if now is None else now
        keys: list[tuple[int, str, str]] = []
        for key, held in self._held.items():
            if held.due > now:
                break  # held in order: every later one is due later
            keys.append(key)
        return [self._held.pop(key) for key in keys]

    def next_due(self) -> float | None:
        """When the first held record is due (monotonic seconds), None when none is held."""
        for held in self._held.values():
            return held.due
        return None

    def flush(self) -> list[Held]:
        """Every held record, in the order they were first seen; none is held after."""
        out = list(self._held.values())
        self._held.clear()
        return out
