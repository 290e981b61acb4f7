"""Tool impact: Shapley values of tool presence on the outcome score.

Players are the tools seen in any scored run. The value of a coalition S of tools is

    v(S) = (1 / |R|) * sum of score(r) over the scored runs r whose tools are all in S,

the mean score the runs would keep if only the tools in S were available (a run that needed a
tool outside S contributes nothing). v(empty) is the mean score of runs that called no tool (0
when every run called one) and v(all tools) the mean score. Shapley values split
v(all) - v(empty) among the tools: phi_u is u's average marginal contribution over all orders
in which tools join. For this game that equals the mean over runs of score(r) / |tools(r)| for
the runs using u (each run's score shared equally among the tools it used), which the tests
check; the general computation stays so another value function can be dropped in.

Up to :data:`EXACT_LIMIT` tools the values are exact (all 2^n coalitions); beyond, they are
estimated from random permutations (seeded, so repeatable) and each comes with its standard
error.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

EXACT_LIMIT = 12
VALUE_FUNCTION = (
    "v(S) = (1/|R|) * sum of score(r) over scored runs r whose set of tools is a subset of S"
)


def _value_table(masks: Sequence[int], scores: Sequence[float], n: int) -> list[float]:
    total = len(masks)
    table = [0.0] * (1 << n)
    for mask, score in zip(masks, scores, strict=True):
        table[mask] += score
    for bit in range(n):  # subset-sum (zeta) transform: table[S] = sum over masks within S
        step = 1 << bit
        for s in range(1 << n):
            if s & step:
                table[s] += table[s ^ step]
    return [v / total for v in table]


def _exact(masks: Sequence[int], scores: Sequence[float], n: int) -> list[float]:
    v = _value_table(masks, scores, n)
    weight = [math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n) for k in range(n)]
    phi = [0.0] * n
    for s in range(1 << n):
        size = s.bit_count()
        for u in range(n):
            if not s & (1 << u):
                phi[u] += weight[size] * (v[s | (1 << u)] - v[s])
    return phi


class _Game:
    """v(S) over the distinct tool sets of the runs, memoized per coalition."""

    def __init__(self, masks: Sequence[int], scores: Sequence[float]) -> None:
        grouped: dict[int, float] = {}
        for mask, score in zip(masks, scores, strict=True):
            grouped[mask] = grouped.get(mask, 0.0) + score
        self.groups = sorted(grouped.items())
        self.total = len(masks)
        self.memo: dict[int, float] = {}

    def value(self, mask: int) -> float:
        if mask not in self.memo:
            inside = sum(sc for m, sc in self.groups if m & ~mask == 0)
            self.memo[mask] = inside / self.total
        return self.memo[mask]


def _sampled(
    masks: Sequence[int], scores: Sequence[float], n: int, samples: int, seed: int
) -> tuple[list[float], list[float]]:
    rng = random.Random(seed)
    sums = [0.0] * n
    squares = [0.0] * n
    order = list(range(n))
    game = _Game(masks, scores)
    base = game.value(0)
    for _ in range(samples):
        rng.shuffle(order)
        mask, previous = 0, base
        for u in order:
            mask |= 1 << u
            current = game.value(mask)
            delta = current - previous
            sums[u] += delta
            squares[u] += delta * delta
            previous = current
    means = [s / samples for s in sums]
    errors = [
        math.sqrt(max(squares[u] / samples - means[u] ** 2, 0.0) / max(samples - 1, 1))
        for u in range(n)
    ]
    return means, errors


def shapley(
    tool_sets: Mapping[str, frozenset[str]],
    scores: Mapping[str, float | None],
    *,
    samples: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """The ``impact`` object: per-tool Shapley values over the scored runs."""
    scored = sorted(r for r in tool_sets if scores.get(r) is not None)
    tools = sorted({t for r in scored for t in tool_sets[r]})
    out: dict[str, Any] = {
        "value_function": VALUE_FUNCTION,
        "runs_scored": len(scored),
        "tools": {},
        "method": None,
        "samples": None,
    }
    if not scored or not tools:
        return out
    index = {t: i for i, t in enumerate(tools)}
    masks = [sum(1 << index[t] for t in tool_sets[r]) for r in scored]
    values = [float(scores[r] or 0.0) for r in scored]
    n = len(tools)
    if n <= EXACT_LIMIT:
        phi, errors = _exact(masks, values, n), [0.0] * n
        out["method"] = "exact"
    else:
        phi, errors = _sampled(masks, values, n, samples, seed)
        out["method"], out["samples"] = "permutation_sampling", samples
    out["tools"] = {t: {"shapley": phi[i], "stderr": errors[i]} for t, i in index.items()}
    return out
