"""The fanotify file group in ``FAN_REPORT_DFID_NAME`` mode: no descriptor per event.

Each open/close/modify/access event carries the parent directory's file handle and the entry's
name at the time of the event; the watcher resolves the directory once per handle
(``open_by_handle_at``) and remembers it until a directory is renamed or deleted. Where the
kernel or a filesystem refuses that mode, the group falls back to a descriptor per event and
the file collection says so. Real fanotify groups on the real filesystem, real renames.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from host_support import needs_root, require_backend

from otel_bridge.arming import FAN_OPEN, FAN_REPORT_DFID_NAME, fanotify_open, open_fanotify_groups
from otel_bridge.component import Telemetry
from otel_bridge.model import LogRecord
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.events import Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.fanotify import FanotifyWatcher
from otel_bridge.redaction import Redactor
from otel_bridge.testing import RecordingConsumer


def _ctx(root: int, sink: RecordingConsumer, paths: list[str] | None = None) -> HostContext:
    telemetry = Telemetry()
    return HostContext(
        config=HostConfig(
            fanotify_events=["open", "close_write", "create", "delete", "rename"],
            fanotify_paths=paths or ["/"],
            file_merge_window=0,  # how events name files, not merging: a record per event read
        ),
        lineage=Lineage(root),
        events=EventFactory("test", "run", Emitter(sink, telemetry, batch_size=10**5, interval=60)),
        telemetry=telemetry,
        redactor=Redactor(),
    )


def _records(ctx: HostContext, sink: RecordingConsumer) -> list[LogRecord]:
    ctx.events.emitter.flush()
    return list(sink.logs)


def _paths(records: list[LogRecord], name: str) -> set[object]:
    return {r.attributes.get("file.path") for r in records if r.event_name == name}


def _note(records: list[LogRecord]) -> str:
    (state,) = [r for r in records if r.event_name == "collection.state"]
    return str(state.attributes["collection.reason"])


def _read_pass(watcher: FanotifyWatcher) -> None:
    """One read pass as the reader thread makes it: directory entries first, then files."""
    watcher.before_follow([])  # not started: reads both queues through, in the thread's order


@needs_root
def test_an_event_names_the_entry_as_it_was_when_the_event_happened(tmp_path: Path) -> None:
    """A file written then renamed before the event is read: the write is reported under the
    name it had (fd mode would name the file as it is at the read); the directory is resolved
    once for both files and no descriptor reaches this process."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink)
    watcher = FanotifyWatcher(ctx)
    try:
        (tmp_path / "a.txt").write_text("a")
        (tmp_path / "a.txt").rename(tmp_path / "b.txt")
        (tmp_path / "c.txt").write_text("c")
        before = set(os.listdir("/proc/self/fd"))
        _read_pass(watcher)
        assert set(os.listdir("/proc/self/fd")) <= before  # no descriptor came with the events
        records = _records(ctx, sink)
        writes = _paths(records, "file.write")
        assert {str(tmp_path / "a.txt"), str(tmp_path / "c.txt")} <= writes
        assert str(tmp_path / "b.txt") not in writes
        renames = [r.attributes for r in records if r.event_name == "file.rename"]
        assert {
            "file.path": str(tmp_path / "a.txt"),
            "file.new_path": str(tmp_path / "b.txt"),
        }.items() <= renames[0].items()
        assert "directory handle and name per event (no descriptor)" in _note(records)
        assert watcher.unnamed == 0
    finally:
        watcher.stop()


@needs_root
def test_a_renamed_directory_is_resolved_again(tmp_path: Path) -> None:
    """A directory remembered from an earlier event, then renamed: a later event in it names
    the new directory (the rename, read first in the pass, made the watcher forget it)."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink)
    watcher = FanotifyWatcher(ctx)
    try:
        old, new = tmp_path / "old", tmp_path / "new"
        old.mkdir()
        (old / "x.txt").write_text("x")
        _read_pass(watcher)  # old/ resolved and remembered
        old.rename(new)
        (new / "y.txt").write_text("y")
        _read_pass(watcher)
        writes = _paths(_records(ctx, sink), "file.write")
        assert str(old / "x.txt") in writes
        assert str(new / "y.txt") in writes
        assert str(old / "y.txt") not in writes
    finally:
        watcher.stop()


@needs_root
def test_an_unlinked_file_keeps_its_name(tmp_path: Path) -> None:
    """A file deleted while still open, then written and closed: the close names the entry it
    had (the directory still exists); a file in a directory deleted before the read cannot be
    named and is counted, not guessed."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink)
    watcher = FanotifyWatcher(ctx)
    try:
        with open(tmp_path / "temp.bin", "wb") as f:
            os.unlink(tmp_path / "temp.bin")
            f.write(b"x")
        gone = tmp_path / "gone"
        gone.mkdir()
        (gone / "z.txt").write_text("z")
        (gone / "z.txt").unlink()
        gone.rmdir()
        _read_pass(watcher)
        writes = _paths(_records(ctx, sink), "file.write")
        assert str(tmp_path / "temp.bin") in writes
        assert str(gone / "z.txt") not in writes
        assert watcher.unnamed >= 1
    finally:
        watcher.stop()


