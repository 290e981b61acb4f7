"""Stable entity identities, shared by every receiver, processor and exporter.

An identity must not depend on which backend saw the thing: a process observed by the portable
poller and by the netlink connector is one node. On Linux every backend derives a process start
time from ``/proc/<pid>/stat`` (boot time plus start ticks), exactly as psutil does, so the same
process yields the same identity whoever saw it.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid

from otel_bridge.model import EntityKind


def process_id(host_id: str, pid: int, start_time_ms: int | None) -> str:
    """Identity of a process: ``process:<host>:<pid>:<start ms>`` (``?`` if start unknown)."""
    start = "?" if start_time_ms is None else str(start_time_ms)
    return f"{EntityKind.PROCESS}:{host_id}:{pid}:{start}"


def endpoint_id(transport: str, address: str, port: int) -> str:
    """Identity of a network endpoint: ``endpoint:<transport>:<address>:<port>``."""
    return f"{EntityKind.ENDPOINT}:{transport.lower()}:{address}:{port}"


def file_id(path: str) -> str:
    """Identity of a file: ``file:<normalized absolute path>``. Callers resolve links first."""
    return f"{EntityKind.FILE}:{os.path.normpath(path)}"


def executable_id(path: str) -> str:
    """Identity of an executable: ``executable:<normalized path>``."""
    return f"{EntityKind.EXECUTABLE}:{os.path.normpath(path)}"


def kind_id(kind: EntityKind, *parts: str) -> str:
    """Identity for a logical entity (agent, tool call, model, ...): ``<kind>:<part>:...``."""
    return ":".join((str(kind), *parts))


@functools.cache
def _boot_time_s() -> float:
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


@functools.cache
def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def linux_start_time_ms(pid: int) -> int | None:
    """Start time of ``pid`` in ms since the epoch from ``/proc``, or None if it is gone.

    Same arithmetic as psutil's ``Process.create_time()`` on Linux, rounded to a millisecond,
    so every backend agrees on the identity of one process.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: fields start after the last ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        ticks = int(rest[19])
    except (IndexError, ValueError):
        return None
    return start_ms_from_ticks(ticks)


def start_ms_from_ticks(ticks: int) -> int:
    """Convert a ``/proc/<pid>/stat`` start time in clock ticks to ms since the epoch."""
    return round((_boot_time_s() + ticks / _clock_ticks()) * 1000)


def psutil_start_ms(create_time_s: float) -> int:
    """Convert psutil's ``create_time()`` (seconds, float) to the identity's ms."""
    return round(create_time_s * 1000)


@functools.cache
def host_id() -> str:
    """This machine's stable id: ``/etc/machine-id`` where present, else a hostname-derived UUID."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path, encoding="ascii") as f:
                value = f.read().strip()
        except OSError:
            continue
        if value:
            return value
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, socket.gethostname()))
