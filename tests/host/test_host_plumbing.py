"""Emitter batching, lineage, event factory, socket scans and fanotify on real resources."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from host_support import Gated, needs_root, require_backend
from hypothesis import given, settings

from otel_bridge.component import Telemetry
from otel_bridge.errors import DecodeError
from otel_bridge.identity import iso_ms, linux_start_time_ms
from otel_bridge.model import Batch
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.events import (
    SAMPLED,
    Emitter,
    EventFactory,
    HostContext,
    Lineage,
    lookup_process,
)
from otel_bridge.receivers.host.fanotify import FAN_CLOSE_WRITE, FAN_OPEN, FanotifyWatcher
from otel_bridge.receivers.host.netscan import SocketScanner, read_tables, socket_inodes
from otel_bridge.receivers.host.procfs import ProcessInfo
from otel_bridge.redaction import Redactor
from otel_bridge.testing import RecordingConsumer


def _ctx(root: int, sink: RecordingConsumer | None = None, **config: Any) -> HostContext:
    sink = sink or RecordingConsumer()
    telemetry = Telemetry()
    emitter = Emitter(sink, telemetry, batch_size=100_000, interval=60)
    return HostContext(
        config=HostConfig(**config),
        lineage=Lineage(root),
        events=EventFactory("test", "run", emitter),
        telemetry=telemetry,
        redactor=Redactor(),
    )


def _records(ctx: HostContext, sink: RecordingConsumer) -> list[tuple[str, dict[str, Any]]]:
    ctx.events.emitter.flush()
    return [(r.event_name, dict(r.attributes)) for r in sink.logs]


def test_emitter_flushes_on_interval() -> None:
    """Pending records leave within batch_interval even when the batch is not full."""
    sink = RecordingConsumer()
    emitter = Emitter(sink, Telemetry(), batch_size=1000, interval=0.02)
    factory = EventFactory("test", "r", emitter)
    emitter.start()
    try:
        emitter.emit(factory.record("file.open", 1, {"file.path": "/x"}, attribution=SAMPLED))
        assert sink.wait_for(1, timeout=2)
    finally:
        emitter.close()


class _CloseDuringClear(threading.Event):
    """The flusher's wake-up event, with the race forced: its first ``clear()`` (the flusher,
    its interval just elapsed) waits until ``close`` has run in another thread up to its join
    (it set the stop and this event), then clears, swallowing close's wake-up."""

    def __init__(self, close: Callable[[], None]) -> None:
        super().__init__()
        self._close = close
        self._sets = 0
        self._seen = threading.Condition()
        self.closer: threading.Thread | None = None

    def set(self) -> None:
        super().set()
        with self._seen:
            self._sets += 1
            self._seen.notify_all()

    def clear(self) -> None:
        if self.closer is None:
            sets = self._sets
            self.closer = threading.Thread(target=self._close, daemon=True)
            self.closer.start()
            with self._seen:  # close() sets the stop, then this event: both done
                assert self._seen.wait_for(lambda: self._sets > sets, timeout=30)
        super().clear()


def test_emitter_close_between_the_interval_and_its_clear_ends() -> None:
    """``close`` right after the flusher's interval elapsed, before it clears its wake-up, still
    stops the flusher (it once slept for good: ``observe`` of a short command hung in
    ``HostReceiver.shutdown``), and the records are sent."""
    sink = RecordingConsumer()
    emitter = Emitter(sink, Telemetry(), batch_size=1000, interval=0.001)
    gate = _CloseDuringClear(emitter.close)
    emitter._some = gate  # the one injection point: the event the flusher sleeps on
    factory = EventFactory("test", "r", emitter)
    emitter.start()
    emitter.emit(factory.record("file.open", 1, {"file.path": "/x"}, attribution=SAMPLED))
    assert sink.wait_for(1, timeout=30)  # the flusher's pass that raced with close
    assert gate.closer is not None
    gate.closer.join(timeout=10)  # a close that works returns within milliseconds
    stuck = gate.closer.is_alive()
    if stuck:
        emitter._some.set()  # let the stuck flusher go, so nothing is left behind
        gate.closer.join(timeout=30)
    assert not stuck, "Emitter.close() never returned: the flusher slept on a lost wake-up"
    emitter.emit(factory.record("file.open", 2, {"file.path": "/y"}, attribution=SAMPLED))
    emitter.flush()
    assert [r.attributes["file.path"] for r in sink.logs] == ["/x", "/y"]


