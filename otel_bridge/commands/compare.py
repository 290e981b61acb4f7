"""``otel-bridge compare RUN_DIR...``: compare runs, write ``compare.json`` and ``compare.md``."""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from otel_bridge.assist import ModelConfig
from otel_bridge.commands._model_options import add_model_options
from otel_bridge.compare import (
    PROVENANCE_MODES,
    CompareConfig,
    Comparison,
    ProvenanceSpool,
    RunData,
    load_run,
    load_traces,
    outline,
    provenance_summary,
    render_markdown,
    validate_document,
    validate_provenance,
)
from otel_bridge.compare.assist import ASSIST_JSON, AUDIT, write_assist
from otel_bridge.compare.report import LEFT_OUT, NOTHING_SHARED, left_out, nothing_shared
from otel_bridge.errors import OtelBridgeError
from otel_bridge.rundir import claim_outputs
from otel_bridge.store.options import add_db_options, stored_run_dirs

OUTPUTS = ("compare.json", "compare.md", ASSIST_JSON, AUDIT)
"""The files ``compare`` writes into its output directory (an earlier comparison's)."""


def _threshold(text: str) -> float:
    """A clustering threshold: a similarity, so a number from 0 to 1 (``nan`` and ``5`` are
    refused: they would silently join nothing, or everything)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:  # also false for nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a similarity from 0 to 1")
    return value


def register(subparsers: Any) -> None:
    """Add the ``compare`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "compare",
        help="compare run directories: coverage, tool impact, provenance, joined graph",
        description=(
            "Compare several runs of one task (run directories written by observe): per-run "
            "metrics, the tool coverage matrix, Shapley tool impact, per-run provenance graphs "
            "with dependency edges by method, and the joined quotient graph with motifs and "
            "detours. Writes compare.json and compare.md (docs/compare.md)."
        ),
    )
    p.add_argument("runs", nargs="*", metavar="RUN_DIR", help="run directories (or --db)")
    p.add_argument("-o", "--output", default=".", help="output directory (default: .)")
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace the previous comparison in -o DIR (default: refuse a directory holding one)",
    )
    p.add_argument("--scores", help="JSON file {run_id: score} overriding stated scores")
    p.add_argument(
        "--threshold",
        type=_threshold,
        default=None,
        help="clustering threshold, a similarity from 0 to 1 (default: 0.75)",
    )
    p.add_argument("--no-ablation", action="store_true", help="skip the weight ablation")
    p.add_argument(
        "--group-by",
        choices=("run", "trace", "session"),
        default="run",
        help="one run per run directory (default), or per trace holding tool calls (the "
        "output of one standing collector: each trace is a run, id '<run id>#<trace id>'), or "
        "per session (traces stating one gen_ai.conversation.id / session.id together, id "
        "'<run id>#session:<id>'; a trace stating none stays a run of its own)",
    )
    add_db_options(p)
    p.add_argument(
        "--provenance",
        choices=PROVENANCE_MODES,
        default="full",
        help="per-run provenance graphs in compare.json: every activity, entity and edge "
        "(full, default) or only their counts (summary, a much smaller file)",
    )
    add_model_options(
        p,
        "docs/compare.md",
        "OpenAI-compatible base URL asked to refine candidate edges (patch operations)",
    )
    p.set_defaults(func=run)


def _write_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _scores(path: str) -> dict[str, float]:
    try:
        data = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise OtelBridgeError(f"cannot read scores {path}: {exc}") from exc
    if not isinstance(data, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in data.values()
    ):
        raise OtelBridgeError(f"{path}: scores are a JSON object {{run_id: number}}")
    return {str(k): float(v) for k, v in data.items()}


def _runs(args: argparse.Namespace) -> Iterator[RunData]:
    """The runs, read one at a time (a run's data is dropped once it is compared)."""
    overrides = _scores(args.scores) if args.scores else {}
    for directory in args.runs:
        if args.group_by == "run":
            loaded = [load_run(directory)]
        else:
            loaded = load_traces(directory, args.group_by)
        for r in loaded:
            if r.id in overrides:
                r.metrics["score"] = overrides[r.id]
                r.metrics["score_source"] = "scores_file"
            yield r


def _too_few(args: argparse.Namespace, count: int) -> str:
    """Why ``count`` runs (0 or 1) cannot be compared, and how to give more."""
    runs = f"{count} run" + ("" if count == 1 else "s")
    if args.db:
        return (
            f"compare needs at least two runs, and the store's runs selected are {runs}: "
            "select two or more"
        )
    if args.group_by == "run":
        return (
            "compare needs at least two runs, and one run directory is one run: "
            "give two or more run directories (or --group-by trace or session to compare "
            "the traces or sessions of one)"
        )
    return (
        f"compare needs at least two runs, and the {args.group_by}s of the run directories "
        f"given are {runs}: give more run directories"
    )


def run(args: argparse.Namespace) -> int:
    """Execute the command."""
    if not args.db and not args.runs:
        raise OtelBridgeError("give RUN_DIR... or --db URL")
    # an earlier comparison in -o DIR is refused before any run is read (docs/compare.md)
    earlier = claim_outputs(args.output, OUTPUTS, replace=args.replace, what="comparison")
    if args.db:  # every selected stored run, written as a private temporary run directory
        with tempfile.TemporaryDirectory(prefix="otel-bridge-compare-") as tmp:
            args.runs = stored_run_dirs(args, tmp)
            return _run(args, earlier)
    return _run(args, earlier)


def _run(args: argparse.Namespace, earlier: list[str]) -> int:
    """Compare the runs: runs are compared one at a time and their provenance spooled to
    disk, so memory does not grow with each run's provenance graph (``docs/compare.md``).
    ``earlier``: the files of the comparison ``--replace`` discards, removed once the first run
    is read."""
    config = CompareConfig(ablation=not args.no_ablation)
    if args.threshold is not None:
        config = CompareConfig(ablation=config.ablation, threshold=args.threshold)
    runs = _runs(args)
    # the first two runs are read before any output: one that cannot be, or fewer than two
    # runs, is refused with nothing written or discarded
    first = list(itertools.islice(runs, 2))
    if len(first) < 2:
        raise OtelBridgeError(_too_few(args, len(first)))
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in earlier:
        (out / name).unlink(missing_ok=True)
    counts: dict[str, dict[str, Any]] = {}
    with ProvenanceSpool(out) as spool:

        def sink(run_id: str, provenance: dict[str, Any]) -> None:
            validate_provenance(run_id, provenance)
            spool.add(run_id, provenance)
            counts[run_id] = (
                provenance if "counts" in provenance else provenance_summary(provenance)
            )

        with Comparison(config, sink, args.provenance, out) as comparison:
            for r in itertools.chain(first, runs):
                comparison.add(r)
            doc = comparison.finish()
            validate_document({**outline(doc), "provenance": {}})
            spool.write_document(doc, out / "compare.json")
    _write_private(out / "compare.md", render_markdown({**doc, "provenance": counts}).encode())
    joined = doc["joined"]
    print(
        f"compared {len(doc['runs'])} runs: {len(doc['coverage']['tools'])} tools, "
        f"{len(joined['nodes'])} joined nodes, {len(joined['detours'])} detours -> "
        f"{out / 'compare.json'}"
    )
    gone = left_out(doc)
    if gone:
        print(f"{LEFT_OUT}: {'; '.join(gone)}")
    if nothing_shared(doc):
        print(f"otel-bridge: compare: note: {NOTHING_SHARED}", file=sys.stderr)
    if args.model:
        _assist(args, out)
    return 0


def _assist(args: argparse.Namespace, out: Path) -> None:
    """The optional model pass: its outcome is a separate file; compare.json is unchanged."""
    config = ModelConfig(args.model, args.model_name, args.model_timeout)
    result = write_assist(str(out), str(out / "compare.json"), config)
    if result["status"] == "error":
        print(f"otel-bridge: compare: model assistance failed: {result['error']}", file=sys.stderr)
    added = sum(len(r["added"]) for r in result["runs"].values())
    removed = sum(len(r["removed"]) for r in result["runs"].values())
    print(
        f"model {config.method}: {added} added, {removed} removed, "
        f"{len(result['rejected'])} rejected -> {out / ASSIST_JSON}"
    )
