"""Process events as the correlator sees them, and the time/name/argument index over them.

A :class:`ProcEvent` is read once per process start/exec record from the process entity's
typed :class:`~otel_bridge.model.ProcessFacts` (never from attribute strings) and keeps those
facts, so a derived relation can carry what the observation it rests on saw.

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
from operator import attrgetter
from typing import NamedTuple

from otel_bridge.identity import process_id
from otel_bridge.model import Channel, Observation, ProcessFacts
from otel_bridge.processors.correlate.parser import normalize_exe
from otel_bridge.processors.correlate.shared import START_EVENTS, process_facts_of

MAX_TAIL = 32
"""Longest argument tail indexed; longer declared tails are matched through the name index."""

# Looking up an enum member costs ~0.2 us on Python 3.11: the per-observation paths use these.
_OS = Channel.OS


class ProcEvent(NamedTuple):
    """One process start or exec observation, reduced to what matching needs.

    A named tuple rather than a frozen dataclass: one is built per process event, and a tuple
    is several times cheaper to build while just as immutable. ``facts`` is the observation's
    :class:`ProcessFacts` itself (``None`` fields: not observed); the other fields are what
    matching reads from it, with ``""``/``()`` where nothing was observed (no evidence either way).
    """

    obs_id: str
    record_id: str
    time: int
    identity: str
    facts: ProcessFacts
    pid: int
    host_id: str
    event_name: str
    parent_identity: str
    """The parent's identity when the event states the parent pid, else ``""``."""
    exe_path: str
    exe_name: str
    argv: tuple[str, ...]
    cwd: str
    traceparent: str
    name_keys: frozenset[str]
    """Normalized basenames this event may be known by (image path, argv[0], name)."""

    def names(self) -> frozenset[str]:
        """Normalized basenames this event may be known by (image path, argv[0], name)."""
        return self.name_keys

    def traceparent_rank(self) -> tuple[bool, int, str]:
        """Which of a process's traceparent readings describes it: the smallest rank wins.

        An exec-time reading wins over a fork-time one: ``/proc/<pid>/environ`` of a forked
        child that has not exec'd yet is its parent's initial environment, while the exec'd image
        carries the environment its starter chose (the tool span's context). Among readings of
        one kind the earliest wins, so the choice does not depend on arrival order.
        """
        return (self.event_name != "process.exec", self.time, self.obs_id)


@functools.lru_cache(maxsize=16384)
def _names_of(exe_path: str, exe_name: str, argv0: str) -> frozenset[str]:
    # Images repeat in a stream: one shared frozenset per (path, name, argv[0]).
    return frozenset(normalize_exe(n) for n in (exe_path, exe_name, argv0) if n)


_parent_identity = functools.lru_cache(maxsize=4096)(process_id)
"""``process_id`` of a parent: parents repeat (one shell, many children), one string each."""


def proc_event(obs: Observation) -> ProcEvent | None:
    """The :class:`ProcEvent` of a process start/exec observation on the OS channel, else None.

    Everything is read from the process entity's :class:`ProcessFacts` (the event kind from the
    observation's ``Source.event``). None too when that entity carries no facts: the caller counts
    it (:func:`~otel_bridge.processors.correlate.shared.lacks_process_facts`), nothing is parsed
    back out of attribute strings.
    """
    event_name = obs.source.event
    if obs.source.channel != _OS or event_name not in START_EVENTS:
        return None
    found = process_facts_of(obs)
    if found is None:
        return None
    ent, facts = found
    return event_from_facts(obs, ent.id, facts, str(event_name))


def event_from_facts(
    obs: Observation, identity: str, facts: ProcessFacts, event_name: str
) -> ProcEvent:
    """The :class:`ProcEvent` of ``obs``, whose process ``identity`` is described by ``facts``."""
    host = facts.host_id
    parent = ""
    if facts.parent_pid is not None:
        parent = _parent_identity(host, facts.parent_pid, facts.parent_start_time_ms)
    exe_path = facts.executable_path or ""
    exe_name = facts.executable_name or ""
    argv = facts.argv or ()
    return ProcEvent(
        obs_id=obs.id,
        record_id=obs.source.record_id,
        time=obs.time_unix_nano,
        identity=identity or process_id(host, facts.pid, facts.start_time_ms),
        facts=facts,
        pid=facts.pid,
        host_id=host,
        event_name=event_name,
        parent_identity=parent,
        exe_path=exe_path,
        exe_name=exe_name,
        argv=argv,
        cwd=facts.cwd or "",
        traceparent=facts.traceparent or "",
        name_keys=_names_of(exe_path, exe_name, argv[0] if argv else ""),
    )


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
