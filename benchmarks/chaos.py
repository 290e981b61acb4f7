"""Chaos: kill -9 the collector at random moments; count acknowledged, delivered and lost spans.

    python benchmarks/chaos.py [--kills 20] [--seed 13] [--no-journal]
                               [--config harness|local|phoenix]

Runs ``tests/chaos/chaos_harness.py``'s scenario (a real OTel SDK client sending over OTLP/gRPC
to ``otel-bridge run``, whose file, graph (journaled) and OTLP (persistent queue) exporters
are checked after restart; the downstream collector comes and goes) and prints the figures for
BENCHMARKS.md. ``--no-journal`` turns the graph journal off to show what it protects.
``--config local`` runs collector A on the bundled ``configs/local.yaml`` as shipped (graph with
its journal, JSON-lines records, the standing host receiver); ``--config phoenix`` on
``configs/phoenix.yaml`` (its persistent queue towards B over OTLP/HTTP, standing in for
Phoenix). Destinations a configuration does not have print as ``n/a``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "chaos"), str(ROOT / "tests")]

from chaos_harness import DESTINATIONS, run_chaos  # noqa: E402


def main() -> int:
    """Run the scenario and print its figures; exit 1 if an acknowledged span was lost."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--no-journal", action="store_true")
    parser.add_argument("--config", choices=sorted(DESTINATIONS), default="harness")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="otel-bridge-chaos-") as work:
        r = run_chaos(
            Path(work),
            kills=args.kills,
            seed=args.seed,
            journal=not args.no_journal,
            config=args.config,
        )

    def tally(name: str, found: int, missing: list[str]) -> str:
        return f"{found}   lost {len(missing)}" if name in r.checked else "n/a"

    print(f"collector A's configuration        {args.config}")
    print(f"kills (SIGKILL of the collector)   {r.kills}")
    print(f"downstream restarts                {r.downstream_restarts}")
    print(f"spans sent                         {r.sent}")
    print(f"spans acknowledged                 {r.acknowledged}")
    print(f"  in the file exporter             {tally('file', r.in_file, r.lost_file)}")
    print(
        f"  delivered downstream (WAL)       {tally('downstream', r.downstream, r.lost_downstream)}"
    )
    print(f"    duplicates downstream          {r.downstream_duplicates}")
    print(f"  in graph.json                    {tally('graph', r.in_graph, r.lost_graph)}")
    print(f"torn JSON lines (unacknowledged)   {r.torn_lines}")
    print(f"wall-clock seconds                 {r.seconds:.0f}")
    lost = r.lost_file or r.lost_downstream or r.lost_graph
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
