"""Assemble ``compare.json`` from runs, validate it, and render ``compare.md``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from otel_bridge import schemas
from otel_bridge.errors import DecodeError

from .impact import shapley
from .inputs import RunData
from .joined import (
    COMPONENTS,
    DEFAULT_THRESHOLD,
    DEFAULT_WEIGHTS,
    Member,
    capsules,
    changed_assignments,
    cluster,
    joined_graph,
    normalized,
)
from .provenance import Dependency, dependencies, provenance

FORMAT = "otel-bridge.compare"
VERSION = 1


@dataclass(frozen=True, slots=True)
class CompareConfig:
    """How runs are compared."""

    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    threshold: float = DEFAULT_THRESHOLD
    ablation: bool = True
    shapley_samples: int = 2000


def coverage(runs: Sequence[RunData]) -> dict[str, Any]:
    """The coverage matrix M[run][tool] (calls of the tool) and the UpSet intersections."""
    tools = sorted({c.tool for r in runs for c in r.calls})
    matrix: dict[str, dict[str, int]] = {}
    for run in runs:
        row = dict.fromkeys(tools, 0)
        for call in run.calls:
            row[call.tool] += 1
        matrix[run.id] = row
    groups: dict[tuple[str, ...], list[str]] = {}
    for run in runs:
        used = tuple(t for t in tools if matrix[run.id][t])
        groups.setdefault(used, []).append(run.id)
    intersections = [
        {"tools": list(used), "runs": sorted(ids), "size": len(ids)}
        for used, ids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]
    return {"tools": tools, "matrix": matrix, "intersections": intersections}


def _members(runs: Sequence[RunData], deps: Sequence[Sequence[Dependency]]) -> list[Member]:
    members: list[Member] = []
    for r, (run, run_deps) in enumerate(zip(runs, deps, strict=True)):
        for i, capsule in enumerate(capsules(run, run_deps)):
            members.append(Member(r, i, capsule))
    return members


def ablation(
    members: Sequence[Member], weights: Mapping[str, float], threshold: float
) -> dict[str, Any]:
    """For each capsule component dropped (weights renormalized): assignments that change."""
    base = cluster(members, weights, threshold)
    out: dict[str, Any] = {"calls": len(members), "clusters": len(base), "dropped": {}}
    for component in COMPONENTS:
        reduced = {m: (0.0 if m == component else w) for m, w in weights.items()}
        other = cluster(members, normalized(reduced), threshold)
        out["dropped"][component] = {
            "changed": changed_assignments(base, other),
            "clusters": len(other),
        }
    return out


def compare(runs: Sequence[RunData], config: CompareConfig | None = None) -> dict[str, Any]:
    """The ``compare.json`` document for ``runs`` (run ids must be distinct)."""
    config = config or CompareConfig()
    ids = [r.id for r in runs]
    if len(set(ids)) != len(ids):
        raise DecodeError(
            f"runs with the same run id: {sorted({i for i in ids if ids.count(i) > 1})}"
        )
    weights = normalized(config.weights)
    deps = [dependencies(run) for run in runs]
    members = _members(runs, deps)
    clusters = cluster(members, weights, config.threshold)
    tool_sets = {r.id: frozenset(c.tool for c in r.calls) for r in runs}
    scores = {r.id: r.metrics.get("score") for r in runs}
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "runs": [{"id": r.id, "path": r.path, "metrics": r.metrics} for r in runs],
        "coverage": coverage(runs),
        "impact": shapley(tool_sets, scores, samples=config.shapley_samples),
        "provenance": {r.id: provenance(r, d) for r, d in zip(runs, deps, strict=True)},
        "joined": joined_graph(runs, deps, clusters),
    }
    doc["joined"]["weights"] = weights
    doc["joined"]["threshold"] = config.threshold
    if config.ablation:
        doc["joined"]["ablation"] = ablation(members, weights, config.threshold)
    return doc


def schema() -> dict[str, Any]:
    """The JSON Schema of ``compare.json`` shipped in the package."""
    return schemas.load("compare")


def validate_document(doc: Any) -> None:
    """Raise :class:`DecodeError` naming the first problems when ``doc`` breaks the schema."""
    schemas.check("compare", doc)


def _fmt(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _metrics_table(doc: Mapping[str, Any]) -> list[str]:
    header = [
        "run", "score", "tokens in/out", "cost", "latency ms", "tool calls", "processes",
        "files written", "endpoints", "review findings",
    ]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for run in doc["runs"]:
        m = run["metrics"]
        tokens = m.get("tokens") or {}
        lines.append(
            f"| {run['id']} | {_fmt(m.get('score'))} | {_fmt(tokens.get('input'))}/"
            f"{_fmt(tokens.get('output'))} | {_fmt(m.get('cost'))} | {_fmt(m.get('latency_ms'))} | "
            f"{_fmt(m.get('tool_calls'))} | {_fmt(m.get('processes'))} | "
            f"{_fmt(m.get('files_written'))} | {_fmt(m.get('endpoints'))} | "
            f"{_fmt(m.get('review_findings'))} |"
        )
    return lines


def _coverage_table(doc: Mapping[str, Any]) -> list[str]:
    tools = doc["coverage"]["tools"]
    lines = ["| run | " + " | ".join(tools) + " |", "| --- |" + " --- |" * len(tools)]
    for run_id, row in doc["coverage"]["matrix"].items():
        lines.append(f"| {run_id} | " + " | ".join(str(row[t]) for t in tools) + " |")
    lines += ["", "| tools used | runs |", "| --- | --- |"]
    for group in doc["coverage"]["intersections"]:
        lines.append(f"| {', '.join(group['tools']) or '(none)'} | {group['size']} |")
    return lines


def _joined_lines(doc: Mapping[str, Any]) -> list[str]:
    joined = doc["joined"]
    lines = ["| node | tool | support | mean score with / without |", "| --- | --- | --- | --- |"]
    for node in joined["nodes"]:
        s = node["score"]
        lines.append(
            f"| {node['id']} | {node['tool']} | {node['support']} | "
            f"{_fmt(s['mean'])} / {_fmt(s['mean_without'])} |"
        )
    lines += ["", "Edges (confirmed dependencies only):", ""]
    lines += [f"- {e['source']} -> {e['target']}: support {e['support']}" for e in joined["edges"]]
    lines += ["", "Detours (low support):", ""]
    lines += [f"- {d['id']} {d['tool']}: {', '.join(d['runs'])}" for d in joined["detours"]] or [
        "- none"
    ]
    return lines


def render_markdown(doc: Mapping[str, Any]) -> str:
    """``compare.md``: the runs, coverage, impact and joined graph as Markdown tables."""
    impact = doc["impact"]
    lines = [f"# Comparison of {len(doc['runs'])} runs", "", "## Runs", "", *_metrics_table(doc)]
    lines += ["", "## Tool coverage", "", *_coverage_table(doc), "", "## Tool impact", ""]
    lines += [f"Value function: {impact['value_function']}. Method: {_fmt(impact['method'])}.", ""]
    lines += ["| tool | Shapley value | standard error |", "| --- | --- | --- |"]
    lines += [
        f"| {t} | {_fmt(v['shapley'])} | {_fmt(v['stderr'])} |" for t, v in impact["tools"].items()
    ]
    lines += [
        "",
        "## Dependencies by method",
        "",
        "| run | exact_reference | observed_dataflow | candidate |",
        "| --- | --- | --- | --- |",
    ]
    for run_id, prov in doc["provenance"].items():
        counts = dict.fromkeys(("exact_reference", "observed_dataflow", "candidate"), 0)
        for edge in prov["edges"]:
            if edge["method"] in counts:
                counts[edge["method"]] += 1
        lines.append(f"| {run_id} | " + " | ".join(str(v) for v in counts.values()) + " |")
    lines += ["", "## Joined graph", "", *_joined_lines(doc), ""]
    return "\n".join(lines)