def test_emitter_counts_refused_batches_and_keeps_running() -> None:
    """A consumer failure is counted and reported, never raised into the backend."""
    sink = RecordingConsumer(error=DecodeError("nope"))
    telemetry = Telemetry()
    emitter = Emitter(sink, telemetry, batch_size=2, interval=60)
    factory = EventFactory("test", "r", emitter)
    for i in range(4):
        emitter.emit(factory.record("file.open", i, {}, attribution=SAMPLED))
    emitter.close()
    assert telemetry.counters()["receiver.host.events_refused"] == 4
    sink.error = None
    emitter.emit(factory.record("file.open", 9, {}, attribution=SAMPLED))
    emitter.flush()
    assert len(sink.logs) == 1


def test_emitter_counts_events_by_name() -> None:
    """Emitted records are counted per event name (the progress line reads these)."""
    sink = RecordingConsumer()
    telemetry = Telemetry()
    emitter = Emitter(sink, telemetry, batch_size=100, interval=60)
    factory = EventFactory("test", "r", emitter)
    for name in ("process.start", "file.open", "file.open"):
        emitter.emit(factory.record(name, 1, {}, attribution=SAMPLED))
    emitter.close()
    counters = telemetry.counters()
    assert counters["receiver.host.events.file.open"] == 2
    assert counters["receiver.host.events.process.start"] == 1
    assert counters["receiver.host.events_emitted"] == 3


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=1, max_value=8), st.integers(min_value=1, max_value=60))
def test_record_ids_unique_across_threads(threads: int, per_thread: int) -> None:
    """Records built concurrently by several threads never share a record id."""
    emitter = Emitter(RecordingConsumer(), Telemetry(), batch_size=10_000, interval=60)
    factory = EventFactory("test", "r", emitter)
    ids: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        mine = [
            str(factory.record("x", 0, {}, attribution=None).attributes["evidence.record_id"])
            for _ in range(per_thread)
        ]
        with lock:
            ids.extend(mine)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(ids) == len(set(ids)) == threads * per_thread


def test_causal_flag_only_when_kernel_reported() -> None:
    """Syscall-attributed process records are causal; sampled ones leave causal unstated."""
    emitter = Emitter(RecordingConsumer(), Telemetry(), batch_size=10, interval=60)
    factory = EventFactory("test", "r", emitter)
    info = factory.remember(ProcessInfo(pid=10, start_ms=5, ppid=1, exe="/bin/x", argv=["x"]))
    sys_rec = factory.process_event("process.exec", info, 1, attribution="syscall")
    sam_rec = factory.process_event("process.start", info, 1, attribution=SAMPLED)
    assert sys_rec.attributes["evidence.causal"] is True
    assert "evidence.causal" not in sam_rec.attributes
    exit_rec = factory.exit_event(10, 2_000_000_000, None, attribution=SAMPLED)
    assert "process.exit.code" not in exit_rec.attributes
    assert exit_rec.attributes["process.creation.time"] == iso_ms(5)


def test_parent_creation_time_when_parent_known() -> None:
    """process.parent.creation.time is set from the parent's identity when it is known."""
    emitter = Emitter(RecordingConsumer(), Telemetry(), batch_size=10, interval=60)
    factory = EventFactory("test", "r", emitter)
    factory.remember(ProcessInfo(pid=1, start_ms=100))
    child = factory.remember(ProcessInfo(pid=2, start_ms=200, ppid=1, traceparent="00-x"))
    attrs = factory.process_attrs(child)
    assert attrs["process.parent.creation.time"] == iso_ms(100)
    assert attrs["process.env.traceparent"] == "00-x"
    orphan = factory.remember(ProcessInfo(pid=3, start_ms=300, ppid=99))
    assert "process.parent.creation.time" not in factory.process_attrs(orphan)


