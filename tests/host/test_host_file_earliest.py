"""Every fanotify file record bounds the earliest its event can have happened, measured per
record, and that bound holds however late the reader is.

fanotify events carry no time: the ``linux`` backend stamps a file record when it reads it.
The code used to state a fixed "up to 20 ms" late, but on a loaded machine (load average 7)
records arrived 40 to 64 ms after their event and the report left out a file a call did change.
Now a record read more than the 20 ms pacing period after the reader last found the queue
empty carries that time, ``evidence.earliest_time_unix_nano`` (``docs/host.md``, "When a file
record's event happened"); one without it was read within the period. These tests play
the reader thread's passes on real fanotify groups and a real file written by this process,
with the reader held back between the write and the read.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from host_support import needs_root, require_backend
from waiting import wait_until

from otel_bridge.component import Telemetry
from otel_bridge.identity import linux_start_time_ms
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.events import Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.fanotify import FAN_CLOSE_WRITE, FAN_OPEN, FanotifyWatcher
from otel_bridge.receivers.host.procfs import ProcessInfo
from otel_bridge.redaction import Redactor
from otel_bridge.stamping import EARLIEST_TIME, FILE_STAMP_LATENESS_NS
from otel_bridge.testing import RecordingConsumer

HELD_S = 0.15
"""How long the reader is held between the write and its read (longer than the 20 ms the
records used to promise)."""


def _watcher(sink: RecordingConsumer) -> tuple[HostContext, FanotifyWatcher]:
    me = os.getpid()
    telemetry = Telemetry()
    ctx = HostContext(
        config=HostConfig(fanotify_events=["open", "close_write"]),
        lineage=Lineage(me),
        events=EventFactory(
            "test", "run", Emitter(sink, telemetry, batch_size=100_000, interval=60)
        ),
        telemetry=telemetry,
        redactor=Redactor(),
    )
    ctx.events.remember(ProcessInfo(pid=me, start_ms=linux_start_time_ms(me) or 0))
    return ctx, FanotifyWatcher(ctx)  # not started: the test plays the reader thread


def _records(ctx: HostContext, sink: RecordingConsumer, path: Path) -> list[tuple[str, Any, int]]:
    ctx.events.emitter.flush()
    return [
        (r.event_name, r.attributes.get(EARLIEST_TIME), r.time_unix_nano)
        for r in sink.logs
        if r.event_name.startswith("file.") and r.attributes.get("file.path") == str(path)
    ]


def _hold(seconds: float) -> None:
    """The reader is held (another thread has the CPU) for ``seconds``."""
    until = time.monotonic() + seconds
    wait_until(lambda: time.monotonic() >= until, message=f"{seconds} s to pass")


@needs_root
def test_a_record_read_late_states_an_earliest_time_before_its_event(tmp_path: Path) -> None:
    """A write read 150 ms after it happened: the records' times are that late, and their
    earliest time is before the write began, so the window they state covers the delay."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx, watcher = _watcher(sink)
    path = tmp_path / "notes.txt"
    try:
        assert watcher.since_ns > 0  # the groups' opening: no event was queued before
        watcher._pass()  # reads whatever is queued: the queue is empty from its start on
        began = time.time_ns()
        path.write_text("x")
        written = time.time_ns()
        _hold(HELD_S)
        watcher._pass()
    finally:
        watcher.stop()  # emits the held (merged) records
    records = _records(ctx, sink, path)
    assert sorted(name for name, _, _ in records) == ["file.open", "file.write"], records
    for _name, earliest, at in records:
        assert type(earliest) is int
        assert earliest <= began  # never later than the event
        assert at - written >= HELD_S * 1e9  # read late: more than the 20 ms once promised
        assert at - earliest >= at - written  # the stated window covers the real delay


@needs_root
def test_a_record_held_for_its_pid_keeps_the_earliest_time_it_was_read_with() -> None:
    """An event of a pid the lineage did not know yet, reported passes later, keeps the
    earliest time of the pass that read it, not the later one of the pass that reports it."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx, watcher = _watcher(sink)
    me = os.getpid()
    ctx.lineage.discard(me)
    try:
        watcher._pass()
        read_with = watcher.since_ns
        _hold(0.03)  # read more than the pacing period after: the record states its time
        watcher._wait(me, FAN_OPEN | FAN_CLOSE_WRITE, "/work/held.py")
        _hold(0.01)
        watcher._pass()  # a later pass: a later earliest time for what it reads
        assert watcher.since_ns > read_with
        ctx.lineage.add(me)
        watcher._recheck(final=False)
    finally:
        watcher.stop()
    records = _records(ctx, sink, Path("/work/held.py"))
    assert [(n, e) for n, e, _ in records] == [
        ("file.open", read_with),
        ("file.write", read_with),
    ]
    assert all(e <= at for _, e, at in records)


@needs_root
def test_a_record_stating_no_earliest_time_was_read_within_the_pacing_period(
    tmp_path: Path,
) -> None:
    """A write read at once: each record either states an earliest time (never later than the
    write) or states none, and then it was read within the 20 ms pacing period of the write
    (the contract that lets a dense queue's records go without the attribute)."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx, watcher = _watcher(sink)
    path = tmp_path / "prompt.txt"
    try:
        watcher._pass()
        began = time.time_ns()
        path.write_text("x")
        written = time.time_ns()
        watcher._pass()
    finally:
        watcher.stop()
    records = _records(ctx, sink, path)
    assert sorted(name for name, _, _ in records) == ["file.open", "file.write"], records
    for _name, earliest, at in records:
        if earliest is None:
            assert at - written <= FILE_STAMP_LATENESS_NS["linux"], (at, written)
        else:
            assert type(earliest) is int
            assert earliest <= began  # never later than the event
            assert at - earliest > FILE_STAMP_LATENESS_NS["linux"]  # stated only when it says more
