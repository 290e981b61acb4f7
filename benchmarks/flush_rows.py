"""The ``postgres`` exporter's flush: the rows of the nodes and edges a batch touched.

The exporter keeps its database copy of a run's graph current by upserting, at each flush, only
the rows its observations touched since the previous flush (``GraphAccumulator.rows``). Their
cost must follow the touched rows, not the graph: a gateway's graph grows for the whole run.
This benchmark builds graphs of growing size from ``graph_materialization``'s synthetic OS
events (one process opening files: the process node has one incident edge per file, the worst
case of a busy node), then times ``rows`` for the last batch's touched nodes and edges, and a
whole snapshot (``to_dict``) for comparison. CPU time (``time.process_time``), best of 5.

Run: ``python benchmarks/flush_rows.py`` (``--sizes 10000,100000,300000``, ``--batch 256``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from graph_materialization import synthetic_events

from otel_bridge.graph import GraphAccumulator


def best_of(fn: Callable[[], object], reps: int = 5) -> float:
    """The least CPU time of ``reps`` calls of ``fn``."""
    best = float("inf")
    for _ in range(reps):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def measure(size: int, batch: int) -> tuple[int, int, float, float]:
    """(nodes, edges, rows CPU, snapshot CPU) for a graph of ``size`` file events."""
    events = synthetic_events(size + batch, cap=size + batch)
    acc = GraphAccumulator(retain_support=True, run={"id": "r", "runtime_reads": "keep"})
    acc.apply_many(events[:size])
    acc.rows((), ())  # the row index starts with the graph so far, as after a first flush
    last = events[size:]
    acc.apply_many(last)
    nodes = {o.subject.id for o in last} | {o.object.id for o in last if o.object is not None}
    edges = {
        (o.subject.id, o.relation.value, o.object.id)
        for o in last
        if o.object is not None and o.relation is not None
    }
    rows = best_of(lambda: acc.rows(nodes, edges))
    start = time.process_time()
    doc = acc.to_dict()  # timed once: a whole snapshot is the slow side
    snapshot = time.process_time() - start
    return len(doc["nodes"]), len(doc["edges"]), rows, snapshot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,300000")
    parser.add_argument("--batch", type=int, default=256, help="events in the touched batch")
    args = parser.parse_args(argv)
    print(f"rows of one batch of {args.batch} events (touched nodes and edges), best of 5")
    print(f"{'nodes':>9} {'edges':>9} {'rows (flush)':>14} {'whole snapshot':>16}")
    for size in (int(s) for s in args.sizes.split(",")):
        nodes, edges, rows, snapshot = measure(size, args.batch)
        print(f"{nodes:>9,} {edges:>9,} {rows * 1e3:>11.2f} ms {snapshot * 1e3:>13.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
