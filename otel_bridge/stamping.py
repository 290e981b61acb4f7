"""How late a host backend may stamp its file records, stated where the report can read it.

A backend that reads the kernel's file events without a kernel time stamps each record when it
reads it: the ``linux`` backend's fanotify reader (``receivers/host/fanotify.py``) reads a busy
queue in paced batches, so a record's time is its read time, up to :data:`FANOTIFY_PACE_S`
after the event. ``strace`` (the syscall's time) and ``ebpf`` (the kernel's) stamp the event
itself. This module imports nothing, so the report reads it without importing a backend.
"""

from __future__ import annotations

FANOTIFY_PACE_S = 0.02
"""The fanotify reader's pacing period: the most its pacing delays an event's read (its
record's time)."""

FILE_STAMP_LATENESS_NS: dict[str, int] = {"linux": int(FANOTIFY_PACE_S * 1e9)}
"""Backend -> the most its file records' times are stated to be later than the event; a
backend not named stamps the event itself."""
