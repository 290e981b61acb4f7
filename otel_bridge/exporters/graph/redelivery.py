"""The graph exporter's memory of what it applied: a redelivered observation counts once.

An observation id is unique per observation (``docs/contracts.md``): ``<span id>#<n>`` for a
span's, ``<record id>#<n>`` for an OS record's, a derived id for ``correlate``'s and
``crosshost``'s. The same id arriving again is the same observation delivered again, not new
evidence: an SDK that retried a span the collector had already accepted, an agent's persistent
queue resending a batch a gateway journaled but had not acknowledged when it was killed
(``logs_to_evidence`` remembers a batch's keys only after its exporters took it), a journal
replayed before the resend of its last batch. :class:`Delivered` lets each through once, so
``evidence_count`` counts distinct observations, as the store does.

Identity: the id **and** ``time_unix_nano``. A copy carries both unchanged; OS record ids count
from 1 in every collector process, so a collector restarted on its journal (``configs/local.yaml``)
makes new observations whose ids the replayed ones already had, at other times: those count.
(Such an id then names the latest observation with it; a copy of the earlier one arriving after
that would count again: an overcount, never a loss.) An observation with an empty id always
counts.

Bounded like the accumulator's occurrence window: two generations of at most ``window // 2``
ids, so the last ``window // 2`` distinct observations are recognised exactly; a copy of one
older than that counts again (evidence can only err upwards, never lose an observation).
"""

from __future__ import annotations

from otel_bridge.model import Observation

__all__ = ["Delivered"]


class Delivered:
    """Ids (with times) of the observations already applied, in a bounded window."""

    def __init__(self, window: int) -> None:
        self._half = max(1, window // 2)
        self._current: dict[str, int] = {}
        self._previous: dict[str, int] = {}

    def fresh(self, observations: tuple[Observation, ...]) -> tuple[Observation, ...]:
        """``observations`` less the ones already let through (a copy later in the same batch
        included), in order, and remember them; ``observations`` itself when none repeats.

        Called for every batch, so one dictionary look-up and one store per observation, and no
        new tuple unless a copy is found."""
        current, previous, half = self._current, self._previous, self._half
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
                self._previous, self._current = current, {}
                previous, current = current, self._current
            if out is not None:
                out.append(o)
        return observations if out is None else tuple(out)

    def forget(self, observations: tuple[Observation, ...]) -> None:
        """Forget ``observations`` (let through, then not applied): a copy of one counts."""
        for o in observations:
            for generation in (self._current, self._previous):
                if generation.get(o.id) == o.time_unix_nano:
                    del generation[o.id]

    def __len__(self) -> int:
        return len(self._current) + len(self._previous)
