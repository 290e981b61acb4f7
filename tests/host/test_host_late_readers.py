"""A file-event reader seconds behind under load loses nothing and keeps the order of events.

In CI, a live ``compare`` run missed the ``observed_dataflow`` edge ``write_code -> run_tests``
(call_1 writes calc.py, call_2 reads it): on a loaded machine the fanotify reader and the
process-connector reader fell seconds behind each other. File events of a child read before
its fork was (0.25 s grace) were dropped and its pid skipped for 5 s; events read more than 2 s
after their process exited were dropped (the pid had left the lineage); and events read late
were stamped when read, after the next child's write of the same file. These tests drive the
watcher and the retirement rule with the very conditions, on real fanotify groups and real pids.
"""

from __future__ import annotations

import os
import time
from typing import Any

from host_support import needs_root, require_backend
from waiting import wait_until

from otel_bridge.component import Telemetry
from otel_bridge.identity import linux_start_time_ms
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.events import Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.fanotify import FAN_CLOSE_WRITE, FAN_OPEN, FanotifyWatcher
from otel_bridge.receivers.host.filemerge import LAST_TIME, MERGED_EVENTS
from otel_bridge.receivers.host.linux import retire_now
from otel_bridge.receivers.host.procfs import ProcessInfo
from otel_bridge.redaction import Redactor
from otel_bridge.testing import RecordingConsumer


def _ctx(root: int, sink: RecordingConsumer) -> HostContext:
    telemetry = Telemetry()
    emitter = Emitter(sink, telemetry, batch_size=100_000, interval=60)
    return HostContext(
        config=HostConfig(fanotify_events=["open", "close_write"]),
        lineage=Lineage(root),
        events=EventFactory("test", "run", emitter),
        telemetry=telemetry,
        redactor=Redactor(),
    )


def _files(ctx: HostContext, sink: RecordingConsumer) -> list[tuple[str, dict[str, Any], int]]:
    ctx.events.emitter.flush()
    return [
        (r.event_name, dict(r.attributes), r.time_unix_nano)
        for r in sink.logs
        if r.event_name.startswith("file.")
    ]


@needs_root
def test_an_unknown_pids_events_wait_for_the_process_source_not_for_a_timeout() -> None:
    """A child's events read before its fork was read are held however late the process
    source is; once it has read past them, the child's are reported and a stranger's dropped."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink)
    watcher = FanotifyWatcher(ctx)  # not started: the test plays the reader thread
    read_to = [0.0]
    watcher.lineage_read = lambda: read_to[0]
    child, stranger = os.getpid(), 2**22 + 7  # a real pid (identity known) and an unused one
    ctx.lineage.discard(child)
    try:
        watcher._wait(child, FAN_OPEN | FAN_CLOSE_WRITE, "/work/calc.py")
        watcher._wait(stranger, FAN_OPEN, "/etc/elsewhere")
        # the process source is behind for longer than the 0.25 s grace these events had
        past_grace = time.monotonic() + 0.3
        wait_until(lambda: time.monotonic() > past_grace, message="0.3 s to pass")
        watcher._recheck(final=False)
        assert watcher.unattributed == 0  # both held: whose they are is not known yet
        late = time.monotonic() + 5.0  # and still behind 5 s later
        watcher._recheck(final=False, now=late)
        assert watcher.unattributed == 0
        # the process source reads the child's fork, in a pass that began after the events
        ctx.events.remember(ProcessInfo(pid=child, start_ms=linux_start_time_ms(child) or 0))
        ctx.lineage.add(child)
        read_to[0] = late
        watcher._recheck(final=False, now=late)
        assert watcher.unattributed == 1  # the stranger: it never joined, read past it
        assert watcher._is_foreign(stranger)
        assert not watcher._is_foreign(child)
    finally:
        watcher.stop()
    assert [(n, a["file.path"], a["process.pid"]) for n, a, _ in _files(ctx, sink)] == [
        ("file.open", "/work/calc.py", child),
        ("file.write", "/work/calc.py", child),
    ]


@needs_root
def test_an_event_read_after_its_process_exited_is_stamped_at_the_exit() -> None:
    """A late-read event happened before its process's exit: the record says so, so a read by
    one child is not stamped after the write of the next child (both read in one batch)."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink)
    watcher = FanotifyWatcher(ctx)
    me = os.getpid()
    ctx.events.remember(ProcessInfo(pid=me, start_ms=linux_start_time_ms(me) or 0))
    read_at = time.time_ns()
    exits = {me: read_at - 3_000_000_000}  # it exited 3 s before the reader got to its events
    watcher.exited_at = exits.get
    try:
        watcher._path_event(FAN_OPEN, me, "/work/calc.py", read_at)
        del exits[me]  # running (or exit not read yet): the read time stays
        watcher._path_event(FAN_OPEN | FAN_CLOSE_WRITE, me, "/work/calc.py", read_at)
    finally:
        watcher.stop()
    files = _files(ctx, sink)
    assert [(n, t) for n, _, t in files] == [
        ("file.open", read_at - 3_000_000_000),
        ("file.write", read_at),
    ]
    # the two opens are one merged record (docs/host.md): its time the first's, the last's kept
    assert files[0][1][MERGED_EVENTS] == 2
    assert files[0][1][LAST_TIME] == read_at
    assert MERGED_EVENTS not in files[1][1]


def test_an_exited_pid_leaves_the_lineage_once_its_file_events_are_read() -> None:
    """An exited pid stays while the file-event reader has not read past its exit (it used to
    leave 2 s after the exit, and the reader's late events of it were dropped)."""
    handled, due = 100.0, 102.0
    assert not retire_now(101.0, due, handled, files_drained=101.0)  # not due yet
    assert retire_now(102.5, due, handled, files_drained=100.5)  # reader passed the exit
    assert not retire_now(110.0, due, handled, files_drained=99.0)  # reader 11 s behind
    assert retire_now(102.5, due, handled, files_drained=None)  # no file watcher
    assert retire_now(160.0, due, handled, files_drained=99.0)  # at most 60 s


def test_a_later_exit_never_retires_before_an_earlier_one() -> None:
    """The backend retires its queue of exits (in handling order) from the front and stops at
    the first that stays: that is only right because the rule never retires a later exit while
    an earlier one stays, whatever the time and the file reader's progress."""
    handled = [100.0, 100.5, 101.0, 103.0, 130.0, 170.0]
    for now in (99.0, 101.9, 102.5, 103.2, 105.5, 160.2, 171.0, 240.0):
        for drained in (None, 99.0, 100.2, 100.7, 102.0, 150.0, 200.0):
            retired = [retire_now(now, h + 2.0, h, files_drained=drained) for h in handled]
            assert retired == sorted(retired, reverse=True), (now, drained, retired)


@needs_root
def test_events_dropped_while_the_process_source_is_still_behind_degrade_the_file_plane() -> None:
    """Held past the longest wait with the process source still behind, an event's owner is
    unknown: it is dropped, and the file collection says the lineage's may be missing."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink)
    watcher = FanotifyWatcher(ctx)
    watcher.lineage_read = lambda: 0.0  # never read past anything
    try:
        watcher._wait(2**22 + 7, FAN_OPEN, "/work/calc.py")
        watcher._recheck(final=False, now=time.monotonic() + 60.0)
    finally:
        watcher.stop()
    assert watcher.undecided == 1
    assert _files(ctx, sink) == []
    state, reason = ctx.states["file"]
    assert state == "degraded"
    assert "the lineage's may be among them" in reason
