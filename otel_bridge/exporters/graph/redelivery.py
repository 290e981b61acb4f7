"""The graph exporter's memory of what it applied: a redelivered observation counts once.

An observation id is unique per observation (``docs/contracts.md``): ``<span id>#<n>`` for a
span's, ``<record id>#<n>`` for an OS record's, a derived id for ``correlate``'s and
``crosshost``'s. The same id arriving again is the same observation delivered again, not new
evidence: an SDK that retried a span the collector had already accepted, an agent's persistent
queue resending a batch a gateway journaled but had not acknowledged when it was killed
(``logs_to_evidence`` remembers a batch's keys only after its exporters took it), after the
journal's replay. :class:`Delivered` lets each through once, so ``evidence_count`` counts
distinct observations, as the store does.

Identity: the id, among the observations this process received (:meth:`Delivered.fresh`). The
journal replayed at start (:meth:`Delivered.replayed`) may hold observations of earlier
processes, and OS record ids count from 1 in every collector process, so a collector restarted on
its journal (``configs/local.yaml``) makes new observations with ids the journal already holds:
against the replayed ones the time (``time_unix_nano``) must match too. (A replayed id then names
the latest replayed observation with it; a copy of an earlier one would count again: an
overcount, never a loss.) An observation with an empty id always counts.

Bounded like the accumulator's occurrence window: two generations of at least ``window // 2``
ids each, so the last ``window // 2`` distinct observations are recognised exactly; a copy of one
older than that counts again (evidence can only err upwards, never lose an observation). The
replayed ids are forgotten when the first generation of received ones is full.
"""

from __future__ import annotations

from otel_bridge.model import Observation

__all__ = ["Delivered"]


class Delivered:
    """Ids of the observations already applied, in a bounded window."""

    def __init__(self, window: int) -> None:
        self._half = max(1, window // 2)
        self._current: set[str] = set()
        self._previous: set[str] = set()
        self._replayed: dict[str, int] = {}
        """Ids replayed from the journal, with their times (the newer generation)."""
        self._replayed_old: dict[str, int] = {}

    def fresh(self, observations: tuple[Observation, ...]) -> tuple[Observation, ...]:
        """``observations`` less the ones already let through (a copy later in the same batch
        included), in order, and remember them; ``observations`` itself when none repeats.

        Called for every batch. The usual batch holds no id seen before and none twice: that is
        found and remembered by set operations in C (about a fifth of what the loop of
        :meth:`_fresh`, the reference, costs per observation); any other batch goes through
        :meth:`_fresh`."""
        ids = [o.id for o in observations]
        current, previous = self._current, self._previous
        replayed, replayed_old = self._replayed, self._replayed_old
        if (
            current.isdisjoint(ids)
            and (not previous or previous.isdisjoint(ids))
            and (not replayed or replayed.keys().isdisjoint(ids))
            and (not replayed_old or replayed_old.keys().isdisjoint(ids))
        ):
            size = len(current)
            current.update(ids)
            if len(current) - size == len(ids):  # no id twice in the batch
                if len(current) >= self._half:
                    self._rotate()
                return observations
            current.difference_update(ids)  # none was there before: take the batch back out
        return self._fresh(observations)

    def _fresh(self, observations: tuple[Observation, ...]) -> tuple[Observation, ...]:
        """:meth:`fresh`, one observation at a time."""
        out: list[Observation] | None = None
        for i, o in enumerate(observations):
            oid = o.id
            if oid and (
                oid in self._current
                or oid in self._previous
                or self._replayed_time(oid) == o.time_unix_nano
            ):  # a copy of one already let through
                if out is None:
                    out = list(observations[:i])
                continue
            self._current.add(oid)
            if len(self._current) >= self._half:
                self._rotate()
            if out is not None:
                out.append(o)
        return observations if out is None else tuple(out)

    def replayed(self, observations: tuple[Observation, ...]) -> tuple[Observation, ...]:
        """Like :meth:`fresh`, for a batch replayed from the journal at start: a copy has the
        id and the time of one let through before."""
        current, previous, half = self._replayed, self._replayed_old, self._half
        out: list[Observation] | None = None
        for i, o in enumerate(observations):
            oid, t = o.id, o.time_unix_nano
            seen = current.get(oid)
            if seen is None and previous:
                seen = previous.get(oid)
            if seen == t and oid:  # a copy of one already let through
                if out is None:
                    out = list(observations[:i])
                continue
            current[oid] = t
            if len(current) >= half:
                self._replayed_old, self._replayed = current, {}
                previous, current = current, self._replayed
            if out is not None:
                out.append(o)
        return observations if out is None else tuple(out)

    def forget(self, observations: tuple[Observation, ...]) -> None:
        """Forget ``observations``, just let through by :meth:`fresh` and not applied after all:
        a copy of one counts."""
        ids = [o.id for o in observations]
        self._current.difference_update(ids)
        self._previous.difference_update(ids)

    def _replayed_time(self, oid: str) -> int | None:
        time = self._replayed.get(oid)
        return self._replayed_old.get(oid) if time is None else time

    def _rotate(self) -> None:
        self._previous, self._current = self._current, set()
        self._replayed, self._replayed_old = {}, {}  # older than every id now remembered

    def __len__(self) -> int:
        return (
            len(self._current) + len(self._previous) + len(self._replayed) + len(self._replayed_old)
        )