def test_lookup_of_vanished_process_is_approximate() -> None:
    """A pid that is already gone gets an approximate identity from the event timestamp."""
    ctx = _ctx(1)
    info = lookup_process(ctx, 4_000_000, event_monotonic_ns=time.monotonic_ns())
    assert info.approximate is True
    assert abs(info.start_ms - time.time() * 1000) < 1000
    assert ctx.events.identity_attrs(4_000_000)["process.creation.time.approximate"] is True
    live = lookup_process(ctx, os.getpid())
    assert live.approximate is False
    assert live.start_ms == linux_start_time_ms(os.getpid())


def test_lineage_tracks_and_forgets() -> None:
    """Lineage holds the root and added pids until they are discarded."""
    lineage = Lineage(10)
    lineage.add(11)
    assert 10 in lineage
    assert 11 in lineage
    lineage.discard(11)
    assert 11 not in lineage
    assert lineage.snapshot() == [10]
    assert Lineage(0).snapshot() == []


def test_socket_scanner_classifies_own_sockets() -> None:
    """A scan of this process finds its listener, its outgoing connect and a connected UDP."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    client_port = client.getsockname()[1]
    accepted, _ = server.accept()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.connect(("127.0.0.1", 9))
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink)
    try:
        assert set(socket_inodes(os.getpid())) >= {os.fstat(client.fileno()).st_ino}
        assert read_tables(os.getpid())
        scanner = SocketScanner(ctx, attribution=SAMPLED)
        scanner.scan()
        scanner.scan()  # a second scan reports nothing new
        records = _records(ctx, sink)
    finally:
        for s in (client, accepted, udp, server):
            s.close()
    listens = [a for n, a in records if n == "network.listen" and a["network.local.port"] == port]
    assert len(listens) == 1
    connects = [a for n, a in records if n == "network.connect"]
    tcp = [
        a for a in connects if a["network.transport"] == "tcp" and a["network.peer.port"] == port
    ]
    assert len(tcp) == 1  # the accepted side (local port == listener) is not a connect
    assert tcp[0]["network.local.port"] == client_port
    assert any(a["network.transport"] == "udp" and a["network.peer.port"] == 9 for a in connects)
    assert all(a["evidence.attribution"] == SAMPLED for _, a in records)


@needs_root
def test_fanotify_attributes_accesses_to_the_lineage(tmp_path: Path) -> None:
    """fanotify reports open/write/read of lineage files and ignores other processes' files."""
    require_backend("linux")
    target = tmp_path / "seen.txt"
    target.write_text("x")
    work = Gated(f"read line < {target}; echo data >> {target}", cwd=str(tmp_path))
    sink = RecordingConsumer()
    ctx = _ctx(work.pid, sink, fanotify_events=["open", "modify", "access", "close_write"])
    watcher = FanotifyWatcher(ctx)
    watcher.start()
    try:
        work.release()
        work.wait()
        (tmp_path / "mine.txt").write_text("not the lineage")
    finally:
        # stop() reads what the kernel already queued (this process's write to mine.txt
        # included) before it returns: nothing is left to arrive after the asserts below.
        watcher.stop()
        watcher.stop()
    records = _records(ctx, sink)
    by_name: dict[str, set[str]] = {}
    for name, attrs in records:
        if "file.path" in attrs:
            by_name.setdefault(name, set()).add(attrs["file.path"])
            assert attrs["evidence.attribution"] == "syscall"
    assert str(target) in by_name["file.open"]
    assert str(target) in by_name["file.read"]
    assert str(target) in by_name["file.write"]
    assert all(str(tmp_path / "mine.txt") not in paths for paths in by_name.values())
    (state,) = [a for n, a in records if n == "collection.state"]
    assert "no open flags" in state["collection.reason"]
    assert "not reported" not in state["collection.reason"]


