"""Reading one process's facts from ``/proc``, the same way for every Linux backend.

Every backend resolves a process's identity through :func:`read_process`, so one process seen by
two backends yields one identity: ``(host.id, pid, start ms)`` with the start time computed by
:func:`otel_bridge.identity.linux_start_time_ms` arithmetic.

Short-lived processes: event-driven backends call this the moment a fork or exec is reported.
A process that is already gone by then cannot be read; the backend derives its start time from
the event's kernel timestamp (see :func:`approx_start_ms`) and marks the identity approximate
(``process.creation.time.approximate=true``).
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field

from otel_bridge.identity import start_ms_from_ticks
from otel_bridge.redaction import Redactor


@dataclass(slots=True)
class ProcessInfo:
    """What is known about one process. ``start_ms`` is the identity's start time."""

    pid: int
    start_ms: int
    ppid: int = 0
    approximate: bool = False
    exe: str = ""
    argv: list[str] = field(default_factory=list)
    cwd: str = ""
    traceparent: str = ""
    env: dict[str, str] | None = None

    @property
    def name(self) -> str:
        """The executable's base name (falls back to argv[0])."""
        if self.exe:
            return os.path.basename(self.exe)
        return os.path.basename(self.argv[0]) if self.argv else ""


_READ_SIZE = 65536


def read_bytes(path: str) -> bytes | None:
    """The whole file, None when it cannot be read. Descriptor-level (``os.open``, ``os.read``):
    a buffered file object costs four more system calls per file (``fstat``, ``ioctl``, two
    ``lseek``), and the ``linux`` event reader reads five of these files per exec at real-time
    priority, preempting the workload meanwhile."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        parts = [os.read(fd, _READ_SIZE)]
        while parts[-1]:
            parts.append(os.read(fd, _READ_SIZE))
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(parts)


def read_stat(pid: int) -> tuple[int, int] | None:
    """``(ppid, start ticks)`` of ``pid`` from ``/proc/<pid>/stat``, None if it is gone."""
    data = read_bytes(f"/proc/{pid}/stat")
    if not data:
        return None
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return int(rest[1]), int(rest[19])
    except (IndexError, ValueError):
        return None


def tgid_of(tid: int) -> int | None:
    """The thread-group id (process id) of task ``tid``, None if it is gone."""
    data = read_bytes(f"/proc/{tid}/status")
    if data is None:
        return None
    for line in data.splitlines():
        if line.startswith(b"Tgid:"):
            return int(line.split()[1])
    return None


def read_process(
    pid: int, redactor: Redactor, *, capture_environment: bool = False
) -> ProcessInfo | None:
    """Everything the events need about ``pid``; None when it has already exited.

    Only ``TRACEPARENT`` is taken from the environment unless ``capture_environment`` is set,
    and then the environment is redacted. Unreadable parts (permissions, a race with exit)
    stay empty: identity only needs ``stat``.
    """
    stat = read_stat(pid)
    if stat is None:
        return None
    ppid, ticks = stat
    info = ProcessInfo(pid=pid, start_ms=start_ms_from_ticks(ticks), ppid=ppid)
    with contextlib.suppress(OSError):
        info.exe = os.readlink(f"/proc/{pid}/exe")
    raw = read_bytes(f"/proc/{pid}/cmdline")
    if raw:
        info.argv = redactor.argv(
            [a.decode("utf-8", "surrogateescape") for a in raw.rstrip(b"\0").split(b"\0")]
        )
    with contextlib.suppress(OSError):
        info.cwd = os.readlink(f"/proc/{pid}/cwd")
    environ = read_bytes(f"/proc/{pid}/environ")
    if environ:
        env: dict[str, str] = {}
        for item in environ.split(b"\0"):
            name, sep, value = item.partition(b"=")
            if not sep:
                continue
            key = name.decode("utf-8", "surrogateescape")
            if key == "TRACEPARENT":
                info.traceparent = value.decode("ascii", "replace")
            if capture_environment:
                env[key] = value.decode("utf-8", "surrogateescape")
            elif info.traceparent:
                break
        if capture_environment:
            info.env = redactor.env(env)
    return info


def approx_start_ms(event_monotonic_ns: int) -> int:
    """Start time (identity ms) estimated from a kernel event timestamp.

    Kernel events carry ``ktime_get_ns()`` (CLOCK_MONOTONIC). ``/proc`` start times count
    CLOCK_BOOTTIME ticks; the two agree unless the machine was suspended. The event comes
    slightly after the fork, so flooring to a tick usually reproduces the exact identity; the
    result is still marked approximate.
    """
    boottime_minus_mono = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
    ticks_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    ticks = (event_monotonic_ns + max(0, boottime_minus_mono)) // ticks_ns
    return start_ms_from_ticks(int(ticks))


def monotonic_to_wall_ns(event_monotonic_ns: int) -> int:
    """Convert a CLOCK_MONOTONIC timestamp to wall-clock ns since the epoch."""
    return event_monotonic_ns + (time.time_ns() - time.monotonic_ns())


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (all its threads), from ``/proc/<pid>/task/*/children``."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        data = read_bytes(f"/proc/{pid}/task/{tid}/children")
        if data:
            out.extend(int(x) for x in data.split())
    return out


def descendants_of(pid: int) -> list[int]:
    """``pid``'s living descendants, parents before children."""
    out: list[int] = []
    stack = [pid]
    seen = {pid}
    while stack:
        for child in children_of(stack.pop()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                stack.append(child)
    return out
