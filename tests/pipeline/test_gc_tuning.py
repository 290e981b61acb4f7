"""A collector process's cyclic garbage collector: a large young generation, a frozen heap."""

from __future__ import annotations

import subprocess
import sys

from otel_bridge.gcpause import COLLECTOR_GEN0_THRESHOLD

_PROBE = """
import gc, sys
from otel_bridge.gcpause import tune_for_collector
before = gc.get_threshold()
tune_for_collector(freeze=sys.argv[1] == "1")
after = gc.get_threshold()
print(before[1:] == after[1:], after[0], gc.get_freeze_count())
"""


def _probe(freeze: bool) -> tuple[str, int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, "1" if freeze else "0"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    return out[0], int(out[1]), int(out[2])


def test_a_collector_process_collects_its_young_generation_less_often() -> None:
    older_kept, gen0, frozen = _probe(freeze=False)
    assert older_kept == "True"  # the older generations keep Python's thresholds
    assert gen0 == COLLECTOR_GEN0_THRESHOLD
    assert frozen == 0  # only a process that is a collector throughout freezes


def test_a_standing_collector_freezes_its_start_up_heap() -> None:
    _, gen0, frozen = _probe(freeze=True)
    assert gen0 == COLLECTOR_GEN0_THRESHOLD
    assert frozen > 1000  # the interpreter's and the package's objects
