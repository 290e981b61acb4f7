"""Assemble ``compare.json`` from runs, validate it, and render ``compare.md``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from otel_bridge import schemas
from otel_bridge.errors import DecodeError

from .impact import shapley
from .inputs import RunData
from .joined import (
    COMPONENTS,
    DEFAULT_THRESHOLD,
    DEFAULT_WEIGHTS,
    Capsule,
    Member,
    capsules,
    changed_assignments,
    cluster,
    joined_graph,
    normalized,
)
from .provenance import CONFIRMED, dependencies, provenance

FORMAT = "otel-bridge.compare"
VERSION = 1


@dataclass(frozen=True, slots=True)
class CompareConfig:
    """How runs are compared."""

    weights: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    threshold: float = DEFAULT_THRESHOLD
    ablation: bool = True
    shapley_samples: int = 2000


def coverage(runs: Sequence[RunData] | Sequence[RunSummary]) -> dict[str, Any]:
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


class CallRef(NamedTuple):
    """What the joined graph keeps of one tool call."""

    id: str
    tool: str
    key: str


class DepRef(NamedTuple):
    """A confirmed dependency between two calls of one run (call indexes)."""

    producer: int
    consumer: int
    method: str


@dataclass(slots=True)
class RunSummary:
    """What a :class:`Comparison` keeps of a run once the run's provenance is written: the run's
    row, its calls' ids, tools and keys (tools and keys interned), its confirmed dependencies."""

    id: str
    path: str
    metrics: dict[str, Any]
    calls: list[CallRef]
    confirmed: list[DepRef]


ProvenanceSink = Callable[[str, dict[str, Any]], None]
"""Receives each run's ``provenance`` object (run id, object) as the run is added."""
PROVENANCE_MODES = ("full", "summary")


def provenance_summary(prov: Mapping[str, Any]) -> dict[str, Any]:
    """The ``summary`` form of a run's provenance: how many activities, entities and edges (by
    method) the full object holds (``compare --provenance summary``)."""
    edges: dict[str, int] = {}
    for edge in prov["edges"]:
        edges[edge["method"]] = edges.get(edge["method"], 0) + 1
    return {
        "counts": {
            "activities": len(prov["activities"]),
            "entities": len(prov["entities"]),
            "edges": dict(sorted(edges.items())),
        }
    }


class Comparison:
    """``compare`` one run at a time, in bounded memory.

    :meth:`add` computes a run's dependencies, capsules and provenance, hands the provenance to
    ``sink`` (``summary`` mode: its counts) and keeps only a :class:`RunSummary` and the run's
    capsules, interned (runs of one task repeat the same capsules, so each distinct capsule is
    held once). The caller drops the :class:`RunData`. :meth:`finish` builds the rest of the
    document (runs, coverage, impact, joined graph) without ``provenance``, which the sink has.
    Memory is then the summaries (a call id and three references per call) plus one run's data,
    not every run's calls, arguments, results and provenance graph.
    """

    def __init__(
        self,
        config: CompareConfig | None = None,
        sink: ProvenanceSink | None = None,
        provenance_mode: str = "full",
    ) -> None:
        if provenance_mode not in PROVENANCE_MODES:
            raise ValueError(f"provenance mode must be one of {PROVENANCE_MODES}")
        self.config = config or CompareConfig()
        self.weights = normalized(self.config.weights)
        self.runs: list[RunSummary] = []
        self.members: list[Member] = []
        self._sink = sink
        self._mode = provenance_mode
        self._ids: set[str] = set()
        self._strings: dict[str, str] = {}
        self._capsules: dict[Capsule, Capsule] = {}

    def _intern(self, text: str) -> str:
        return self._strings.setdefault(text, text)

    def add(self, run: RunData) -> None:
        """Compare ``run`` in: its provenance goes to the sink, its summary stays."""
        if run.id in self._ids:
            raise DecodeError(f"runs with the same run id: [{run.id!r}]")
        self._ids.add(run.id)
        deps = dependencies(run)
        r = len(self.runs)
        for i, capsule in enumerate(capsules(run, deps)):
            shared = self._capsules.setdefault(capsule, capsule)
            self.members.append(Member(r, i, shared))
        if self._sink is not None:
            prov = provenance(run, deps)
            self._sink(run.id, prov if self._mode == "full" else provenance_summary(prov))
        intern = self._intern
        self.runs.append(
            RunSummary(
                id=run.id,
                path=run.path,
                metrics=run.metrics,
                calls=[CallRef(c.id, intern(c.tool), intern(c.key)) for c in run.calls],
                confirmed=[
                    DepRef(d.producer, d.consumer, intern(d.method))
                    for d in deps
                    if d.method in CONFIRMED
                ],
            )
        )

    def finish(self) -> dict[str, Any]:
        """The ``compare.json`` document without ``provenance`` (the sink received it)."""
        config, runs = self.config, self.runs
        clusters = cluster(self.members, self.weights, config.threshold)
        tool_sets = {r.id: frozenset(c.tool for c in r.calls) for r in runs}
        scores = {r.id: r.metrics.get("score") for r in runs}
        doc: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "runs": [{"id": r.id, "path": r.path, "metrics": r.metrics} for r in runs],
            "coverage": coverage(runs),
            "impact": shapley(tool_sets, scores, samples=config.shapley_samples),
            "joined": joined_graph(runs, [r.confirmed for r in runs], clusters),
        }
        doc["joined"]["weights"] = self.weights
        doc["joined"]["threshold"] = config.threshold
        if config.ablation:
            doc["joined"]["ablation"] = ablation(self.members, self.weights, config.threshold)
        return doc


def compare(runs: Iterable[RunData], config: CompareConfig | None = None) -> dict[str, Any]:
    """The whole ``compare.json`` document for ``runs`` (run ids must be distinct), in memory:
    a :class:`Comparison` whose sink keeps every run's provenance."""
    provenance_by_run: dict[str, dict[str, Any]] = {}
    comparison = Comparison(config, provenance_by_run.__setitem__)
    for run in runs:
        comparison.add(run)
    doc = comparison.finish()
    doc["provenance"] = provenance_by_run
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


def _counts(metrics: Mapping[str, Any], name: str, weaker: str, said: str) -> str:
    """A count, with how many of it rest on the weaker observation (``graph.reading``)."""
    text = _fmt(metrics.get(name))
    n = (metrics.get(f"{name}_as") or {}).get(weaker)
    return f"{text} ({n} {said})" if n else text


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
            f"{_counts(m, 'files_written', 'opened_for_writing', 'opened for writing only')} | "
            f"{_counts(m, 'endpoints', 'attempted', 'connect not seen to complete')} | "
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
        if "counts" in prov:  # the summary form
            counts.update((m, n) for m, n in prov["counts"]["edges"].items() if m in counts)
        for edge in prov.get("edges", ()):
            if edge["method"] in counts:
                counts[edge["method"]] += 1
        lines.append(f"| {run_id} | " + " | ".join(str(v) for v in counts.values()) + " |")
    lines += ["", "## Joined graph", "", *_joined_lines(doc), ""]
    return "\n".join(lines)
