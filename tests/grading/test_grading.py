"""Table II grading: precedence rules, weakest-grade order, invariant I1, the grade processor."""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_bridge.component import Host
from otel_bridge.grading import aggregate_flag, grade_edge, grade_evidence, weakest
from otel_bridge.model import (
    GRADE_ORDER,
    Attribution,
    Batch,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    Grade,
    Observation,
    Source,
)
from otel_bridge.processors.grade import factory, grade_batch
from otel_bridge.testing import RecordingConsumer

A, B, C, D, U = Grade.A, Grade.B, Grade.C, Grade.D, Grade.U
SYS, SAMP, SESS = Attribution.SYSCALL, Attribution.SAMPLED_PROCESS, Attribution.SESSION_OBSERVATION
EXACT, HEUR, REP = Attribution.EXACT_IDENTITY, Attribution.HEURISTIC, Attribution.REPORTED

Flag = bool | None | Literal["mixed"]

TABLE: list[tuple[frozenset[Attribution], Flag, Flag, str | None, Grade]] = [
    (frozenset({SYS}), True, None, None, A),
    (frozenset({SYS}), True, False, None, A),
    (frozenset({SAMP}), True, None, None, B),
    (frozenset({SYS, SAMP}), True, None, None, B),  # weakest applicable
    (frozenset({SESS}), None, None, None, C),
    (frozenset({SESS}), True, None, None, C),
    (frozenset({SYS, SESS}), True, None, None, C),
    (frozenset({SYS}), None, None, None, U),  # no explicit causal flag
    (frozenset({SAMP}), None, None, None, U),
    (frozenset({SYS}), "mixed", None, None, U),  # conflicting flags stay mixed
    (frozenset({SYS}), False, None, None, C),  # explicitly non-causal
    (frozenset({SESS}), False, None, None, C),
    (frozenset({HEUR}), False, True, "singleton:basename", D),  # bridge: D, not C
    (frozenset({SYS}), True, True, None, D),  # explicit inference first
    (frozenset({SYS}), True, "mixed", None, D),
    (frozenset({SYS}), True, None, "some_rule", D),  # a recorded inference method
    (frozenset({EXACT}), False, False, "traceparent", C),  # identity method, not inference
    (frozenset({REP}), None, None, None, U),
    (frozenset({EXACT}), None, False, None, U),
    (frozenset(), None, None, None, U),
    (frozenset(), False, None, None, C),
    (frozenset({SYS, REP}), True, None, None, U),  # mixed provenance: weakest applies
]


@pytest.mark.parametrize(("attrs", "causal", "inferred", "method", "grade"), TABLE)
def test_table(
    attrs: frozenset[Attribution], causal: Flag, inferred: Flag, method: str | None, grade: Grade
) -> None:
    """Each row of Table II, with the precedence rules applied first."""
    assert grade_edge(attrs, causal, inferred, method) == grade


def test_grade_evidence_single() -> None:
    """An observation's own evidence fields grade like a one-attribution edge."""
    assert grade_evidence(Evidence(attribution=SYS, causal=True)) == A
    assert grade_evidence(Evidence()) == U
    assert grade_evidence(Evidence(attribution=HEUR, inferred=True, causal=False, method="m")) == D


@pytest.mark.parametrize(
    ("grades", "out"),
    [([], U), ([A], A), ([A, B], B), ([A, C, B], C), ([D, C], D), ([A, U], U), ([B, B], B)],
)
def test_weakest(grades: list[Grade], out: Grade) -> None:
    """The weakest grade in the order A, B, C, D, U wins; no grade at all is U."""
    assert weakest(grades) == out
    assert weakest(iter(grades)) == out


@pytest.mark.parametrize(
    ("flags", "out"),
    [
        ([], None),
        ([None, None], None),
        ([True], True),
        ([True, None], True),
        ([False, None], False),
        ([True, False], "mixed"),
    ],
)
def test_aggregate_flag(flags: list[bool | None], out: Flag) -> None:
    """Explicit flags aggregate as in section V-F; omitted flags are ignored."""
    assert aggregate_flag(flags) == out


attributions = st.frozensets(st.sampled_from(list(Attribution)))
flags: st.SearchStrategy[Flag] = st.sampled_from([True, False, None, "mixed"])
methods = st.sampled_from([None, "", "singleton:tail", "traceparent"])


@given(attributions, st.lists(st.booleans(), min_size=1), flags, methods)
def test_i1_non_causal_never_promoted(
    attrs: frozenset[Attribution], explicit: list[bool], inferred: Flag, method: str | None
) -> None:
    """I1: support that is explicitly non-causal (alone) never grades A or B."""
    causal = aggregate_flag([False for _ in explicit])
    assert causal is False
    assert grade_edge(attrs, causal, inferred, method) in (C, D)


@given(attributions, st.lists(st.sampled_from([True, False, None])), flags, methods)
def test_a_b_need_explicit_causal_true(
    attrs: frozenset[Attribution], fl: list[bool | None], inferred: Flag, method: str | None
) -> None:
    """A and B require an aggregate causal flag that is exactly True (mixed is not)."""
    causal = aggregate_flag(fl)
    g = grade_edge(attrs, causal, inferred, method)
    if g in (A, B):
        assert causal is True
        assert inferred is not True
        assert inferred != "mixed"


@given(attributions, flags, methods)
def test_inferred_is_always_d(
    attrs: frozenset[Attribution], causal: Flag, method: str | None
) -> None:
    """An explicitly inferred edge is D whatever else it carries."""
    assert grade_edge(attrs, causal, True, method) == D


@given(st.lists(st.sampled_from(GRADE_ORDER)))
def test_weakest_is_never_stronger_than_an_input(grades: list[Grade]) -> None:
    """The weakest grade is never stronger than any grade it was taken over."""
    g = weakest(grades)
    assert all(GRADE_ORDER.index(g) >= GRADE_ORDER.index(e) for e in grades)


def _obs(ev: Evidence, n: int) -> Observation:
    ent = Entity(kind=EntityKind.PROCESS, id=f"process:h:{n}:1")
    return Observation(
        id=f"r{n}#0",
        time_unix_nano=n,
        source=Source(channel=Channel.OS, backend="linux", record_id=f"r{n}"),
        subject=ent,
        relation=None,
        evidence=ev,
    )


def test_grade_processor_sets_every_grade() -> None:
    """The grade processor sets evidence.grade on every observation and forwards the batch."""
    evs = [
        Evidence(attribution=SYS, causal=True),
        Evidence(attribution=SESS, causal=False),
        Evidence(attribution=HEUR, inferred=True, causal=False, method="m", grade=A),
        Evidence(),
    ]
    batch = Batch(observations=tuple(_obs(e, i) for i, e in enumerate(evs)))
    sink = RecordingConsumer()
    from otel_bridge.component import CreateSettings

    proc = factory.create(CreateSettings(id="grade"), factory.default_config(), sink)
    proc.start(Host())
    proc.consume(batch)  # type: ignore[attr-defined]
    proc.shutdown()
    [out] = sink.batches
    assert [o.evidence.grade for o in out.observations] == [A, C, D, U]
    assert grade_batch(Batch()) == Batch()
