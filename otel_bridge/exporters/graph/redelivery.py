"""The graph exporter's memory of what it applied: a redelivered observation counts once.

An observation id is unique per observation (``docs/contracts.md``): ``<span id>#<n>`` for a
span's, ``<record id>#<n>`` for an OS record's, a derived id for ``correlate``'s and
``crosshost``'s. The same id arriving again is the same observation delivered again, not new
evidence: an SDK that retried a span the collector had already accepted, an agent's persistent
queue resending a batch a gateway journaled but had not acknowledged when it was killed
(``logs_to_evidence`` remembers a batch's keys only after its exporters took it), after the
journal's replay. :class:`Delivered` lets each through once, so ``evidence_count`` counts
distinct observations, as the store does.

Identity: the id **and** the time (``time_unix_nano``). The id alone is not enough: OS record
ids count from 1 in every collector process, so a collector restarted on its journal
(``configs/local.yaml``) makes new observations with ids the journal already holds, and two
hosts' OS records reaching one collector without a gateway's scoping (``logs_to_evidence``
scopes them per agent instance) can share an id. A copy has both the same; two different
observations with the same id and the same nanosecond would break the id's contract. An
observation with an empty id always counts.

Bounded like the accumulator's occurrence window: two generations of at least ``window // 2``
identities each, so the last ``window // 2`` distinct observations are recognised exactly; a
copy of one older than that counts again (evidence can only err upwards, never lose an
observation).
"""

from __future__ import annotations

from otel_bridge.model import Observation

__all__ = ["Delivered"]


class Delivered:
    """Identities of the observations already applied, in a bounded window: id -> time."""

    def __init__(self, window: int) -> None:
        self._half = max(1, window // 2)
        self._current: dict[str, int] = {}
        self._previous: dict[str, int] = {}
        self._more: dict[str, set[int]] = {}
        """Further times of an id seen at more than one (another process's or host's record
        with the same id; forgotten at each rotation: an overcount, never a loss)."""

    def fresh(self, observations: tuple[Observation, ...]) -> tuple[Observation, ...]:
        """``observations`` less the ones already let through (a copy later in the same batch
        included), in order, and remember them; ``observations`` itself when none repeats.

        Called for every batch. The usual batch holds no id seen before and none twice: that is
        found and remembered by dictionary operations in C; any other batch goes through
        :meth:`_fresh`, the reference, one observation at a time."""
        batch = {o.id: o.time_unix_nano for o in observations}
        current, previous = self._current, self._previous
        if (
            len(batch) == len(observations)
            and current.keys().isdisjoint(batch)
            and (not previous or previous.keys().isdisjoint(batch))
        ):
            current.update(batch)
            if len(current) >= self._half:
                self._rotate()
            return observations
        return self._fresh(observations)

    def _fresh(self, observations: tuple[Observation, ...]) -> tuple[Observation, ...]:
        """:meth:`fresh`, one observation at a time. An id remembered with another time is
        another observation: it counts, and both times are remembered."""
        out: list[Observation] | None = None
        for i, o in enumerate(observations):
            oid, t = o.id, o.time_unix_nano
            seen = self._current.get(oid)
            if seen is None:
                seen = self._previous.get(oid)
            if oid and (seen == t or t in self._more.get(oid, ())):  # a copy
                if out is None:
                    out = list(observations[:i])
                continue
            if seen is not None:  # the same id at another time: another observation
                self._more.setdefault(oid, set()).add(seen)
            self._current[oid] = t
            if len(self._current) >= self._half:
                self._rotate()
            if out is not None:
                out.append(o)
        return observations if out is None else tuple(out)

    def forget(self, observations: tuple[Observation, ...]) -> None:
        """Forget ``observations``, just let through by :meth:`fresh` and not applied after all:
        a copy of one counts."""
        for o in observations:
            self._current.pop(o.id, None)
            self._previous.pop(o.id, None)
            self._more.pop(o.id, None)

    def _rotate(self) -> None:
        self._previous, self._current = self._current, {}
        self._more.clear()

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)
