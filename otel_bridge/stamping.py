"""How a host backend's file records state when their event can have happened, stated where the
report can read it.

A backend that reads the kernel's file events without a kernel time stamps each record when it
reads it: the ``linux`` backend's fanotify reader (``receivers/host/fanotify.py``). How late that
read is has no fixed bound: the reader paces a busy queue (:data:`FANOTIFY_PACE_S`) and, on a
loaded machine, is itself scheduled late (40 to 64 ms at a load average of 7). So each of its
file records carries :data:`EARLIEST_TIME`, measured per record: when the reader last found the
queue empty before it read the event. The event happened between that time and the record's
time. ``strace`` (the syscall's time) and ``ebpf`` (the kernel's) stamp the event itself. This
module imports nothing, so the report reads it without importing a backend.
"""

from __future__ import annotations

FANOTIFY_PACE_S = 0.02
"""The fanotify reader's pacing period: how long it waits before reading a busy queue again (a
part of how late a record's time is, not a bound of it)."""

EARLIEST_TIME = "evidence.earliest_time_unix_nano"
"""A file record's attribute (int, nanoseconds since the epoch, on the clock of its time): the
earliest its event can have happened, never later than the event nor than the record's time.
A merged record's is its first event's."""

FILE_STAMP_LATENESS_NS: dict[str, int] = {"linux": int(FANOTIFY_PACE_S * 1e9)}
"""Backend -> how late its file records' times are assumed to be when a record states no
:data:`EARLIEST_TIME` (a graph written before records carried it): the pacing period only, an
assumption, not a bound (a reader late under load is later). A backend not named stamps the
event itself."""
