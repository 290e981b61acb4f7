"""Releases off a stop's path (:mod:`otel_bridge.receivers.host.release`): the stop does not
wait for them, they can be waited for, and once they are done nothing of the run is left."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil
import pytest
from host_support import Gated, finish, needs_root, start_receiver

from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.release import release, wait_released
from otel_bridge.receivers.host.selection import probe_backends


def test_release_returns_before_the_close_and_can_be_waited_for() -> None:
    """The caller goes on while the close sleeps (as in a kernel grace period);
    :func:`wait_released` says whether it ended."""
    closing = threading.Event()
    closed = threading.Event()

    def close() -> None:
        closing.wait(30)
        closed.set()

    release(close)
    assert not closed.is_set()
    assert not wait_released(timeout=0.01)
    closing.set()
    assert wait_released(timeout=30)
    assert closed.is_set()


@needs_root
def test_linux_stop_leaves_nothing_open_once_released(tmp_path: Path) -> None:
    """The linux backend's sources (process connector, exec-image helper, fanotify groups, perf
    rings where perf is allowed) are all closed, and the helper reaped, once the releases its
    stop handed off are done."""
    if dict(probe_backends(HostConfig()))["linux"]:
        pytest.skip("linux backend unavailable here")
    assert wait_released(timeout=30)  # an earlier test's
    before = set(os.listdir("/proc/self/fd"))
    children_before = {p.pid for p in psutil.Process().children()}  # other tests' servers
    work = Gated("cat /dev/null", cwd=str(tmp_path))
    observed = start_receiver(HostConfig(backend="linux"), work.pid)
    work.release()
    assert work.wait() == 0
    finish(observed)
    assert wait_released(timeout=30)
    assert set(os.listdir("/proc/self/fd")) - before == set()
    assert {p.pid for p in psutil.Process().children()} - children_before == set()
