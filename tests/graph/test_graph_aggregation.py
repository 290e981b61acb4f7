"""Boolean aggregation of evidence flags (paper V-F) and invariant I1."""

from __future__ import annotations

from typing import Any

import pytest
from graph_helpers import obs
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.grading import aggregate_flag
from otel_bridge.graph import GraphAccumulator
from otel_bridge.model import Attribution, Evidence

FLAG_SETS = [
    ([], None),
    ([None, None], None),
    ([True], True),
    ([True, None], True),
    ([False], False),
    ([False, None, False], False),
    ([True, False], "mixed"),
    ([None, True, None, False], "mixed"),
]


def _edge(evidences: list[Evidence]) -> dict[str, Any]:
    acc = GraphAccumulator()
    acc.apply_many([obs(f"r{i}", evidence=ev) for i, ev in enumerate(evidences)])
    (edge,) = acc.to_dict()["edges"]
    found: dict[str, Any] = edge
    return found


@pytest.mark.parametrize(("flags", "expected"), FLAG_SETS)
def test_causal_inferred_exact_aggregate_explicit_flags(
    flags: list[bool | None], expected: Any
) -> None:
    """Only true -> true, only false -> false, both -> "mixed", none -> null; None ignored."""
    if not flags:
        flags = [None]
    for field in ("causal", "inferred", "identity_exact"):
        edge = _edge([Evidence(**{field: f}) for f in flags])  # type: ignore[arg-type]
        assert edge[field] == expected, field


def test_mixed_and_unknown_stay_distinct_in_json() -> None:
    """ "mixed" and null are different values in graph.json."""
    mixed = _edge([Evidence(causal=True), Evidence(causal=False)])
    unknown = _edge([Evidence(), Evidence()])
    assert mixed["causal"] == "mixed"
    assert unknown["causal"] is None


def test_attribution_is_the_sorted_set_of_modes() -> None:
    """The attribution field lists every mode seen once, sorted."""
    edge = _edge(
        [
            Evidence(attribution=Attribution.SYSCALL),
            Evidence(attribution=Attribution.SAMPLED_PROCESS),
            Evidence(attribution=Attribution.SYSCALL),
            Evidence(),
        ]
    )
    assert edge["attribution"] == ("sampled_process", "syscall")


@pytest.mark.parametrize(
    ("evidences", "grade"),
    [
        ([Evidence(attribution=Attribution.SYSCALL, causal=True)], "A"),
        ([Evidence(attribution=Attribution.SAMPLED_PROCESS, causal=True)], "B"),
        (
            [
                Evidence(attribution=Attribution.SYSCALL, causal=True),
                Evidence(attribution=Attribution.SAMPLED_PROCESS, causal=True),
            ],
            "B",
        ),
        ([Evidence(attribution=Attribution.SESSION_OBSERVATION, causal=False)], "C"),
        (
            [
                Evidence(
                    attribution=Attribution.EXACT_IDENTITY,
                    identity_exact=True,
                    inferred=False,
                    causal=False,
                )
            ],
            "C",
        ),
        (
            [
                Evidence(
                    attribution=Attribution.HEURISTIC,
                    inferred=True,
                    causal=False,
                    method="m",
                    score=0.9,
                )
            ],
            "D",
        ),
        (
            [
                Evidence(attribution=Attribution.SYSCALL, causal=True),
                Evidence(attribution=Attribution.SYSCALL, inferred=True),
            ],
            "D",
        ),
        ([Evidence(attribution=Attribution.SYSCALL)], "U"),
        ([Evidence(attribution=Attribution.REPORTED)], "U"),
        (
            [
                Evidence(attribution=Attribution.SYSCALL, causal=True),
                Evidence(attribution=Attribution.SYSCALL, causal=False),
            ],
            "U",
        ),
        ([Evidence()], "U"),
    ],
)
def test_grade_follows_table_two(evidences: list[Evidence], grade: str) -> None:
    """Edge grades follow Table II with its precedence (D, then C, then weakest mode)."""
    assert _edge(evidences)["grade"] == grade


evidence_st = st.builds(
    Evidence,
    attribution=st.one_of(st.none(), st.sampled_from(list(Attribution))),
    causal=st.one_of(st.none(), st.booleans()),
    inferred=st.one_of(st.none(), st.booleans()),
    identity_exact=st.one_of(st.none(), st.booleans()),
    method=st.one_of(st.none(), st.sampled_from(["m1", "m2"])),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(evidence_st, min_size=1, max_size=8))
def test_aggregation_matches_the_grading_module(evidences: list[Evidence]) -> None:
    """Each aggregated flag equals grading.aggregate_flag over the support's flags."""
    edge = _edge(evidences)
    assert edge["causal"] == aggregate_flag(e.causal for e in evidences)
    assert edge["inferred"] == aggregate_flag(e.inferred for e in evidences)
    assert edge["identity_exact"] == aggregate_flag(e.identity_exact for e in evidences)


@settings(max_examples=150, deadline=None)
@given(st.lists(evidence_st, min_size=1, max_size=8))
def test_no_promotion_of_explicitly_non_causal_support(evidences: list[Evidence]) -> None:
    """I1: without an explicit causal=True in the support, the edge is never causal true,
    and an edge whose explicit flags are all false stays false and never grades A or B."""
    edge = _edge(evidences)
    explicit = {e.causal for e in evidences if e.causal is not None}
    if True not in explicit:
        assert edge["causal"] is not True
        assert edge["grade"] not in ("A", "B")
    if explicit == {False}:
        assert edge["causal"] is False
    if edge["causal"] == "mixed":
        assert edge["grade"] not in ("A", "B")
