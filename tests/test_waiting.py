"""The shared wait helpers: a condition that holds returns at once, one that never holds fails
with the awaited thing named, and ``poll`` hands back its last reading."""

from __future__ import annotations

import itertools
import time

import pytest
from waiting import poll, wait_until


def test_wait_until_returns_the_first_true_value() -> None:
    """The predicate's first true value is returned; false values before it are skipped."""
    values = iter([0, None, "", 7, 9])
    assert wait_until(lambda: next(values), timeout=5) == 7


def test_wait_until_names_what_it_waited_for() -> None:
    """A predicate that never holds raises AssertionError with the message, after the timeout."""
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 0\.05 s waiting for the moon"):
        wait_until(lambda: False, timeout=0.05, message="the moon")
    assert time.monotonic() - started >= 0.05


def test_poll_returns_the_last_reading() -> None:
    """poll stops at the first ready reading, or returns the last one at the deadline."""
    counter = itertools.count()
    assert poll(lambda: next(counter), lambda n: n >= 3, timeout=5, interval=0.001) == 3
    assert poll(lambda: [1], lambda r: len(r) > 1, timeout=0.02, interval=0.001) == [1]
