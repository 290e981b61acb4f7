"""Evidence grading: the pure Table II classifier of the ExecWeave paper (section IV-D).

Precedence, applied in order to one edge (or one observation):

1. **D** when the edge is explicitly inferred (``inferred`` true, or mixed: some support was
   inferred) or records an inference method (``method`` non-empty). A method recorded on an edge
   that is explicitly *not* inferred (``inferred=False``: an exact-identity link naming the
   identifier it shares, such as ``traceparent``) is an identity method, not an inference
   method, and does not make the edge D; such links are ``causal=False`` and so grade C.
2. **C** when the edge is explicitly non-causal (``causal`` is ``False``).
3. Otherwise each attribution mode present gives a grade and the weakest one wins:
   ``syscall`` with an explicit ``causal=True`` gives **A**, ``sampled_process`` with an explicit
   ``causal=True`` gives **B**, ``session_observation`` gives **C**, anything else (an unknown or
   missing attribution, a syscall attribution without an explicit causal flag, ``reported``,
   ``heuristic`` without a method) gives **U**. No attribution at all gives **U**.

Grades are ordered A, B, C, D, U from strongest to weakest; :func:`weakest` picks the weakest of
several (``U`` when there are none).

Invariant I1 (no promotion of explicitly non-causal support) follows from the precedence: a
``causal=False`` edge can only be C or D, and an aggregate of explicit ``False`` flags stays
``False`` under :func:`aggregate_flag`. Mixed explicit flags stay ``"mixed"``, which is never
``True``, so a mixed edge cannot reach A or B either. Grades classify recorded provenance; they are
neither maliciousness scores nor probabilities.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from otel_bridge.model import GRADE_ORDER, Attribution, Evidence, Grade

Flag = bool | None | Literal["mixed"]
"""An aggregated Boolean evidence flag: explicit ``True``/``False``, absent, or ``"mixed"``."""

MIXED: Literal["mixed"] = "mixed"

_RANK: dict[Grade, int] = {g: i for i, g in enumerate(GRADE_ORDER)}


def weakest(grades: Iterable[Grade]) -> Grade:
    """The weakest of ``grades`` in the order A, B, C, D, U; ``U`` when there are none."""
    worst: Grade | None = None
    for g in grades:
        if worst is None or _RANK[g] > _RANK[worst]:
            worst = g
    return Grade.U if worst is None else worst


def aggregate_flag(flags: Iterable[bool | None]) -> Flag:
    """Aggregate explicit Boolean flags as section V-F prescribes.

    Only ``True`` gives ``True``, only ``False`` gives ``False``, both give ``"mixed"``, and none
    gives ``None``. An omitted flag (``None``) is ignored, never read as ``False``.
    """
    seen = {f for f in flags if f is not None}
    if not seen:
        return None
    if len(seen) == 2:
        return MIXED
    return next(iter(seen))


def _attribution_grade(attribution: Attribution | str, causal: Flag) -> Grade:
    if attribution == Attribution.SYSCALL and causal is True:
        return Grade.A
    if attribution == Attribution.SAMPLED_PROCESS and causal is True:
        return Grade.B
    if attribution == Attribution.SESSION_OBSERVATION:
        return Grade.C
    return Grade.U


def grade_edge(
    attributions: frozenset[Attribution],
    causal: Flag,
    inferred: Flag,
    method: str | None,
) -> Grade:
    """Grade one edge from its aggregated evidence (Table II with the precedence rules).

    ``attributions`` is the set of attribution modes of the edge's support; ``causal`` and
    ``inferred`` are aggregated with :func:`aggregate_flag`; ``method`` is the recorded inference
    method, if any.
    """
    if inferred is True or inferred == MIXED or (method and inferred is not False):
        return Grade.D
    if causal is False:
        return Grade.C
    return weakest(_attribution_grade(a, causal) for a in attributions)


def grade_evidence(ev: Evidence) -> Grade:
    """Grade a single observation's evidence fields."""
    attributions = frozenset() if ev.attribution is None else frozenset({ev.attribution})
    return grade_edge(attributions, ev.causal, ev.inferred, ev.method)
