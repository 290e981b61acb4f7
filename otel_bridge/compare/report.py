"""Assemble ``compare.json`` from runs, validate it, and render ``compare.md``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_bridge import schemas
from otel_bridge.errors import DecodeError

from .compact import CapsuleTable, CompactCalls, materialized
from .impact import shapley
from .inputs import RunData
from .joined import (
    COMPONENTS,
    DEFAULT_THRESHOLD,
    DEFAULT_WEIGHTS,
    capsules,
    changed_assignments,
    cluster,
    joined_graph,
    normalized,
    ordered,
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


def coverage(runs: Sequence[tuple[str, Mapping[str, int]]]) -> dict[str, Any]:
    """The coverage matrix M[run][tool] (calls of the tool) and the UpSet intersections, from
    each run's id and calls per tool."""
    tools = sorted({t for _, counts in runs for t in counts})
    matrix: dict[str, dict[str, int]] = {}
    for run_id, counts in runs:
        matrix[run_id] = {t: counts.get(t, 0) for t in tools}
    groups: dict[tuple[str, ...], list[str]] = {}
    for run_id, _ in runs:
        used = tuple(t for t in tools if matrix[run_id][t])
        groups.setdefault(used, []).append(run_id)
    intersections = [
        {"tools": list(used), "runs": sorted(ids), "size": len(ids)}
        for used, ids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]
    return {"tools": tools, "matrix": matrix, "intersections": intersections}


def ablation(table: CapsuleTable, weights: Mapping[str, float], threshold: float) -> dict[str, Any]:
    """For each capsule component dropped (weights renormalized): assignments that change."""
    base = cluster(table, weights, threshold)
    calls = sum(table.counts)
    out: dict[str, Any] = {"calls": calls, "clusters": len(base), "dropped": {}}
    for component in COMPONENTS:
        reduced = {m: (0.0 if m == component else w) for m, w in weights.items()}
        other = cluster(table, normalized(reduced), threshold)
        out["dropped"][component] = {
            "changed": changed_assignments(table, base, other),
            "clusters": len(other),
        }
    return out


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
    """``compare`` one run at a time, in memory that does not grow with the runs' data.

    :meth:`add` computes a run's dependencies, capsules and provenance, hands the provenance to
    ``sink`` (``summary`` mode: its counts) and keeps the run in a :class:`CompactCalls`: its
    row, calls per tool, and per call a capsule number (each distinct capsule is held once,
    with its count) and the offset of its id in a private temporary file under ``directory``
    (default: the system's temporary directory; the file has no name and goes when closed).
    The caller drops the :class:`RunData`. :meth:`finish` clusters the distinct capsules and
    builds the rest of the document (runs, coverage, impact, joined graph) without
    ``provenance``, which the sink has; the joined graph's per-call lists are
    :class:`~.compact.Streamed` values that :func:`~.output.write_document` reads from the
    arrays and the id file as it writes (:func:`~.compact.materialized` makes them lists).
    Close the comparison (or use it as a context manager) once the document is written.
    """

    def __init__(
        self,
        config: CompareConfig | None = None,
        sink: ProvenanceSink | None = None,
        provenance_mode: str = "full",
        directory: Path | None = None,
    ) -> None:
        if provenance_mode not in PROVENANCE_MODES:
            raise ValueError(f"provenance mode must be one of {PROVENANCE_MODES}")
        self.config = config or CompareConfig()
        self.weights = normalized(self.config.weights)
        self.calls = CompactCalls(directory)
        self._sink = sink
        self._mode = provenance_mode
        self._ids: set[str] = set()

    def add(self, run: RunData) -> None:
        """Compare ``run`` in: its provenance goes to the sink, its compact form stays."""
        if run.id in self._ids:
            raise DecodeError(f"runs with the same run id: [{run.id!r}]")
        self._ids.add(run.id)
        deps = dependencies(run)
        self.calls.add_run(
            run.id,
            run.path,
            run.metrics,
            (
                (capsule, c.tool, c.key, c.id)
                for c, capsule in zip(run.calls, capsules(run, deps), strict=True)
            ),
            ((d.producer, d.consumer, d.method) for d in deps if d.method in CONFIRMED),
        )
        if self._sink is not None:
            prov = provenance(run, deps)
            self._sink(run.id, prov if self._mode == "full" else provenance_summary(prov))

    def finish(self) -> dict[str, Any]:
        """The ``compare.json`` document without ``provenance`` (the sink received it), with
        :class:`~.compact.Streamed` per-call lists in the joined graph."""
        config, calls = self.config, self.calls
        clusters = ordered(calls.table, cluster(calls.table, self.weights, config.threshold))
        ids = calls.run_ids
        tool_sets = {r: frozenset(t) for r, t in zip(ids, calls.tools, strict=True)}
        scores = {r: m.get("score") for r, m in zip(ids, calls.metrics, strict=True)}
        doc: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "runs": [
                {"id": r, "path": p, "metrics": m}
                for r, p, m in zip(ids, calls.paths, calls.metrics, strict=True)
            ],
            "coverage": coverage(list(zip(ids, calls.tools, strict=True))),
            "impact": shapley(tool_sets, scores, samples=config.shapley_samples),
            "joined": joined_graph(calls, clusters),
        }
        doc["joined"]["weights"] = self.weights
        doc["joined"]["threshold"] = config.threshold
        if config.ablation:
            doc["joined"]["ablation"] = ablation(calls.table, self.weights, config.threshold)
        return doc

    def close(self) -> None:
        """Drop the call-id file; the document's streamed values cannot be read after this."""
        self.calls.close()

    def __enter__(self) -> Comparison:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def compare(runs: Iterable[RunData], config: CompareConfig | None = None) -> dict[str, Any]:
    """The whole ``compare.json`` document for ``runs`` (run ids must be distinct), in memory:
    a :class:`Comparison` whose sink keeps every run's provenance."""
    provenance_by_run: dict[str, dict[str, Any]] = {}
    with Comparison(config, provenance_by_run.__setitem__) as comparison:
        for run in runs:
            comparison.add(run)
        doc: dict[str, Any] = materialized(comparison.finish())
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


