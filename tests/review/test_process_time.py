"""Where the review places a process in time (``review.evidence.process_start``).

A process's stated start (``process.creation.time``, the identity's ms) comes from
``/proc/stat``'s ``btime``, the boot time truncated to a whole second, so it is early by the
boot's fraction of a second. The review places a process at the earlier of its first observation
and the stated start plus 1 s.
"""

from __future__ import annotations

import subprocess
import sys
import time

from otel_bridge.identity import linux_start_time_ms
from otel_bridge.model import ProcessFacts
from otel_bridge.review.evidence import process_start

S = 1_000_000_000
MS = 1_000_000


def _facts(start_ms: int | None) -> ProcessFacts:
    return ProcessFacts(host_id="h", pid=7, start_time_ms=start_ms)


def test_a_real_process_stated_start_is_early_by_the_boots_fraction() -> None:
    """The arithmetic ``ps`` and psutil use, on a process started now: its stated start is
    before the moment it was started by the part of a second ``btime`` drops (within a clock
    tick and the rounding to a millisecond)."""
    with open("/proc/stat", encoding="ascii") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    fraction = time.time_ns() - time.clock_gettime_ns(time.CLOCK_BOOTTIME) - btime * S
    assert 0 <= fraction < S
    before = time.time_ns()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    try:
        stated = linux_start_time_ms(child.pid)
    finally:
        child.communicate(b"")
    assert stated is not None
    tick = 10 * MS + MS  # a clock tick (CLK_TCK 100) and the ms rounding
    assert before - fraction - tick <= stated * MS <= time.time_ns() - fraction + MS


def test_an_observed_start_event_places_the_process() -> None:
    """Observed 0.76 s after the stated start (the start event, on the wall clock): there."""
    assert process_start(1000 * S + 760 * MS, _facts(1000_000)) == 1000 * S + 760 * MS


def test_a_process_first_seen_late_is_placed_within_a_second_of_its_stated_start() -> None:
    """Found already running (a standing collector's first scan, 5 s after it started): its
    start can be no later than the stated start plus 1 s."""
    assert process_start(1005 * S, _facts(1000_000)) == 1001 * S


def test_never_before_the_stated_start_and_without_facts_the_observation() -> None:
    """A first sighting before the stated start (the wall clock stepped back) is not believed;
    with no stated start, the first sighting is all there is."""
    assert process_start(999 * S, _facts(1000_000)) == 1000 * S
    assert process_start(None, _facts(1000_000)) == 1000 * S
    assert process_start(42, _facts(None)) == 42
    assert process_start(42, None) == 42
