"""Releasing kernel objects off a stop's path.

Closing the last descriptor of a perf tracepoint event unregisters the tracepoint, and closing a
fanotify group tears down its marks: either way the kernel then waits for a grace period (RCU,
SRCU) with the closing thread asleep, 25 to 45 ms and up to 15 ms measured at the end of an
``observe`` run. Reaping the killed exec-image helper waits for its exit, about 5 ms. Nothing is
left to read from any of them by then (each stop reads its source to the end first), so a stop
hands the release to :func:`release`, and the run's outputs and summary do not wait for the
kernel. :func:`wait_released` waits for the releases under way (tests, and anything that must
see the descriptors closed).

Each release runs in a thread of its own, started with :func:`_thread.start_new_thread`, which
returns as soon as the thread exists: ``threading.Thread.start`` would also wait until the new
thread has run (taken the GIL), a hand-over that costs the stopping thread up to milliseconds
on a busy machine, three times at the end of every ``observe``."""

from __future__ import annotations

import _thread
import threading
import time
from collections.abc import Callable

_lock = threading.Lock()
_under_way: list[threading.Event] = []
"""One event per release started and not yet seen ended, set when it ends."""


def release(close: Callable[[], None]) -> None:
    """Run ``close`` in a background thread (here, when no thread can be started).

    ``close`` must not need anything of the caller's after the call returns, and must not raise
    (nobody is there to be told): it releases what its caller already finished with."""
    ended = threading.Event()

    def run() -> None:
        try:
            close()
        finally:
            ended.set()

    with _lock:
        _under_way[:] = [e for e in _under_way if not e.is_set()]
        _under_way.append(ended)
    try:
        _thread.start_new_thread(run, ())
    except RuntimeError:  # "can't start new thread": released late rather than never
        run()


def wait_released(timeout: float | None = None) -> bool:
    """Wait for every release under way (at most ``timeout`` seconds in all); True once done."""
    with _lock:
        events = list(_under_way)
    deadline = None if timeout is None else time.monotonic() + timeout
    for ended in events:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ended.wait(left)
    with _lock:
        _under_way[:] = [e for e in _under_way if not e.is_set()]
        return not _under_way
