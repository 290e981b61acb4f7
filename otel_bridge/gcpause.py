"""Python's cyclic garbage collector: paused around one large build of acyclic data, and set
for a process that runs a collector."""

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


COLLECTOR_GEN0_THRESHOLD = 50_000
"""Young collections in a collector process: after this many more container allocations than
deallocations (Python's default is 700)."""


def set_for_collector() -> None:
    """Set this process's cyclic garbage collector for running a collector: the console
    commands ``otel-bridge run`` and ``observe`` call it before they build one; a library
    caller's process keeps its own settings.

    The pipeline's records are ``gc=False`` structs and acyclic containers that live for one
    batch, so a young collection almost never frees anything (the 16-client admission test's
    collector, 32 requests of 1,000 spans, freed about 900 objects in all with either
    setting), yet at Python's threshold of 700 a batch of a few hundred spans starts several,
    each walking every container the batch holds and promoting the survivors to be walked
    again. At 50,000 the pipeline benchmark's collector collects a few times per run instead
    of about 1,770 times per 400,000 spans (``benchmarks/pipeline_throughput.py`` prints the
    collections and their time; ``BENCHMARKS.md``). The objects built before the collector
    (modules, classes, configuration) are frozen out of the collector's sight. Cyclic garbage
    is still collected, later, and the memory limiter collects whenever usage is over its soft
    limit (``processors/memory_limiter.py``, ``release_memory``).
    """
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(max(COLLECTOR_GEN0_THRESHOLD, young), middle, old)
