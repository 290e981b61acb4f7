"""Python's cyclic garbage collector paused around one large build of acyclic data."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for the block, when it was running.

    A graph snapshot or a review builds a dict or list per node, edge or record, none of them
    in a cycle, and the allocations trigger collections that each traverse the rows built so
    far: a third of a snapshot's time for a 16,000-span graph, a fifth of a long run's review.
    The pause is for the whole process, so a collection other threads would have triggered
    meanwhile runs when it ends; nothing is lost, only deferred. Nested pauses are one pause.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


COLLECTOR_GEN0_THRESHOLD = 10_000
"""Allocations (net of frees) of tracked objects between two young-generation collections in a
collector process; Python's default is 700."""


def tune_for_collector(*, freeze: bool) -> None:
    """Set this process's cyclic garbage collector for a long-running collector.

    A collector allocates and frees several tracked objects per span (attribute dicts, tuples,
    lists), nearly all of them freed by reference counting within the batch that made them;
    its long-lived data (the graph's rows, the correlator's index) holds no reference cycles.
    At Python's default threshold of 700 the young generation was collected 1,600 to 1,750
    times in a 400,000-span run (0.4 to 0.7 s of CPU); at 10,000, 18 to 20 times (0.06 to 0.1 s)
    (``benchmarks/pipeline_throughput.py``, BENCHMARKS.md "Pipeline throughput"). Cycles are
    still collected, later; the older generations keep their thresholds, and while memory is
    over a ``memory_limiter``'s soft limit its periodic check collects the young generations
    itself (:func:`otel_bridge.processors.memory_limiter.release_memory`). With ``freeze``, the
    heap built before the call (imports, the configuration) moves out of the collector's sight:
    no collection traverses it again, and a forked child (the warm server's) does not copy its
    pages by touching their collector headers; only a process that is a collector from start to
    end freezes (``run``, the warm server): a cycle that was garbage at the call is never freed.
    Called by the commands that run a collector (``run``, ``observe`` and the warm server), never
    by the library's classes.
    """
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(COLLECTOR_GEN0_THRESHOLD, older, oldest)
    if freeze:
        gc.freeze()