def test_fanotify_without_directory_entry_group_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the directory-entry group cannot be set up, opens and writes are still reported and
    the collection state names the changes that are not."""
    require_backend("linux")
    from otel_bridge.receivers.host import fanotify

    real_open = fanotify.fanotify_open

    def refuse_report_modes(paths: list[str], mask: int, *, mount: bool, report: int = 0) -> int:
        if report:
            raise OSError(22, "Invalid argument")
        return real_open(paths, mask, mount=mount)

    monkeypatch.setattr(fanotify, "fanotify_open", refuse_report_modes)
    target = tmp_path / "w.txt"
    work = Gated(f"echo data > {target}", cwd=str(tmp_path))
    sink = RecordingConsumer()
    ctx = _ctx(work.pid, sink)
    watcher = FanotifyWatcher(ctx)
    watcher.start()
    try:
        work.release()
        work.wait()
    finally:
        watcher.stop()  # reads every event the kernel queued before it returns
    records = _records(ctx, sink)
    writes = {a["file.path"] for n, a in records if n == "file.write"}
    assert str(target) in writes
    assert not [n for n, _ in records if n in ("file.create", "file.delete", "file.rename")]
    (state,) = [a for n, a in records if n == "collection.state"]
    assert state["collection.state"] == "available"
    assert "create, delete, rename not reported: Invalid argument" in state["collection.reason"]


def test_fanotify_holds_events_of_unknown_pids_until_they_join() -> None:
    """An event of a pid not yet in the lineage is reported once the pid joins, with its
    identity; one whose pid never joins is dropped, counted, and its pid skipped afterwards."""
    require_backend("linux")
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink, fanotify_events=["open", "close_write"])
    watcher = FanotifyWatcher(ctx)  # not started: the test drives the holding directly
    child, stranger = os.getpid(), 2**22 + 7  # a real pid (identity known) and an unused one
    ctx.lineage.discard(child)
    try:
        watcher._wait(child, FAN_OPEN | FAN_CLOSE_WRITE, "/work/out.txt")
        watcher._wait(stranger, FAN_OPEN, "/etc/elsewhere")
        watcher._recheck(final=False)
        assert len(watcher._waiting) == 2  # nobody joined yet, the grace period runs
        ctx.events.remember(ProcessInfo(pid=child, start_ms=linux_start_time_ms(child) or 0))
        ctx.lineage.add(child)
        watcher._recheck(final=False)
        assert len(watcher._waiting) == 1
        watcher._recheck(final=True)
        assert watcher._waiting == []
        assert watcher.unattributed == 1
        assert watcher._is_foreign(stranger)
        assert not watcher._is_foreign(child)
    finally:
        watcher.stop()
    records = [(n, a) for n, a in _records(ctx, sink) if n.startswith("file.")]
    assert [(n, a["file.path"], a["process.pid"]) for n, a in records] == [
        ("file.open", "/work/out.txt", child),
        ("file.write", "/work/out.txt", child),
    ]
    assert all("process.creation.time" in a for _, a in records)


def test_batch_of_records_is_one_batch() -> None:
    """A flush hands the consumer exactly one Batch of log records."""
    sink = RecordingConsumer()
    emitter = Emitter(sink, Telemetry(), batch_size=100, interval=60)
    factory = EventFactory("t", "r", emitter)
    emitter.emit(factory.record("a", 1, {}, attribution=None))
    emitter.emit(factory.record("b", 2, {}, attribution=None))
    emitter.flush()
    emitter.flush()
    assert len(sink.batches) == 1
    assert isinstance(sink.batches[0], Batch)
    assert [r.event_name for r in sink.batches[0].logs] == ["a", "b"]


def test_collection_state_record_and_note() -> None:
    """collection_state emits a collection.state record and a telemetry note."""
    from otel_bridge.model import CollectionState

    sink = RecordingConsumer()
    ctx = _ctx(1, sink)
    ctx.collection_state("network", CollectionState.NOT_REQUESTED, "network: false")
    (rec,) = _records(ctx, sink)
    assert rec[0] == "collection.state"
    assert rec[1]["collection.state"] == "not_requested"
    assert "evidence.attribution" not in rec[1]
    assert ctx.telemetry.notes()["host.collection.network"] == "not_requested: network: false"


@pytest.mark.parametrize("files", [False, True])
def test_portable_file_states(files: bool, tmp_path: Path) -> None:
    """Portable reports files not_requested when off, not_sampled without watch paths."""
    from otel_bridge.receivers.host.portable import PortableBackend

    work = Gated("sleep 0.1", cwd=str(tmp_path))
    sink = RecordingConsumer()
    ctx = _ctx(work.pid, sink, files=files, network=False)
    backend = PortableBackend()
    backend.start(ctx)
    work.release()
    work.wait()
    backend.stop()
    backend.stop()
    assert ctx.states["file"][0] == ("not_sampled" if files else "not_requested")
    assert ctx.states["network"][0] == "not_requested"
