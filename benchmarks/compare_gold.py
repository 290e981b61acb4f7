"""Gold-set precision/recall of ``otel-bridge compare``'s dependency edges, and the weight ablation.

Runs each scripted task variant of ``examples/compare/task.py`` for real under
``otel-bridge observe`` (OTel SDK spans, real subprocesses and files), compares the runs of each
task, and scores the dependency edges against the hand-written ``examples/compare/gold.json``.

Run: ``python benchmarks/compare_gold.py [--out DIR]`` (about 10 observe runs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from otel_bridge.compare import CompareConfig, compare, load_run
from otel_bridge.compare.gold import reported_edges, tally

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "examples" / "compare" / "task.py"
GOLD = ROOT / "examples" / "compare" / "gold.json"
THRESHOLDS = (0.75, 0.9, 0.95)
"""Clustering thresholds of the weight ablation (0.75 is the default)."""
PLAN = [
    (task, variant)
    for task in ("pipeline", "coding")
    for variant in ("base", "base", "detour", "skip", "retry")
]


def observe(
    out: Path, task: str, variant: str, workdir: Path, env: dict[str, str] | None = None
) -> None:
    """One run of a task variant under ``otel-bridge observe`` (``env``: the environment, by
    default this process's)."""
    argv = [
        sys.executable,
        "-m",
        "otel_bridge",
        "observe",
        "-o",
        str(out),
        "--",
        sys.executable,
        str(TASK),
        "--task",
        task,
        "--variant",
        variant,
        "--workdir",
        str(workdir),
    ]
    subprocess.run(argv, check=True, capture_output=True, timeout=300, env=env)


def run_plan(base: Path) -> dict[str, list[tuple[Path, str, Path]]]:
    """Observe every run of :data:`PLAN`; per task: (run dir, variant, work dir)."""
    done: dict[str, list[tuple[Path, str, Path]]] = {}
    for n, (task, variant) in enumerate(PLAN):
        run_dir, workdir = base / f"run-{n:02d}", base / f"work-{n:02d}"
        observe(run_dir, task, variant, workdir)
        done.setdefault(task, []).append((run_dir, variant, workdir))
        print(f"observed {task}/{variant} -> {run_dir}", file=sys.stderr)
    return done


def evaluate(done: dict[str, list[tuple[Path, str, Path]]]) -> dict[str, Any]:
    """Precision/recall per method, coverage against receipts, and the ablation, per task."""
    gold_doc = json.loads(GOLD.read_text())
    pairs = []
    report: dict[str, Any] = {"ablation": {}, "receipts_match": True}
    for task, runs in done.items():
        loaded = [load_run(run_dir) for run_dir, _, _ in runs]
        doc = compare(loaded)
        for threshold in THRESHOLDS:
            other = compare(loaded, CompareConfig(threshold=threshold))
            report["ablation"][(task, threshold)] = other["joined"]["ablation"]
        for run, (_, variant, workdir) in zip(loaded, runs, strict=True):
            gold = {tuple(e) for e in gold_doc[task][variant]}
            pairs.append((reported_edges(doc["provenance"][run.id]), gold))
            receipt = json.loads((workdir / "receipt.json").read_text())
            expected: dict[str, int] = {}
            for call in receipt["calls"]:
                expected[call["tool"]] = expected.get(call["tool"], 0) + 1
            row = {t: n for t, n in doc["coverage"]["matrix"][run.id].items() if n}
            report["receipts_match"] &= row == expected
    report["methods"] = tally(pairs)
    report["runs"] = len(pairs)
    return report


def reuse(base: Path) -> dict[str, list[tuple[Path, str, Path]]]:
    """The runs of :data:`PLAN` already observed under ``base`` (``--reuse``)."""
    done: dict[str, list[tuple[Path, str, Path]]] = {}
    for n, (task, variant) in enumerate(PLAN):
        done.setdefault(task, []).append((base / f"run-{n:02d}", variant, base / f"work-{n:02d}"))
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="keep the run directories here (default: a temporary one)")
    parser.add_argument("--reuse", action="store_true", help="score the runs already in --out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compare-gold-") as tmp:
        base = Path(args.out) if args.out else Path(tmp)
        report = evaluate(reuse(base) if args.reuse and args.out else run_plan(base))
    match = report["receipts_match"]
    print(f"runs: {report['runs']}; coverage matrix equals the runs' receipts: {match}")
    print("| method | TP | FP | FN | precision | recall |")
    print("| --- | --- | --- | --- | --- | --- |")
    for method, m in report["methods"].items():
        print(
            f"| {method} | {m['tp']} | {m['fp']} | {m['fn'] if m['fn'] is not None else '-'} | "
            f"{m['precision'] if m['precision'] is not None else '-'} | "
            f"{m['recall'] if m['recall'] is not None else '-'} |"
        )
    print()
    print(
        "| task | threshold | calls | clusters | "
        + " | ".join(f"drop {c}" for c in ("tool", "io", "context", "lineage"))
        + " |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (task, threshold), ab in report["ablation"].items():
        cells = " | ".join(
            f"{ab['dropped'][c]['changed']} ({ab['dropped'][c]['clusters']} clusters)"
            for c in ("tool", "io", "context", "lineage")
        )
        print(f"| {task} | {threshold} | {ab['calls']} | {ab['clusters']} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