@needs_root
def test_a_foreign_pid_costs_its_header_only(tmp_path: Path) -> None:
    """Events of a pid decided foreign are dropped before their directory is resolved."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = _ctx(1, sink)  # init's lineage: this test process is another process
    watcher = FanotifyWatcher(ctx)
    watcher.lineage_read = lambda: 0.0
    watcher.sync_lineage = lambda after, timeout: True  # the process source read past the read
    try:
        sub = tmp_path / "sub"
        sub.mkdir()
        (sub / "f.txt").write_text("f")
        watcher._read(watcher._fd)
        assert watcher.unattributed >= 1
        assert os.getpid() in watcher._foreign
        assert watcher._dirs == {}  # nothing was resolved
        assert not _paths(_records(ctx, sink), "file.write")
    finally:
        watcher.stop()


@needs_root
def test_a_filesystem_without_handles_falls_back_to_descriptors(tmp_path: Path) -> None:
    """``devpts`` has no file handles: the kernel refuses the handle-and-name mode for a group
    marking it, so the file group reports a descriptor per event (and says why), and events
    elsewhere are still reported."""
    require_backend("linux")
    try:
        os.close(fanotify_open(["/dev/pts"], FAN_OPEN, mount=False, report=FAN_REPORT_DFID_NAME))
    except OSError:
        pass  # refused, as this test needs
    else:
        pytest.skip("this kernel's devpts has file handles: no filesystem here refuses the mode")
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink, paths=[str(tmp_path), "/dev/pts"])
    watcher = FanotifyWatcher(ctx)
    try:
        (tmp_path / "w.txt").write_text("w")
        _read_pass(watcher)
        records = _records(ctx, sink)
        assert str(tmp_path / "w.txt") in _paths(records, "file.write")
        note = _note(records)
        assert "a descriptor per event (FAN_REPORT_DFID_NAME refused: " in note
        assert "create, delete, rename not reported" in note
    finally:
        watcher.stop()


@needs_root
def test_armed_groups_replay_their_raw_reads(tmp_path: Path) -> None:
    """Groups armed in handle-and-name mode: what the pre-reader read before the watcher
    existed is replayed, named, with the time it was read."""
    require_backend("linux")
    events = ["open", "close_write", "create", "delete", "rename"]
    groups = open_fanotify_groups(events, ["/"], "filesystem")
    try:
        assert groups.reports_fid
        groups.start_reading()
        (tmp_path / "early.txt").write_text("e")
        sink = RecordingConsumer()
        ctx = _ctx(os.getpid(), sink)
        watcher = FanotifyWatcher(ctx, armed=groups)
        assert groups.fd == -1  # adopted
        watcher.start()
        watcher.stop()
        records = _records(ctx, sink)
        assert str(tmp_path / "early.txt") in _paths(records, "file.write")
        assert str(tmp_path / "early.txt") in _paths(records, "file.create")
        assert "directory handle and name per event" in _note(records)
    finally:
        groups.close()


@needs_root
def test_a_fifo_is_not_a_file_event(tmp_path: Path) -> None:
    """The kernel reports opens of FIFOs and device nodes only in handle-and-name mode (the
    classic mode never did; ``observe``'s own gate is a FIFO): they are skipped, as before."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink)
    watcher = FanotifyWatcher(ctx)
    try:
        fifo = tmp_path / "gate"
        os.mkfifo(fifo)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        with open(fifo, "w") as f:
            f.write("x\n")
        os.close(reader)
        (tmp_path / "plain.txt").write_text("p")
        _read_pass(watcher)
        records = _records(ctx, sink)
        opened = _paths(records, "file.open")
        assert str(tmp_path / "plain.txt") in opened
        assert str(fifo) not in opened
        assert str(fifo) not in _paths(records, "file.write")
    finally:
        watcher.stop()
