"""Waiting on conditions in tests: poll a predicate until it holds or a deadline passes.

Tests never sleep to let something happen. They wait for the condition the sleep stood for
(:func:`wait_until`), or read a value until it is ready and then assert on the last reading
(:func:`poll`), so a slow machine only makes a test slower, never wrong, and a failure says
what was awaited.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = 10.0,
    message: str = "the condition",
    *,
    interval: float = 0.01,
) -> T:
    """Call ``predicate`` until it returns a true value, and return that value.

    Raises ``AssertionError`` naming ``message`` when ``timeout`` seconds pass first (the
    predicate is always tried once more at the deadline).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {message}")
        time.sleep(interval)  # the poll interval between two checks, not synchronisation


def poll(
    read: Callable[[], T],
    ready: Callable[[T], object],
    timeout: float = 10.0,
    *,
    interval: float = 0.05,
) -> T:
    """Call ``read`` until ``ready`` holds for its result or ``timeout`` passes; the last result.

    For a test that asserts on the result afterwards, so that a timeout fails with the detail
    of what was read rather than a bare "timed out".
    """
    deadline = time.monotonic() + timeout
    result = read()
    while not ready(result) and time.monotonic() < deadline:
        time.sleep(interval)  # the poll interval between two reads, not synchronisation
        result = read()
    return result
