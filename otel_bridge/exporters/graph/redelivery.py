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


Key = tuple[str, int]
"""An observation's identity here: (id, time_unix_nano)."""


class Delivered:
    """Identities of the observations already applied, in a bounded window."""

    def __init__(self, window: int) -> None:
        self._half = max(1, window // 2)
        self._current: set[Key] = set()
        self._previous: set[Key] = set()

    def fresh(self, observations: tuple[Observation, ...]) -> tuple[Observation, ...]:
        """``observations`` less the ones already let through (a copy later in the same batch
        included), in order, and remember them; ``observations`` itself when none repeats.

        Called for every batch. The usual batch holds no identity seen before and none twice:
        that is found and remembered by set operations in C; any other batch goes through
        :meth:`_fresh`, the reference, one observation at a time."""
        keys = [(o.id, o.time_unix_nano) for o in observations]
        current, previous = self._current, self._previous
        if current.isdisjoint(keys) and (not previous or previous.isdisjoint(keys)):
            size = len(current)
            current.update(keys)
            if len(current) - size == len(keys):  # no identity twice in the batch
                if len(current) >= self._half:
                    self._rotate()
                return observations
            current.difference_update(keys)  # none was there before: take the batch back out
        return self._fresh(observations)

    replayed = fresh
    """A batch replayed from the journal at start: the same rule (its identities are remembered
    for the resend that may follow)."""

    def _fresh(self, observations: tuple[Observation, ...]) -> tuple[Observation, ...]:
        """:meth:`fresh`, one observation at a time."""
        out: list[Observation] | None = None
        for i, o in enumerate(observations):
            key = (o.id, o.time_unix_nano)
            if o.id and (key in self._current or key in self._previous):  # a copy
                if out is None:
                    out = list(observations[:i])
                continue
            self._current.add(key)
            if len(self._current) >= self._half:
                self._rotate()
            if out is not None:
                out.append(o)
        return observations if out is None else tuple(out)

    def forget(self, observations: tuple[Observation, ...]) -> None:
        """Forget ``observations``, just let through by :meth:`fresh` and not applied after all:
        a copy of one counts."""
        keys = [(o.id, o.time_unix_nano) for o in observations]
        self._current.difference_update(keys)
        self._previous.difference_update(keys)

    def _rotate(self) -> None:
        self._previous, self._current = self._current, set()

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)
