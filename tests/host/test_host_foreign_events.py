"""Foreign file events are decided at the read, before their descriptors are resolved.

The ``linux`` backend's fanotify mark sees every file event of the machine. An event of a pid
the lineage does not know used to be resolved (``readlink``) and held until the process source's
next pass; now the reader asks the process source for a pass that begins after the read and
decides at once: a pid still unknown is another process (its events dropped unread, counted,
the pid skipped), a pid whose fork that pass read is the lineage's (reported, nothing lost).
Real fanotify groups and real processes; the process source is played by the test.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from host_support import held_context, needs_root, require_backend

from otel_bridge.component import Telemetry
from otel_bridge.identity import linux_start_time_ms
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.events import Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.fanotify import FanotifyWatcher
from otel_bridge.receivers.host.linux import LinuxBackend
from otel_bridge.receivers.host.procfs import ProcessInfo
from otel_bridge.redaction import Redactor
from otel_bridge.testing import RecordingConsumer


def _file_events(ctx: HostContext, sink: RecordingConsumer, pid: int) -> list[tuple[str, object]]:
    """(event name, path) of the file records about ``pid`` emitted so far."""
    ctx.events.emitter.flush()
    return [
        (r.event_name, r.attributes.get("file.path"))
        for r in sink.logs
        if r.event_name.startswith("file.") and r.attributes.get("process.pid") == pid
    ]


def _touch(path: Path) -> None:
    """An open and a close-write of ``path`` by this process (queued when this returns)."""
    with open(path, "w") as f:
        f.write("x")


def _mine(watcher: FanotifyWatcher) -> int:
    return sum(1 for held in watcher._waiting if held[2] == os.getpid())


@needs_root
def test_a_foreign_pid_is_decided_at_the_read_without_holding(tmp_path: Path) -> None:
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = held_context(1, sink)  # the lineage is init's: this test process is another process
    watcher = FanotifyWatcher(ctx)  # not started: the test plays the reader thread
    asked: list[float] = []

    def read_past(after: float, timeout: float) -> bool:
        asked.append(after)
        return True  # the process source drained its queue in a pass begun after ``after``

    watcher.lineage_read = lambda: 0.0  # its last regular pass is long past
    watcher.sync_lineage = read_past
    try:
        before = time.monotonic()
        _touch(tmp_path / "out.txt")
        watcher._read(watcher._fd)
        assert asked
        assert asked[0] >= before  # a pass that begins after the read was asked for
        assert watcher._is_foreign(os.getpid())
        assert _mine(watcher) == 0  # nothing held for the next pass
        assert watcher.unattributed >= 1  # counted (the kernel may merge the open and close)
        _touch(tmp_path / "again.txt")
        watcher._read(watcher._fd)  # a known foreign pid: skipped unread
        assert _mine(watcher) == 0
    finally:
        watcher.stop()
    assert _file_events(ctx, sink, os.getpid()) == []


@needs_root
def test_a_child_whose_fork_the_asked_pass_reads_loses_nothing(tmp_path: Path) -> None:
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = held_context(1, sink)
    me = os.getpid()
    watcher = FanotifyWatcher(ctx)

    def fork_read(after: float, timeout: float) -> bool:
        # the pass reads this pid's fork: it joins the lineage with its identity
        ctx.events.remember(ProcessInfo(pid=me, start_ms=linux_start_time_ms(me) or 0))
        ctx.lineage.add(me)
        return True

    watcher.lineage_read = lambda: 0.0
    watcher.sync_lineage = fork_read
    path = tmp_path / "calc.py"
    try:
        _touch(path)
        watcher._read(watcher._fd)
        assert not watcher._is_foreign(me)
    finally:
        watcher.stop()
    mine = _file_events(ctx, sink, me)
    assert ("file.open", str(path)) in mine
    assert ("file.write", str(path)) in mine


@needs_root
def test_a_process_source_that_does_not_answer_leaves_the_events_held(tmp_path: Path) -> None:
    """No pass in time: the events are held as before (the rule of the late-reader tests), and
    the reader does not ask again for a while."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = held_context(1, sink)
    watcher = FanotifyWatcher(ctx)
    asked: list[float] = []

    def behind(after: float, timeout: float) -> bool:
        asked.append(after)
        return False

    watcher.lineage_read = lambda: 0.0
    watcher.sync_lineage = behind
    try:
        _touch(tmp_path / "a.txt")
        watcher._read(watcher._fd)
        asked_at = time.monotonic()
        assert len(asked) == 1
        assert _mine(watcher) >= 1  # held for the process source, whose pid is unknown
        assert not watcher._is_foreign(os.getpid())
        _touch(tmp_path / "b.txt")
        watcher._read(watcher._fd)
        if time.monotonic() - asked_at < 0.2:  # within the pause (a loaded machine may not be)
            assert len(asked) == 1  # not asked again after a pass that did not come
        assert _mine(watcher) >= 2
    finally:
        watcher.stop()


@needs_root
def test_the_process_source_answers_at_once_after_its_last_pass() -> None:
    """A stopping backend stops its process source first and its file reader after: the
    reader's final read, asking for a pass about a foreign pid, gets no at once (its events are
    then decided by the final recheck, as for any source behind), instead of waiting
    ``_SYNC_WAIT`` for a pass that no longer comes (20 ms at the end of many runs)."""
    require_backend("linux")
    telemetry = Telemetry()
    ctx = HostContext(
        config=HostConfig(files=False, network=False),
        lineage=Lineage(os.getpid()),
        events=EventFactory(
            "test", "run", Emitter(RecordingConsumer(), telemetry, batch_size=99, interval=60)
        ),
        telemetry=telemetry,
        redactor=Redactor(),
    )
    backend = LinuxBackend()
    backend.start(ctx)
    try:
        assert backend._thread is not None
        os.write(backend._stop_w, b"x")  # as stop() begins: the event thread's last pass
        backend._thread.join(30)
        asked = time.monotonic()
        assert backend._sync_lineage(asked, 30) is False
        assert time.monotonic() - asked < 10  # not the 30 s it may wait for a live source
    finally:
        backend.stop()
