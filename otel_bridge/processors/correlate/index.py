"""Process events as the correlator sees them, and the time/name/argument index over them.

Every candidate lookup is a bisect over a time-sorted list selected by one key (a normalized
executable basename or an exact argument vector tail), so deciding one declaration costs the
logarithm of the stream plus the few events that share its name or arguments, not a scan.
Out-of-order arrival is absorbed by appending and sorting lazily before the next query
(Timsort is linear on the nearly sorted lists a live stream produces).
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from datetime import datetime
from operator import attrgetter
from typing import NamedTuple, cast

from otel_bridge.identity import process_id
from otel_bridge.model import AnyValue, Channel, EntityKind, Observation, RelationKind
from otel_bridge.processors.correlate.parser import normalize_exe

START_EVENTS = frozenset({"process.start", "process.exec"})
MAX_TAIL = 32
"""Longest argument tail indexed; longer declared tails are matched through the name index."""

# Looking up an enum member costs ~0.2 us on Python 3.11: the hot paths use these.
_OS = Channel.OS
_SPAWNED = RelationKind.SPAWNED
_PROCESS = EntityKind.PROCESS


class ProcEvent(NamedTuple):
    """One process start or exec observation, reduced to what matching needs.

    A named tuple rather than a frozen dataclass: one is built per process event, and a tuple
    is several times cheaper to build while just as immutable.
    """

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
    return _names_of(exe_path, exe_name, argv[0] if argv else "")


@functools.lru_cache(maxsize=16384)
def _names_of(exe_path: str, exe_name: str, argv0: str) -> frozenset[str]:
    # Images repeat in a stream: one shared frozenset per (path, name, argv[0]).
    return frozenset(normalize_exe(n) for n in (exe_path, exe_name, argv0) if n)


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
    if obs.relation == _SPAWNED and obs.object is not None:
        ent = obs.object
    elif obs.subject.kind == _PROCESS:
        ent = obs.subject
    elif obs.object is not None and obs.object.kind == _PROCESS:
        ent = obs.object
    else:
        return None
    attrs: dict[str, AnyValue] = dict(ent.attrs)
    attrs.update(obs.attrs)
    return ent.id, attrs


def proc_event(obs: Observation) -> ProcEvent | None:
    """The :class:`ProcEvent` of a process start/exec observation on the OS channel, else None."""
    a = obs.attrs
    event_name = a.get("event.name")
    if obs.source.channel != _OS or event_name not in START_EVENTS:
        return None
    if obs.relation == _SPAWNED and obs.object is not None:
        ent = obs.object
    elif obs.subject.kind == _PROCESS:
        ent = obs.subject
    else:
        return None
    # Each attribute is the observation's, else the process entity's. This runs once per
    # process event, hence the inlined lookups and the exact type checks before general ones.
    get, fallback = a.get, ent.attrs.get
    pid = get("process.pid")
    if pid is None:
        pid = fallback("process.pid")
    if type(pid) is not int:
        pid = _int(pid)
        if pid is None:
            return None
    host = get("host.id")
    if host is None:
        host = fallback("host.id")
    if type(host) is not str:
        host = _str(host)
    args = get("process.command_args")
    if args is None:
        args = fallback("process.command_args")
    argv: tuple[str, ...]
    if isinstance(args, tuple | list):
        for x in args:
            if not isinstance(x, str):
                argv = tuple(x for x in args if isinstance(x, str))
                break
        else:
            # Every item is a str. tuple() of a tuple is that tuple: shared, not copied.
            argv = cast("tuple[str, ...]", tuple(args))
    else:
        argv = ()
    exe_path = get("process.executable.path")
    if exe_path is None:
        exe_path = fallback("process.executable.path")
    if type(exe_path) is not str:
        exe_path = _str(exe_path)
    exe_name = get("process.executable.name")
    if exe_name is None:
        exe_name = fallback("process.executable.name")
    if type(exe_name) is not str:
        exe_name = _str(exe_name)
    cwd = get("process.working_directory")
    if cwd is None:
        cwd = fallback("process.working_directory")
    if type(cwd) is not str:
        cwd = _str(cwd)
    traceparent = get("process.env.traceparent")
    if traceparent is None:
        traceparent = fallback("process.env.traceparent")
    if type(traceparent) is not str:
        traceparent = _str(traceparent)
    ppid = get("process.parent_pid")
    if ppid is None:
        ppid = fallback("process.parent_pid")
    parent = ""
    if ppid is not None:
        if type(ppid) is not int:
            ppid = _int(ppid)
        if ppid is not None:
            created = get("process.parent.creation.time")
            if created is None:
                created = fallback("process.parent.creation.time")
            parent = _identity(host, ppid, _str(created))
    identity = ent.id
    if not identity:
        created = get("process.creation.time")
        if created is None:
            created = fallback("process.creation.time")
        identity = _identity(host, pid, _str(created))
    # tuple.__new__ straight from the field values: the named tuple's generated __new__ is a
    # Python function with defaults, four times the cost on this hot path.
    return tuple.__new__(
        ProcEvent,
        (
            obs.id,
            obs.source.record_id,
            obs.time_unix_nano,
            identity,
            pid,
            host,
            exe_path,
            exe_name,
            argv,
            cwd,
            traceparent,
            parent,
            event_name if type(event_name) is str else _str(event_name),
            _names_of(exe_path, exe_name, argv[0] if argv else ""),
        ),
    )


@functools.lru_cache(maxsize=4096)
def _identity(host: str, pid: int, created: str) -> str:
    # Parents repeat (one shell, many children), and parsing an ISO time is not cheap.
    return process_id(host, pid, iso_to_ms(created) if created else None)


_TIME = attrgetter("time")


def _time_and_id(ev: ProcEvent) -> tuple[int, str]:
    return ev.time, ev.obs_id


def _between(events: list[ProcEvent], start: int, end: int) -> list[ProcEvent]:
    """Events of a time-sorted list with ``start <= time <= end`` (both inclusive)."""
    lo = bisect.bisect_left(events, start, key=_TIME)
    return events[lo : bisect.bisect_right(events, end, lo, key=_TIME)]


class _Table:
    """Time-sorted event lists by key, each sorted by (time, observation id) lazily.

    A list is appended to as events arrive; one that received an event older than its last one
    is noted and re-sorted before its next query (Timsort is linear on nearly sorted lists).
    A key with a single event (most argument tails) holds the event itself, not a list: one
    object fewer per process for memory and for the garbage collector to walk.
    """

    __slots__ = ("lists", "unsorted")

    def __init__(self) -> None:
        self.lists: dict[str, ProcEvent | list[ProcEvent]] = {}
        self.unsorted: set[str] = set()

    def add(self, key: str, ev: ProcEvent) -> None:
        """Append ``ev`` to the list of ``key``."""
        events = self.lists.get(key)
        if events is None:
            self.lists[key] = ev
            return
        if not isinstance(events, list):
            events = self.lists[key] = [events]
        if ev.time < events[-1].time:
            self.unsorted.add(key)
        events.append(ev)

    def sorted_list(self, key: str) -> list[ProcEvent] | None:
        """The list of ``key`` in (time, observation id) order, None if there is none."""
        events = self.lists.get(key)
        if events is None:
            return None
        if not isinstance(events, list):
            return [events]
        if key in self.unsorted:
            events.sort(key=_time_and_id)
            self.unsorted.discard(key)
        return events

    def evict_before(self, t: int) -> None:
        """Drop events with time strictly before ``t``, and the keys left without one."""
        lists = self.lists
        for key in list(lists):
            events = self.sorted_list(key)
            assert events is not None
            k = bisect.bisect_left(events, t, key=_TIME)
            if k == len(events):
                del lists[key]
            elif k:
                del events[:k]

    def __len__(self) -> int:
        return len(self.lists)


class CandidateIndex:
    """Process start/exec events indexed by time, executable basename and argument tail."""

    def __init__(self) -> None:
        self._by_name = _Table()
        self._by_tail = _Table()
        self._seen: dict[str, str] = {}
        """Record id -> the smallest observation id seen for it (one record, one process)."""
        self._first: dict[str, ProcEvent] = {}
        """Process identity -> its first indexed event (most processes have only that one)."""
        self._more: dict[str, list[ProcEvent]] = {}
        """Process identity -> its further events (an exec after the start, ...)."""
        self.visits = 0
        """Lists probed and events visited by :meth:`query` (a machine-independent cost)."""

    def __len__(self) -> int:
        return len(self._first) + sum(len(v) for v in self._more.values())

    def identities(self) -> Iterable[str]:
        """The identities of the indexed processes."""
        return self._first.keys()

    def events_of(self, identity: str) -> list[ProcEvent]:
        """The indexed events of one process, in the order they were indexed."""
        first = self._first.get(identity)
        if first is None:
            return []
        more = self._more.get(identity)
        return [first, *more] if more else [first]

    def record_ids(self) -> set[str]:
        """The record ids of every indexed event."""
        out = {e.record_id for e in self._first.values()}
        for evs in self._more.values():
            out.update(e.record_id for e in evs)
        return out

    def add(self, ev: ProcEvent) -> bool:
        """Index ``ev``; False if one event of the same record and process is already there."""
        seen = self._seen
        rec = ev.record_id
        known = seen.get(rec)
        if known is not None:
            # Several observations of one record: keep the smallest id as its support, so the
            # support does not depend on which of them arrived first.
            seen[rec] = min(known, ev.obs_id)
            return False
        seen[rec] = ev.obs_id
        ident = ev.identity
        if ident not in self._first:
            self._first[ident] = ev
        else:
            self._more.setdefault(ident, []).append(ev)
        add_name = self._by_name.add
        for name in ev.names():
            add_name(name, ev)
        add_tail = self._by_tail.add
        for key in tail_keys(ev.argv):
            add_tail(key, ev)
        return True

    def query(
        self, names: Iterable[str], tail: tuple[str, ...], start: int, end: int
    ) -> list[ProcEvent]:
        """Events in ``[start, end]`` known by one of ``names`` or whose argv ends with ``tail``."""
        out: dict[tuple[str, str], ProcEvent] = {}
        lists = [self._by_name.sorted_list(n) for n in names]
        if 0 < len(tail) <= MAX_TAIL:
            lists.append(self._by_tail.sorted_list(tail_key(tail)))
        for events in lists:
            self.visits += 1
            if events is None:
                continue
            found = _between(events, start, end)
            self.visits += len(found)
            for ev in found:
                out[(ev.identity, ev.record_id)] = ev
        return sorted(out.values(), key=_time_and_id)

    def evict_before(self, t: int) -> None:
        """Forget events older than ``t`` (bounded memory in a long stream)."""
        self._by_name.evict_before(t)
        self._by_tail.evict_before(t)
        first, more = self._first, self._more
        for ident in list(first):
            kept = [e for e in self.events_of(ident) if e.time >= t]
            more.pop(ident, None)
            if kept:
                first[ident] = kept[0]
                if len(kept) > 1:
                    more[ident] = kept[1:]
            else:
                del first[ident]
        live = self.record_ids()
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


def tail_keys(argv: tuple[str, ...]) -> list[str]:
    """The index keys of the argument tails of ``argv`` an event is indexed under.

    ``tail_key(argv[-k:])`` for ``k`` from 1 to ``min(len(argv) - 1, MAX_TAIL)``, built
    incrementally (each key extends the previous one by one word) instead of slice by slice.
    """
    if len(argv) <= 2:  # most argument vectors: at most one tail
        return [f"1\x00{argv[1]}"] if len(argv) == 2 else []
    out: list[str] = []
    joined = ""
    for k in range(1, min(len(argv) - 1, MAX_TAIL) + 1):
        joined = f"{argv[-k]}\x00{joined}" if k > 1 else argv[-1]
        out.append(f"{k}\x00{joined}")
    return out
