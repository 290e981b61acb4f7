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
