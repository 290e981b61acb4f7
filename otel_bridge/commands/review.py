"""``otel-bridge review RUN_DIR``: the claim-to-evidence review of a run directory."""

from __future__ import annotations

import argparse
import os
import sys

from otel_bridge.assist import ModelConfig
from otel_bridge.commands._model_options import add_model_options
from otel_bridge.errors import require_readable
from otel_bridge.review import REVIEW_JSON, summary_lines, write_review
from otel_bridge.review.assist import ASSIST_JSON, AUDIT, write_assist
from otel_bridge.review.build import RECORDS, REVIEW_MD
from otel_bridge.rundir import claim_outputs
from otel_bridge.store.options import add_db_options, required_file, stored_run_dir

OUTPUTS = (REVIEW_JSON, REVIEW_MD, RECORDS, ASSIST_JSON, AUDIT)
"""The files ``review`` writes into its output directory (an earlier review's)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``review`` command."""
    parser = subparsers.add_parser(
        "review",
        help="review the claims of a run's agent sessions against the observed evidence",
        description=(
            "Read RUN_DIR's graph.json and streams (an observe run directory, or a standing "
            "collector's graph with its JSONL streams), build the claim-to-evidence review of "
            "every agent session in it, write review.json, review.md and review-records.jsonl "
            "(owner-only) and print each claim with its status and the findings. See "
            "docs/review.md."
        ),
    )
    parser.add_argument(
        "run_dir", metavar="RUN_DIR", nargs="?", help="directory holding graph.json (or --db)"
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="DIR",
        help="write the review files here instead of into RUN_DIR",
    )
    parser.add_argument(
        "--replace",
        action="store_true",
        help="replace the previous review in -o DIR (default: refuse a directory holding one)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="print only where the review was written"
    )
    parser.add_argument(
        "--transcript",
        metavar="FILE",
        action="append",
        default=[],
        help="also read this Codex session transcript (rollout JSONL); repeatable",
    )
    add_db_options(parser)
    add_model_options(
        parser,
        "docs/review.md",
        "OpenAI-compatible base URL (http://127.0.0.1:8000/v1) asked for proposals",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Review ``args.run_dir``; 0 when written (findings are output, not failures)."""
    if args.db:  # the stored run, written as a run directory (docs/store.md)
        args.run_dir, args.output = stored_run_dir(args, args.output), None
    run_dir = required_file(args, "RUN_DIR", "run_dir")
    for path in args.transcript:  # before anything is written
        require_readable(path, "--transcript")
    if args.output:  # an earlier review in -o DIR: refused, or discarded with --replace
        for name in claim_outputs(args.output, OUTPUTS, replace=args.replace, what="review"):
            os.unlink(os.path.join(args.output, name))
    doc = write_review(run_dir, args.output, tuple(args.transcript))
    if not args.quiet:
        for line in summary_lines(doc):
            print(line)
    target = os.path.abspath(args.output or args.run_dir)
    print(f"review: {os.path.join(target, REVIEW_JSON)}")
    if args.model:
        _assist(args, doc, target)
    return 0


def _assist(args: argparse.Namespace, doc: dict[str, object], target: str) -> None:
    """The optional model pass: its outcome is a separate file; review.json is unchanged."""
    config = ModelConfig(args.model, args.model_name, args.model_timeout)
    result = write_assist(target, doc, config)
    if result["status"] == "error":
        print(f"otel-bridge: review: model assistance failed: {result['error']}", file=sys.stderr)
    print(
        f"model {config.method}: {len(result['edges'])} supports, {len(result['splits'])} "
        f"splits accepted, {len(result['rejected'])} rejected -> "
        f"{os.path.join(target, ASSIST_JSON)}"
    )
