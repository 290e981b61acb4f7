"""How a host backend's file records state when their event can have happened, stated where the
report can read it.

A backend that reads the kernel's file events without a kernel time stamps each record when it
reads it: the ``linux`` backend's fanotify reader (``receivers/host/fanotify.py``). How late that
read is has no fixed bound: the reader paces a busy queue (:data:`FANOTIFY_PACE_S`) and, on a
loaded machine, is itself scheduled late (40 to 64 ms at a load average of 7). So it measures,
per record, when it last found the queue empty before it read the event: the event happened
between that time and the record's time. A record whose event can be older than the pacing
period carries that time as :data:`EARLIEST_TIME`; a record without it was read within
:data:`FANOTIFY_PACE_S` of its event (the common case, where the attribute would say nothing
more and cost every record its encoding). ``strace`` (the syscall's time) and ``ebpf`` (the
kernel's) stamp the event itself. This module imports nothing, so the report reads it without
importing a backend.
"""

from __future__ import annotations

FANOTIFY_PACE_S = 0.02
"""The fanotify reader's pacing period: how long it waits before reading a busy queue again (a
part of how late a record's time is, not a bound of it)."""

EARLIEST_TIME = "evidence.earliest_time_unix_nano"
"""A file record's attribute (int, nanoseconds since the epoch, on the clock of its time): the
earliest its event can have happened, never later than the event, stated when it is more than
:data:`FANOTIFY_PACE_S` before the record's time. A merged record's is its first event's."""

FANOTIFY_PACE_NS = int(FANOTIFY_PACE_S * 1e9)
""":data:`FANOTIFY_PACE_S` in nanoseconds: a file record read later than this after the reader
last found the queue empty states :data:`EARLIEST_TIME`."""

FILE_STAMP_LATENESS_NS: dict[str, int] = {"linux": FANOTIFY_PACE_NS}
"""Backend -> how late its file records' times can be when a record states no
:data:`EARLIEST_TIME`: its pacing period. A backend not named stamps the event itself."""
