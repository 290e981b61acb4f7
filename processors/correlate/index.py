"""Process events as the correlator sees them, and the time/name/argument index over them.

Every candidate lookup is a bisect over a time-sorted list selected by one key (a normalized
executable basename or an exact argument vector tail), so deciding one declaration costs the
logarithm of the stream plus the few events that share its name or arguments, not a scan.
Out-of-order arrival is absorbed by appending and sorting lazily before the next query
(Timsort is linear on the nearly sorted lists a live stream produces).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from otel_bridge.identity import process_id
from otel_bridge.model import AnyValue, Channel, EntityKind, Observation, RelationKind
from otel_bridge.processors.correlate.parser import normalize_exe

START_EVENTS = frozenset({"process.start", "process.exec"})
MAX_TAIL = 32
"""Longest argument tail indexed; longer declared tails are matched through the name index."""


@dataclass(frozen=True, slots=True)
class ProcEvent:
    """One process start or exec observation, reduced to what matching needs."""

    obs_id: str
    record_id: str
    time: int
    identity: str
    pid: int
    host_id: str
    exe_path: str = ""
    exe_name: str = ""
    argv: tuple[str, ...] = ()
    cwd: str = ""
    traceparent: str = ""
    parent_identity: str = ""
    event_name: str = "process.start"
    name_keys: frozenset[str] = frozenset()
    """Normalized basenames this event may be known by (image path, argv[0], name)."""

    def names(self) -> frozenset[str]:
        """Normalized basenames this event may be known by (image path, argv[0], name)."""
        return self.name_keys or _names(self.exe_path, self.exe_name, self.argv)


def _names(exe_path: str, exe_name: str, argv: tuple[str, ...]) -> frozenset[str]:
    out = {normalize_exe(n) for n in (exe_path, exe_name) if n}
    if argv and argv[0]:
        out.add(normalize_exe(argv[0]))
    return frozenset(out)


def _str(v: object) -> str:
    return v if isinstance(v, str) else ""


def _int(v: object) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return None


def iso_to_ms(value: str) -> int | None:
    """ISO 8601 UTC time (``2025-01-01T00:00:00.123Z``) to ms since the epoch."""
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return round(dt.timestamp() * 1000)


def process_entity_of(obs: Observation) -> tuple[str, dict[str, AnyValue]] | None:
    """The identity and merged attributes of the process an OS observation is about."""
    if obs.relation == RelationKind.SPAWNED and obs.object is not None:
        ent = obs.object
    elif obs.subject.kind == EntityKind.PROCESS:
        ent = obs.subject
    elif obs.object is not None and obs.object.kind == EntityKind.PROCESS:
        ent = obs.object
    else:
        return None
    attrs: dict[str, AnyValue] = dict(ent.attrs)
    attrs.update(obs.attrs)
    return ent.id, attrs


def proc_event(obs: Observation) -> ProcEvent | None:
    """The :class:`ProcEvent` of a process start/exec observation on the OS channel, else None."""
    a = obs.attrs
    if obs.source.channel != Channel.OS or a.get("event.name") not in START_EVENTS:
        return None
    if obs.relation == RelationKind.SPAWNED and obs.object is not None:
        ent = obs.object
    elif obs.subject.kind == EntityKind.PROCESS:
        ent = obs.subject
    else:
        return None
    e = ent.attrs

    def get(key: str) -> AnyValue:
        value = a.get(key)
        return e.get(key) if value is None else value

    pid = _int(get("process.pid"))
    if pid is None:
        return None
    host = _str(get("host.id"))
    args = get("process.command_args")
    argv = tuple(x for x in args if isinstance(x, str)) if isinstance(args, tuple | list) else ()
    ppid = _int(get("process.parent_pid"))
    parent = ""
    if ppid is not None:
        created = _str(get("process.parent.creation.time"))
        parent = process_id(host, ppid, iso_to_ms(created) if created else None)
    exe_path = _str(get("process.executable.path"))
    exe_name = _str(get("process.executable.name"))
    identity = ent.id
    if not identity:
        created = _str(get("process.creation.time"))
        identity = process_id(host, pid, iso_to_ms(created) if created else None)
    return ProcEvent(
        obs_id=obs.id,
        record_id=obs.source.record_id,
        time=obs.time_unix_nano,
        identity=identity,
        pid=pid,
        host_id=host,
        exe_path=exe_path,
        exe_name=exe_name,
        argv=argv,
        cwd=_str(get("process.working_directory")),
        traceparent=_str(get("process.env.traceparent")),
        parent_identity=parent,
        event_name=_str(a.get("event.name")),
        name_keys=_names(exe_path, exe_name, argv),
    )


class TimeList:
    """Events sorted by (time, observation id), sorted lazily after out-of-order appends."""

    __slots__ = ("_dirty", "_events", "_times")

    def __init__(self) -> None:
        self._times: list[int] = []
        self._events: list[ProcEvent] = []
        self._dirty = False

    def __len__(self) -> int:
        return len(self._events)

    def add(self, ev: ProcEvent) -> None:
        """Append ``ev``; the list is re-sorted before the next query if needed."""
        if self._times and ev.time < self._times[-1]:
            self._dirty = True
        self._times.append(ev.time)
        self._events.append(ev)

    def _sort(self) -> None:
        if self._dirty:
            self._events.sort(key=lambda e: (e.time, e.obs_id))
            self._times = [e.time for e in self._events]
            self._dirty = False

    def between(self, start: int, end: int) -> list[ProcEvent]:
        """Events with ``start <= time <= end`` (both endpoints inclusive)."""
        self._sort()
        lo = bisect.bisect_left(self._times, start)
        hi = bisect.bisect_right(self._times, end)
        return self._events[lo:hi]

    def evict_before(self, t: int) -> None:
        """Drop events with time strictly before ``t``."""
        self._sort()
        k = bisect.bisect_left(self._times, t)
        if k:
            del self._times[:k]
            del self._events[:k]


class CandidateIndex:
    """Process start/exec events indexed by time, executable basename and argument tail."""

    def __init__(self) -> None:
        self._by_name: dict[str, TimeList] = {}
        self._by_tail: dict[str, TimeList] = {}
        self._seen: dict[str, str] = {}
        """Record id -> the smallest observation id seen for it (one record, one process)."""
        self.events: dict[str, list[ProcEvent]] = {}
        """Every indexed event by process identity."""

    def __len__(self) -> int:
        return sum(len(v) for v in self.events.values())

    def add(self, ev: ProcEvent) -> bool:
        """Index ``ev``; False if one event of the same record and process is already there."""
        known = self._seen.get(ev.record_id)
        if known is not None:
            # Several observations of one record: keep the smallest id as its support, so the
            # support does not depend on which of them arrived first.
            self._seen[ev.record_id] = min(known, ev.obs_id)
            return False
        self._seen[ev.record_id] = ev.obs_id
        self.events.setdefault(ev.identity, []).append(ev)
        for name in ev.names():
            self._by_name.setdefault(name, TimeList()).add(ev)
        for k in range(1, min(len(ev.argv) - 1, MAX_TAIL) + 1):
            self._by_tail.setdefault(tail_key(ev.argv[-k:]), TimeList()).add(ev)
        return True

    def query(
        self, names: Iterable[str], tail: tuple[str, ...], start: int, end: int
    ) -> list[ProcEvent]:
        """Events in ``[start, end]`` known by one of ``names`` or whose argv ends with ``tail``."""
        out: dict[tuple[str, str], ProcEvent] = {}
        lists = [self._by_name.get(n) for n in names]
        if 0 < len(tail) <= MAX_TAIL:
            lists.append(self._by_tail.get(tail_key(tail)))
        for tl in lists:
            if tl is None:
                continue
            for ev in tl.between(start, end):
                out[(ev.identity, ev.record_id)] = ev
        return sorted(out.values(), key=lambda e: (e.time, e.obs_id))

    def evict_before(self, t: int) -> None:
        """Forget events older than ``t`` (bounded memory in a long stream)."""
        for table in (self._by_name, self._by_tail):
            for key in list(table):
                table[key].evict_before(t)
                if not len(table[key]):
                    del table[key]
        for ident in list(self.events):
            kept = [e for e in self.events[ident] if e.time >= t]
            if kept:
                self.events[ident] = kept
            else:
                del self.events[ident]
        live = {e.record_id for evs in self.events.values() for e in evs}
        self._seen = {k: v for k, v in self._seen.items() if k in live}

    def offer(self, record_id: str, obs_id: str) -> bool | None:
        """Note another observation of an indexed record.

        None when the record is not indexed, True when ``obs_id`` is now its smallest id,
        False otherwise.
        """
        known = self._seen.get(record_id)
        if known is None:
            return None
        if obs_id < known:
            self._seen[record_id] = obs_id
            return True
        return False

    def support_id(self, ev: ProcEvent) -> str:
        """The observation id that stands for ``ev``'s record (the smallest one seen)."""
        return self._seen.get(ev.record_id, ev.obs_id)


def tail_key(tail: tuple[str, ...]) -> str:
    """The index key of an argument tail."""
    # A length prefix keeps ("a b",) and ("a", "b") apart.
    return "\x00".join((str(len(tail)), *tail))
