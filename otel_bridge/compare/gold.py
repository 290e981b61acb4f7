"""Precision and recall of dependency edges against a hand-written gold list, per method.

Gold edges name calls by their ``gen_ai.tool.call.id`` (``ToolCallFacts.call_id``), so a gold
list is written once per scripted task variant and applies to every run of it. A reported edge
is a true positive of its method when the gold list has the same (producer, consumer, method).
Candidates are scored against the union of the gold edges of every method (any real dependency
is a correct candidate).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .provenance import CANDIDATE, METHODS

GoldEdge = tuple[str, str, str]


def reported_edges(provenance: Mapping[str, Any]) -> set[GoldEdge]:
    """(producer call id, consumer call id, method) of a run's dependency edges."""
    call_ids = {
        a["id"]: a.get("call_id") for a in provenance["activities"] if a["type"] == "tool_call"
    }
    out: set[GoldEdge] = set()
    for edge in provenance["edges"]:
        if edge["method"] in METHODS:
            # dependency edges point from the informed (later) call to the informant
            out.add((str(call_ids[edge["target"]]), str(call_ids[edge["source"]]), edge["method"]))
    return out


def tally(
    pairs: Iterable[tuple[set[GoldEdge], set[GoldEdge]]],
) -> dict[str, dict[str, float | int | None]]:
    """Per method: true/false positives, false negatives, precision and recall over runs."""
    counts = {m: [0, 0, 0] for m in METHODS}
    for reported, gold in pairs:
        any_gold = {(p, c) for p, c, _ in gold}
        for method in METHODS:
            mine = {(p, c) for p, c, m in reported if m == method}
            truth = any_gold if method == CANDIDATE else {(p, c) for p, c, m in gold if m == method}
            counts[method][0] += len(mine & truth)
            counts[method][1] += len(mine - truth)
            if method != CANDIDATE:
                counts[method][2] += len(truth - mine)
    out: dict[str, dict[str, float | int | None]] = {}
    for method, (tp, fp, fn) in counts.items():
        out[method] = {
            "tp": tp,
            "fp": fp,
            "fn": fn if method != CANDIDATE else None,
            "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if method != CANDIDATE and tp + fn else None,
        }
    return out
