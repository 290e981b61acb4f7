"""The ``summary`` block of ``graph.json``: totals and counts by kind, relation, channel, grade,
causal status and coverage reason."""

from __future__ import annotations

from collections import Counter
from typing import Any

from otel_bridge.grading import Flag

CAUSAL_NAMES: dict[Flag, str] = {None: "unknown", True: "true", False: "false", "mixed": "mixed"}


class Summary:
    """Summary counts of the accumulator; the snapshot fills them per distinct mask."""

    def __init__(self) -> None:
        self.by_kind: Counter[str] = Counter()
        self.nodes_by_channel: Counter[str] = Counter()
        self.by_relation: Counter[str] = Counter()
        self.edges_by_channel: Counter[str] = Counter()
        self.by_grade: Counter[str] = Counter()
        self.by_causal: Counter[str] = Counter()
        self.nodes = 0
        self.edges = 0

    def to_dict(
        self, coverage: Counter[str], coverage_by_channel: Counter[str], observations: int
    ) -> dict[str, Any]:
        """The summary block."""
        return {
            "nodes": self.nodes,
            "edges": self.edges,
            "observations": observations,
            "nodes_by_kind": dict(sorted(self.by_kind.items())),
            "nodes_by_channel": dict(sorted(self.nodes_by_channel.items())),
            "edges_by_relation": dict(sorted(self.by_relation.items())),
            "edges_by_channel": dict(sorted(self.edges_by_channel.items())),
            "edges_by_grade": dict(sorted(self.by_grade.items())),
            "edges_by_causal": dict(sorted(self.by_causal.items())),
            "coverage": dict(sorted(coverage.items())),
            "coverage_by_channel": dict(sorted(coverage_by_channel.items())),
            "coverage_total": sum(coverage.values()),
        }


def causal_name(flag: Flag) -> str:
    """``true``/``false``/``mixed``/``unknown`` for an aggregated causal flag."""
    return CAUSAL_NAMES[flag]


def summarize(
    nodes: list[dict[str, Any]],
    edges: list[dict[str, Any]],
    coverage: Counter[str] | dict[str, int],
    coverage_by_channel: Counter[str] | dict[str, int],
    observations: int,
) -> dict[str, Any]:
    """The ``summary`` block: totals and counts by kind, relation, channel, grade, coverage."""
    by_kind: Counter[str] = Counter(n["kind"] for n in nodes)
    by_relation: Counter[str] = Counter(e["relation"] for e in edges)
    by_grade: Counter[str] = Counter(e["grade"] for e in edges)
    by_causal: Counter[str] = Counter(causal_name(e["causal"]) for e in edges)
    nodes_by_channel: Counter[str] = Counter(c for n in nodes for c in n["channels"])
    edges_by_channel: Counter[str] = Counter(c for e in edges for c in e["channels"])
    return {
        "nodes": len(nodes),
        "edges": len(edges),
        "observations": observations,
        "nodes_by_kind": dict(sorted(by_kind.items())),
        "nodes_by_channel": dict(sorted(nodes_by_channel.items())),
        "edges_by_relation": dict(sorted(by_relation.items())),
        "edges_by_channel": dict(sorted(edges_by_channel.items())),
        "edges_by_grade": dict(sorted(by_grade.items())),
        "edges_by_causal": dict(sorted(by_causal.items())),
        "coverage": dict(sorted(coverage.items())),
        "coverage_by_channel": dict(sorted(coverage_by_channel.items())),
        "coverage_total": sum(coverage.values()),
    }
