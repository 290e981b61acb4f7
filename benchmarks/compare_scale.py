"""Scale of ``otel-bridge compare``: many synthetic runs of one task, time and peak memory.

Each run is a graph document shaped as ``observe`` writes it (tool-call nodes with facts and
stable keys, one process per call, files opened and written) plus the calls' arguments and
results, built from one 100-step task template with seeded variations: a skipped step (5%), a
detour call (5%), a retried call (3%). The timed part is what ``compare`` does after reading the
files, as the command does it: each run is extracted (:func:`extract_run`) and added to a
:class:`Comparison` (dependencies by method, capsules, its provenance graph written to a spool
file, ``--provenance summary``: only its counts), then dropped; ``finish`` clusters and builds
the joined graph, coverage and impact (the ablation is off, it re-clusters four times), and the
spool writes compare.json around the spooled provenance. Times are CPU seconds of this process;
peak RSS is the process's maximum resident set (with ``--growth`` each row runs in its own
process).

Run: ``python benchmarks/compare_scale.py [--runs 1000 --calls 100] [--growth]
[--provenance summary]``.
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from otel_bridge.compare import CompareConfig, Comparison, ProvenanceSpool, extract_run
from otel_bridge.compare.synthetic import Step, graph_document

TOOLS = [f"tool_{i:02d}" for i in range(12)]


def template(calls: int) -> list[Step]:
    """The task's plan: each step reads the previous step's file and passes a value on."""
    steps = []
    for k in range(calls):
        tool = TOOLS[(k * 7) % len(TOOLS)]
        args: dict[str, Any] = {"input": f"/w/part-{k - 1}.csv"} if k else {"task": "synthetic"}
        if k >= 2:
            args["token"] = f"value-{k - 2}"
        steps.append(
            Step(
                tool,
                args,
                {"output": f"/w/part-{k}.csv", "token": f"value-{k}", "rows": k * 10},
                reads=[f"/w/part-{k - 1}.csv"] if k else [],
                writes=[f"/w/part-{k}.csv"],
            )
        )
    return steps


def variant(plan: list[Step], rng: random.Random) -> list[Step]:
    """One stochastic run of ``plan``."""
    out: list[Step] = []
    for step in plan:
        roll = rng.random()
        if roll < 0.05 and out:
            continue  # skipped
        if roll < 0.10:
            out.append(Step("detour_search", {"query": f"how to {step.tool}"}, {"hits": 3}))
        if roll > 0.97:
            out.append(Step(step.tool, step.arguments, {"error": "timeout"}, reads=step.reads))
        out.append(step)
    return out


def measure(runs: int, calls: int, provenance: str = "full", seed: int = 0) -> dict[str, float]:
    """One row, as ``otel-bridge compare`` runs: documents are built one at a time, extracted,
    compared in (provenance spooled to a file) and dropped; then the document is written."""
    rng = random.Random(seed)
    plan = template(calls)
    extract = compared = 0.0
    total_calls = 0
    with (
        tempfile.TemporaryDirectory() as out,
        ProvenanceSpool(Path(out)) as spool,
        Comparison(CompareConfig(ablation=False), spool.add, provenance, Path(out)) as comparison,
    ):
        for n in range(runs):
            graph, io = graph_document(f"run-{n:05d}", variant(plan, rng))
            start = time.process_time()
            run = extract_run(f"run-{n:05d}", "synthetic", graph, io)
            middle = time.process_time()
            run.metrics.update(
                score=rng.random(), tokens={"input": None, "output": None}, cost=None
            )
            total_calls += len(run.calls)
            comparison.add(run)
            extract += middle - start
            compared += time.process_time() - middle
            del graph, io, run
        start = time.process_time()
        doc = comparison.finish()
        middle = time.process_time()
        spool.write_document(doc, Path(out) / "compare.json")
        end = time.process_time()
        size = (Path(out) / "compare.json").stat().st_size
    return {
        "runs": runs,
        "calls": total_calls,
        "extract": extract,
        "compare": compared + middle - start,
        "encode": end - middle,
        "total": extract + compared + end - start,
        "nodes": len(doc["joined"]["nodes"]),
        "capsules": len(comparison.calls.table.capsules),
        "bytes": size,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--growth", action="store_true", help="also vary runs and calls per run")
    parser.add_argument("--provenance", choices=("full", "summary"), default="full")
    parser.add_argument("--row", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rows = [(args.runs, args.calls)]
    if args.growth:
        rows = [(r, 100) for r in (125, 250, 500)] + [(250, c) for c in (25, 50, 200)] + rows
    header = [
        "runs", "calls per run", "calls", "extract s", "compare s", "encode s", "total s",
        "distinct capsules", "joined nodes", "compare.json bytes", "peak RSS MB",
    ]  # fmt: skip
    if not args.row:
        print("| " + " | ".join(header) + " |")
        print("|" + " --- |" * len(header))
    for runs, calls in rows:
        if len(rows) > 1:  # each row in a fresh process, so its peak RSS is its own
            argv = [sys.executable, __file__, "--runs", str(runs), "--calls", str(calls), "--row"]
            argv += ["--provenance", args.provenance]
            print(subprocess.run(argv, check=True, capture_output=True, text=True).stdout, end="")
            continue
        m = measure(runs, calls, args.provenance)
        print(
            f"| {runs} | {calls} | {m['calls']:,.0f} | {m['extract']:.2f} | {m['compare']:.2f} | "
            f"{m['encode']:.2f} | {m['total']:.2f} | {m['capsules']:,.0f} | {m['nodes']:.0f} | "
            f"{m['bytes']:,.0f} | "
            f"{m['rss_mb']:.0f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
