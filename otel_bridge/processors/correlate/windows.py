"""Declaration search windows: where each one ends, and in which order they close.

A declaration's window ends at the earliest of its maximum window and its tool span's end (see
:mod:`.singleton`). A later declaration of the same scope cuts it only if it started after this
call ended, which the span's end already does: two calls that overlap never clip each other, and
a call whose end is unknown is not clipped at all (its window is the maximum one, so a process
of an overlapping call stays a competing candidate instead of vanishing from view).

The paper's literal rule (``cut_at_next_start``, the baselines) also ends a window at the next
later declaration start in its scope, overlapping or not. Starts only ever add up while
a declaration is pending, so its end can only move earlier, and only when a declaration arrives
right after it in its scope. That keeps a heap of (end, declaration) exact with one push per
declaration and one per window it cuts: deciding at a watermark pops just the windows that
closed, instead of re-examining every pending declaration at every step.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping
from operator import itemgetter
from typing import Protocol, TypeVar


class Windowed(Protocol):
    """What a window needs from a declaration."""

    @property
    def obs_id(self) -> str:
        """The declaration's observation id (its key)."""

    @property
    def start(self) -> int:
        """The window start (the tool span's start)."""

    @property
    def end(self) -> int:
        """The tool span's end, 0 when unknown."""

    @property
    def scope(self) -> str:
        """The scope whose later declarations cut the window."""


D = TypeVar("D", bound=Windowed)
_START = itemgetter(0)


class Windows:
    """Window ends of declarations by scope, and a heap of pending declarations by end."""

    __slots__ = (
        "_closing",
        "_end_cache",
        "_scope_starts",
        "_version",
        "cut_at_next_start",
        "max_ns",
    )

    def __init__(self, max_window_ns: int, cut_at_next_start: bool = False) -> None:
        self.max_ns = max_window_ns
        self.cut_at_next_start = cut_at_next_start
        """The paper's literal rule: the next later declaration ends a window even when the two
        calls overlap (off for the shipped policy)."""
        self._scope_starts: dict[str, list[tuple[int, str]]] = {}
        """Per scope, (start, declaration id) of its declarations, sorted."""
        self._version: dict[str, int] = {}
        self._end_cache: dict[str, tuple[int, int]] = {}
        self._closing: list[tuple[int, str]] = []
        """Every pending declaration has an entry keyed by its current end; entries left by an
        end that moved earlier, or by a decided declaration, are skipped when popped."""

    def add(self, d: Windowed, pending: Mapping[str, Windowed]) -> None:
        """Open the window of pending ``d``; it may cut the windows starting just before it."""
        starts = self._scope_starts.setdefault(d.scope, [])
        i = bisect.bisect_left(starts, d.start, key=_START)
        bisect.insort(starts, (d.start, d.obs_id), i)
        self._version[d.scope] = self._version.get(d.scope, 0) + 1
        heapq.heappush(self._closing, (self.end(d), d.obs_id))
        if i and self.cut_at_next_start:
            # Those starting just before d now end at d's start at the latest.
            before = starts[i - 1][0]
            while i and starts[i - 1][0] == before:
                i -= 1
                prev = pending.get(starts[i][1])
                if prev is not None:
                    heapq.heappush(self._closing, (self.end(prev), prev.obs_id))

    def end(self, d: Windowed) -> int:
        """The inclusive end of ``d``'s window given the declarations known now."""
        version = self._version.get(d.scope, 0)
        cached = self._end_cache.get(d.obs_id)
        if cached is not None and cached[0] == version:
            return cached[1]
        end = d.start + self.max_ns
        if d.end >= d.start and d.end > 0:
            end = min(end, d.end)
        if not self.cut_at_next_start:
            return end  # a later call cuts only after this one ended: the end is already here
        starts = self._scope_starts.get(d.scope, [])
        i = bisect.bisect_right(starts, d.start, key=_START)
        if i < len(starts):
            end = min(end, starts[i][0])
        self._end_cache[d.obs_id] = (version, end)
        return end

    def closed(self, watermark: int, pending: Mapping[str, D]) -> tuple[list[D], int]:
        """The pending declarations whose window ends at or before ``watermark``, and how many
        heap entries were visited to find them."""
        closing = self._closing
        ready: dict[str, D] = {}
        visited = 0
        while closing and closing[0][0] <= watermark:
            _, oid = heapq.heappop(closing)
            visited += 1
            d = pending.get(oid)
            if d is not None and oid not in ready and self.end(d) <= watermark:
                ready[oid] = d
        return list(ready.values()), visited

    def close_all(self) -> None:
        """Forget the closing order (everything pending is being decided)."""
        self._closing.clear()

    def forget(self, obs_id: str) -> None:
        """Drop the cached end of an evicted declaration."""
        self._end_cache.pop(obs_id, None)

    def evict_starts_before(self, keep: int) -> None:
        """Forget starts before ``keep`` (no pending window can be cut by them any more)."""
        for scope, starts in list(self._scope_starts.items()):
            n = bisect.bisect_left(starts, keep, key=_START)
            if n:
                del starts[:n]
            if not starts:
                del self._scope_starts[scope]
