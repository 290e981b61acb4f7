"""``otel-bridge verify DIR``: check a run directory against its SHA-256 manifest."""

from __future__ import annotations

import argparse
import sys

from otel_bridge.rundir import check


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``verify`` command."""
    parser = subparsers.add_parser(
        "verify",
        help="check a run directory against its manifest",
        description=(
            "Recompute the SHA-256 of every file of run directory DIR and compare with its "
            "manifest.json, following no link. Exits 0 when everything matches, 1 naming each "
            "modified, missing or unexpected file, directory or link, or saying the run is "
            "incomplete (interrupted before its end). The persistent queues under queue/ are "
            "checked for their layout only: a later collector may drain them. The manifest "
            "detects changes relative to itself; it is not tamper-proof when an attacker can "
            "rewrite the manifest too."
        ),
    )
    parser.add_argument("dir", metavar="DIR", help="the run directory (holds manifest.json)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Verify ``args.dir``; print each problem; return 1 when there is any."""
    problems, mutable = check(args.dir)
    if problems:
        for problem in problems:
            print(f"{args.dir}: {problem}", file=sys.stderr)
        print(f"{args.dir}: FAILED ({len(problems)} problem(s))", file=sys.stderr)
        return 1
    print(f"{args.dir}: OK")
    for queue in mutable:
        print(
            f"{args.dir}: {queue}/ not covered by the manifest: persistent queues a later "
            "collector may drain (their layout was checked, not their bytes)"
        )
    return 0
