"""The ``linux`` backend's process-connector socket filter: the kernel keeps only process forks,
execs and process exits for the reader (what ``LinuxBackend._handle`` reads); thread starts and
ends of the whole machine never reach it."""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from host_support import needs_root
from waiting import wait_until

from otel_bridge.arming import open_proc_connector
from otel_bridge.errors import BackendUnavailableError
from otel_bridge.receivers.host.linux import (
    PROC_EVENT_EXEC,
    PROC_EVENT_EXIT,
    PROC_EVENT_FORK,
    attach_process_filter,
    parse_messages,
)

Event = tuple[int, tuple[int, ...]]


@contextmanager
def _connector() -> Iterator[socket.socket]:
    try:
        sock = open_proc_connector()
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def _read(sock: socket.socket, into: list[Event]) -> list[Event]:
    while True:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return into
        into.extend((what, fields) for what, _ts, fields in parse_messages(data))


def _threads_and_a_child() -> int:
    """Start and end 8 threads of this process, then run one child to its exit; its pid."""
    threads = [threading.Thread(target=int) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], os.environ)
    os.waitpid(pid, 0)
    return pid


def _is_thread_event(what: int, fields: tuple[int, ...]) -> bool:
    if what == PROC_EVENT_FORK:
        return fields[2] != fields[3]  # child pid != child tgid: a new thread
    if what == PROC_EVENT_EXIT:
        return fields[0] != fields[1]  # pid != tgid: a thread ended
    return False


@needs_root
def test_the_filter_keeps_process_events_and_drops_thread_events() -> None:
    with _connector() as plain, _connector() as filtered:
        assert attach_process_filter(filtered)
        _read(filtered, [])  # queued before the filter (the subscription's answer)
        child = _threads_and_a_child()
        seen: list[Event] = []
        unfiltered: list[Event] = []

        def child_exited(events: list[Event]) -> bool:
            return any(w == PROC_EVENT_EXIT and f[1] == child for w, f in events)

        wait_until(lambda: child_exited(_read(filtered, seen)), 10, "the child's exit (filtered)")
        wait_until(lambda: child_exited(_read(plain, unfiltered)), 10, "the child's exit")
        me = os.getpid()
        # without the filter the reader gets this process's thread starts and ends
        assert sum(1 for w, f in unfiltered if _is_thread_event(w, f) and me in f) >= 16
        # with it, no thread event of any process, and every process event of the child
        assert not [e for e in seen if _is_thread_event(*e)]
        assert {w for w, _ in seen} <= {PROC_EVENT_FORK, PROC_EVENT_EXEC, PROC_EVENT_EXIT}
        assert any(w == PROC_EVENT_FORK and f[1] == me and f[3] == child for w, f in seen)
        assert any(w == PROC_EVENT_EXEC and f[1] == child for w, f in seen)
