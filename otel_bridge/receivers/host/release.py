"""Releasing kernel objects off a stop's path.

Closing the last descriptor of a perf tracepoint event unregisters the tracepoint, and closing a
fanotify group tears down its marks: either way the kernel then waits for a grace period (RCU,
SRCU) with the closing thread asleep, 25 to 45 ms and up to 15 ms measured at the end of an
``observe`` run. Reaping the killed exec-image helper waits for its exit, about 5 ms. Nothing is
left to read from any of them by then (each stop reads its source to the end first), so a stop
hands the release to :func:`release`, and the run's outputs and summary do not wait for the
kernel. :func:`wait_released` waits for the releases under way (tests, and anything that must
see the descriptors closed)."""

from __future__ import annotations

import threading
from collections.abc import Callable

_lock = threading.Lock()
_under_way: list[threading.Thread] = []


def release(name: str, close: Callable[[], None]) -> None:
    """Run ``close`` in a background (daemon) thread named ``release-<name>``.

    ``close`` must not need anything of the caller's after the call returns, and must not raise
    (nobody is there to be told): it releases what its caller already finished with."""
    thread = threading.Thread(target=close, name=f"release-{name}", daemon=True)
    with _lock:
        _under_way[:] = [t for t in _under_way if t.is_alive()]
        _under_way.append(thread)
    thread.start()


def wait_released(timeout: float | None = None) -> bool:
    """Wait for every release under way (at most ``timeout`` seconds in all); True once done."""
    with _lock:
        threads = list(_under_way)
    for thread in threads:
        thread.join(timeout)
    with _lock:
        _under_way[:] = [t for t in _under_way if t.is_alive()]
        return not _under_way
