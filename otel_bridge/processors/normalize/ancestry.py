"""Bounded memory of span ancestry, so a relation can be resolved across batches.

Spans of one trace arrive in any order and in any batch: an ``execute_tool`` span is usually
exported *before* the ``invoke_agent`` span that contains it. :class:`Ancestry` remembers, for
at least the most recent ``capacity`` spans (two generations of at most ``capacity`` each), which
entity each span stands for and its parent.
A relation whose ancestor is not known yet waits in a bounded FIFO of pending links keyed by the
missing span; when that span arrives the link is resolved. A link evicted from the pending FIFO,
or still waiting at shutdown, is returned so the caller reports it as coverage instead of guessing.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import msgspec

from otel_bridge.model import Entity, Observation, Source

SpanKey = bytes
"""Trace id + span id (24 bytes). One bytes object rather than a tuple: a span memory entry
then holds no object of the cyclic garbage collector's, and one fewer to free when it is
forgotten (a generation of ``capacity`` entries is freed at once, long out of the CPU cache)."""


class Role(enum.StrEnum):
    """What a span stands for in the graph.

    A ``StrEnum`` for its hash: roles are looked up in sets once per span, and a plain ``Enum``
    hashes through a Python-level ``__hash__``.
    """

    AGENT = "agent"
    TOOL = "tool"
    MODEL = "model"
    """A model call: its entity (the model) is shared, so it is transparent for ancestry."""
    PLAIN = "plain"


class SpanInfo(msgspec.Struct, frozen=True, gc=False):
    """What is remembered of one span (positional: one is built per span, cheaply)."""

    role: Role
    entity: Entity | None
    parent: SpanKey | None


@dataclass(frozen=True, slots=True)
class Found:
    """The walk reached an accepted ancestor."""

    entity: Entity


@dataclass(frozen=True, slots=True)
class Missing:
    """The walk reached a span that has not arrived (or was forgotten)."""

    key: SpanKey


@dataclass(frozen=True, slots=True)
class Root:
    """The walk reached the root; ``fallback`` is the nearest ancestor with an entity."""

    fallback: Entity | None


Outcome = Found | Missing | Root


@dataclass(frozen=True, slots=True)
class PendingLink:
    """A relation waiting for an ancestor. ``resolve`` builds its observations on arrival."""

    accept: frozenset[Role]
    fallback: Entity | None
    """Nearest entity-bearing ancestor met before the walk stopped at the missing span."""
    resolve: Callable[[Outcome], list[Observation]]
    source: Source
    """Source of the waiting span, for the coverage record if the ancestor never arrives."""
    time_unix_nano: int
    describe: str


_MAX_DEPTH = 512


class Ancestry:
    """The span memory and the pending links (see the module docstring). Not thread-safe.

    The span memory is two generations of plain dictionaries: spans are remembered in the
    current one; when it holds ``capacity`` spans it becomes the previous one (the older
    previous generation is dropped) and a new current one starts. So the most recent
    ``capacity`` spans are always remembered, and at most ``2 * capacity`` are held. This costs a
    dictionary store per span, where a least-recently-used order costs a linked-list update too.
    """

    def __init__(self, capacity: int, pending_capacity: int) -> None:
        self._capacity = max(1, capacity)
        self._pending_capacity = max(1, pending_capacity)
        self.current: dict[SpanKey, SpanInfo] = {}
        """The span memory's current generation."""
        self.previous: dict[SpanKey, SpanInfo] = {}
        """The span memory's previous generation."""
        self.pending: OrderedDict[SpanKey, list[PendingLink]] = OrderedDict()
        """The links waiting for each missing span, oldest first."""
        self.room = self._capacity - 1
        """While :attr:`current` holds fewer spans than this, one more does not start a new
        generation. The span hot path (``spans.SpanNormalizer.normalize_into``) reads these four
        to look a span up and remember one itself, as :meth:`lookup` and :meth:`remember` do."""
        self._pending_count = 0

    def __len__(self) -> int:
        return len(self.current) + len(self.previous)

    @property
    def pending_count(self) -> int:
        """Links still waiting for an ancestor."""
        return self._pending_count

    def remember(self, key: SpanKey, info: SpanInfo) -> Sequence[PendingLink]:
        """Record a span; return the links that were waiting for it (to be walked again)."""
        spans = self.current
        spans[key] = info
        if self.previous:
            self.previous.pop(key, None)  # a span seen again lives in the current generation only
        if len(spans) >= self._capacity:
            self.previous = spans
            self.current = {}
        if not self.pending:
            return ()
        waiting = self.pending.pop(key, None)
        if waiting is None:
            return ()
        self._pending_count -= len(waiting)
        return waiting

    def lookup(self, key: SpanKey) -> SpanInfo | None:
        """What is remembered of span ``key``, or None."""
        info = self.current.get(key)
        if info is None and self.previous:
            return self.previous.get(key)
        return info

    def walk(
        self, start: SpanKey | None, accept: frozenset[Role], fallback: Entity | None = None
    ) -> tuple[Outcome, Entity | None]:
        """Walk up from ``start`` to the first span whose role is in ``accept``.

        Returns the outcome and the nearest entity-bearing ancestor met on the way.
        """
        key = start
        for _ in range(_MAX_DEPTH):
            if key is None:
                return Root(fallback), fallback
            info = self.lookup(key)
            if info is None:
                return Missing(key), fallback
            if info.role in accept and info.entity is not None:
                return Found(info.entity), fallback
            if fallback is None and info.entity is not None:
                fallback = info.entity
            key = info.parent
        return Root(fallback), fallback

    def wait(self, key: SpanKey, link: PendingLink) -> list[PendingLink]:
        """Park ``link`` until span ``key`` arrives; return links evicted to stay bounded."""
        self.pending.setdefault(key, []).append(link)
        self._pending_count += 1
        evicted: list[PendingLink] = []
        while self._pending_count > self._pending_capacity and self.pending:
            _, links = self.pending.popitem(last=False)
            self._pending_count -= len(links)
            evicted.extend(links)
        return evicted

    def drain(self) -> list[PendingLink]:
        """Every link still waiting (at shutdown); the pending table is emptied."""
        links = [link for waiting in self.pending.values() for link in waiting]
        self.pending.clear()
        self._pending_count = 0
        return links