LEFT_OUT = (
    "left out of the agents' endpoints: the collector's own endpoint, where the run's agent "
    "sent its telemetry (the OTLP endpoint `observe` gave it, recorded in the run's "
    "summary.json), not an endpoint the agent chose"
)
"""Said (``compare.md`` and the command's summary) when a run's collector endpoint was found
among the endpoints its processes reached, with the runs and endpoints left out."""


def left_out(doc: Mapping[str, Any]) -> list[str]:
    """``RUN: ENDPOINT, ...`` for each run whose collector endpoint was left out."""
    return [
        f"{run['id']}: {', '.join(gone)}"
        for run in doc["runs"]
        if (gone := run["metrics"].get("collector_endpoints_left_out"))
    ]


def _coverage_table(doc: Mapping[str, Any]) -> list[str]:
    tools = doc["coverage"]["tools"]
    lines = ["| run | " + " | ".join(tools) + " |", "| --- |" + " --- |" * len(tools)]
    for run_id, row in doc["coverage"]["matrix"].items():
        lines.append(f"| {run_id} | " + " | ".join(str(row[t]) for t in tools) + " |")
    lines += ["", "| tools used | runs |", "| --- | --- |"]
    for group in doc["coverage"]["intersections"]:
        lines.append(f"| {', '.join(group['tools']) or '(none)'} | {group['size']} |")
    return lines


NOTHING_SHARED = (
    "no step of one run joined a step of another (every joined node has support 1): these may "
    "not be runs of one task, which is what compare is for"
)
"""Said (``compare.md`` and the command's summary) when two or more runs share no joined node."""


def nothing_shared(doc: Mapping[str, Any]) -> bool:
    """Whether the runs (two or more) share no joined node."""
    nodes = doc["joined"]["nodes"]
    return len(doc["runs"]) > 1 and bool(nodes) and all(n["support"] <= 1 for n in nodes)


def _joined_lines(doc: Mapping[str, Any]) -> list[str]:
    joined = doc["joined"]
    lines = [f"Note: {NOTHING_SHARED}.", ""] if nothing_shared(doc) else []
    lines += ["| node | tool | support | mean score with / without |", "| --- | --- | --- | --- |"]
    for node in joined["nodes"]:
        s = node["score"]
        lines.append(
            f"| {node['id']} | {node['tool']} | {node['support']} | "
            f"{_fmt(s['mean'])} / {_fmt(s['mean_without'])} |"
        )
    lines += ["", "Edges (confirmed dependencies only):", ""]
    lines += [
        f"- {e['source']} -> {e['target']}: support {e['support']}" for e in joined["edges"]
    ] or ["- none"]
    lines += ["", "Detours (low support):", ""]
    lines += [f"- {d['id']} {d['tool']}: {', '.join(d['runs'])}" for d in joined["detours"]] or [
        "- none"
    ]
    return lines


def _impact_lines(impact: Mapping[str, Any]) -> list[str]:
    lines = [f"Value function: {impact['value_function']}.", ""]
    if not impact["tools"]:  # said, not an empty table
        why = (
            "the scored runs used no tools"
            if impact.get("runs_scored")
            else "no run has a score (state `gen_ai.evaluation.score.value` in the agent's "
            "telemetry, or pass `--scores FILE`)"
        )
        return [*lines, f"No tool impact: {why}."]
    lines[0] = lines[0] + f" Method: {_fmt(impact['method'])}."
    lines += ["| tool | Shapley value | standard error |", "| --- | --- | --- |"]
    return lines + [
        f"| {t} | {_fmt(v['shapley'])} | {_fmt(v['stderr'])} |" for t, v in impact["tools"].items()
    ]


def render_markdown(doc: Mapping[str, Any]) -> str:
    """``compare.md``: the runs, coverage, impact and joined graph as Markdown tables."""
    impact = doc["impact"]
    lines = [f"# Comparison of {len(doc['runs'])} runs", "", "## Runs", "", *_metrics_table(doc)]
    gone = left_out(doc)
    if gone:
        lines += ["", f"Endpoints {LEFT_OUT}:", "", *(f"- {line}" for line in gone)]
    lines += ["", "## Tool coverage", "", *_coverage_table(doc), "", "## Tool impact", ""]
    lines += _impact_lines(impact)
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
