"""Merged file records (``docs/host.md`` "Merged file records", ``receivers/host/filemerge.py``).

A process's repeated file events of one kind on one file within ``file_merge_window`` are one
record: its time the first event's, ``evidence.merged_events`` and the last event's time beside
it. Distinct processes, files and kinds stay apart; a rename is never held; the observation's
end time and the graph edge's ``last_seen`` cover the last event.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from host_support import Gated, finish, needs_root, python, require_backend, start_receiver

from otel_bridge.arming import FAN_CLOSE_WRITE, FAN_OPEN
from otel_bridge.component import Telemetry
from otel_bridge.graph.accumulator import GraphAccumulator
from otel_bridge.identity import linux_start_time_ms
from otel_bridge.model import AnyValue, LogRecord
from otel_bridge.processors.normalize.oslogs import normalize_os_record
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.events import Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.fanotify import FanotifyWatcher
from otel_bridge.receivers.host.filemerge import LAST_TIME, MAX_HELD, MERGED_EVENTS, FileMerger
from otel_bridge.receivers.host.procfs import ProcessInfo
from otel_bridge.redaction import Redactor
from otel_bridge.testing import RecordingConsumer

S = 1_000_000_000


def _watcher(window: float) -> tuple[FanotifyWatcher, HostContext, RecordingConsumer]:
    sink, telemetry = RecordingConsumer(), Telemetry()
    ctx = HostContext(
        config=HostConfig(fanotify_events=["open", "close_write"], file_merge_window=window),
        lineage=Lineage(os.getpid()),
        events=EventFactory("test", "run", Emitter(sink, telemetry, batch_size=10**5, interval=60)),
        telemetry=telemetry,
        redactor=Redactor(),
    )
    me = os.getpid()
    ctx.events.remember(ProcessInfo(pid=me, start_ms=linux_start_time_ms(me) or 0))
    return FanotifyWatcher(ctx), ctx, sink


def _folded(telemetry: Telemetry) -> int:
    """The receiver's count of file events folded into an earlier record."""
    return telemetry.value("fanotify.merged_events", kind="receiver", id="host")


def _files(watcher: FanotifyWatcher, ctx: HostContext, sink: RecordingConsumer) -> list[LogRecord]:
    watcher.stop()  # its last pass emits every held record
    ctx.events.emitter.flush()
    return [r for r in sink.logs if r.event_name.startswith("file.")]


@needs_root
def test_repeated_events_of_one_process_file_and_kind_are_one_record() -> None:
    """Five opens and writes of one file at five read times: one open and one write record, each
    with its first time, the count and the last time; another file stays another record. The
    receiver counts the eight events folded."""
    require_backend("linux")
    watcher, ctx, sink = _watcher(window=30)
    me, t0 = os.getpid(), 1_700_000_000 * S
    for i in range(5):
        watcher._path_event(FAN_OPEN | FAN_CLOSE_WRITE, me, "/work/a.txt", t0 + i * S // 10)
    watcher._path_event(FAN_OPEN, me, "/work/b.txt", t0 + S)
    records = _files(watcher, ctx, sink)
    got = [
        (r.event_name, r.attributes["file.path"], r.time_unix_nano, r.attributes.get(MERGED_EVENTS))
        for r in records
    ]
    assert got == [
        ("file.open", "/work/a.txt", t0, 5),
        ("file.write", "/work/a.txt", t0, 5),
        ("file.open", "/work/b.txt", t0 + S, None),
    ]
    assert records[0].attributes[LAST_TIME] == records[1].attributes[LAST_TIME] == t0 + 4 * S // 10
    assert LAST_TIME not in records[2].attributes
    assert len({r.attributes["evidence.record_id"] for r in records}) == 3
    assert _folded(ctx.telemetry) == 8


@needs_root
def test_a_rename_is_not_held_and_a_new_process_on_the_pid_is_not_merged() -> None:
    """A rename is emitted when read, the held writes at the window's end, each with its own
    time; a pid whose start time changed (a reused pid) starts a new record instead of adding
    to the earlier process's."""
    require_backend("linux")
    watcher, ctx, sink = _watcher(window=30)
    me, t0 = os.getpid(), 1_700_000_000 * S
    watcher._path_event(FAN_CLOSE_WRITE, me, "/work/a.txt", t0)
    watcher._emit("file.rename", me, "/work/a.txt", t0 + 1, new_path="/work/b.txt")
    watcher._path_event(FAN_CLOSE_WRITE, me, "/work/b.txt", t0 + 2)
    ctx.events.emitter.flush()
    assert [r.event_name for r in sink.logs if r.event_name.startswith("file.")] == ["file.rename"]
    start = linux_start_time_ms(me) or 0
    ctx.events.remember(ProcessInfo(pid=me, start_ms=start + 5_000))  # the pid reused
    watcher._path_event(FAN_CLOSE_WRITE, me, "/work/b.txt", t0 + 3)
    records = sorted(_files(watcher, ctx, sink), key=lambda r: r.time_unix_nano)
    assert [(r.event_name, r.attributes["file.path"], r.time_unix_nano) for r in records] == [
        ("file.write", "/work/a.txt", t0),
        ("file.rename", "/work/a.txt", t0 + 1),
        ("file.write", "/work/b.txt", t0 + 2),
        ("file.write", "/work/b.txt", t0 + 3),
    ]
    first, second = records[2].attributes, records[3].attributes
    assert first["process.creation.time"] != second["process.creation.time"]
    assert MERGED_EVENTS not in first
    assert MERGED_EVENTS not in second
    assert _folded(ctx.telemetry) == 0


@needs_root
def test_window_zero_records_every_event() -> None:
    """``file_merge_window: 0``: one record per event read, none held."""
    require_backend("linux")
    watcher, ctx, sink = _watcher(window=0)
    me, t0 = os.getpid(), 1_700_000_000 * S
    for i in range(3):
        watcher._path_event(FAN_OPEN, me, "/work/a.txt", t0 + i)
    ctx.events.emitter.flush()
    records = [r for r in sink.logs if r.event_name == "file.open"]  # before any stop
    watcher.stop()
    assert [r.time_unix_nano for r in records] == [t0, t0 + 1, t0 + 2]
    assert not any(MERGED_EVENTS in r.attributes for r in records)
    assert _folded(ctx.telemetry) == 0


@needs_root
def test_the_observation_and_the_graph_edge_cover_the_last_event() -> None:
    """normalize gives a merged record's observation the last event's time as its end, and the
    graph edge's ``last_seen`` is that time (a check that read the file after the first write
    but before the last one is not said to have come after the last write)."""
    require_backend("linux")
    watcher, ctx, sink = _watcher(window=30)
    me, t0 = os.getpid(), 1_700_000_000 * S
    for i in range(3):
        watcher._path_event(FAN_CLOSE_WRITE, me, "/work/a.txt", t0 + i * S)
    (record,) = _files(watcher, ctx, sink)
    observations, coverage = normalize_os_record(record)
    assert not coverage
    (obs,) = observations
    assert (obs.time_unix_nano, obs.end_time_unix_nano) == (t0, t0 + 2 * S)
    assert obs.attrs[MERGED_EVENTS] == 3
    acc = GraphAccumulator()
    acc.apply_many(observations)
    (edge,) = [e for e in acc.to_dict()["edges"] if e["relation"] == "wrote"]
    assert (edge["first_seen"], edge["last_seen"]) == (t0, t0 + 2 * S)


def test_the_merger_emits_in_first_seen_order_and_bounds_what_it_holds() -> None:
    """Due records come out oldest first; the table never holds more than ``MAX_HELD``: a new
    key when it is full emits every held record first."""
    merger = FileMerger(window=0.5)
    ident: dict[str, AnyValue] = {
        "process.pid": 7,
        "process.creation.time": "2026-01-01T00:00:00.000Z",
    }
    merger.add("file.open", 7, "/a", 1, dict(ident))
    merger.add("file.open", 7, "/b", 2, dict(ident))
    assert merger.add("file.open", 7, "/a", 3, dict(ident)) == []  # folded
    assert merger.next_due() is not None
    due = merger.due(now=(merger.next_due() or 0) + 1)
    assert [(h.attrs["file.path"], h.count, h.first_ns, h.last_ns) for h in due] == [
        ("/a", 2, 1, 3),
        ("/b", 1, 2, 2),
    ]
    assert not merger
    for i in range(MAX_HELD):
        assert merger.add("file.open", 7, f"/f{i}", i, dict(ident)) == []
    flushed = merger.add("file.open", 7, "/one-more", 0, dict(ident))
    assert len(flushed) == MAX_HELD
    assert [h.attrs["file.path"] for h in merger.flush()] == ["/one-more"]


WORK = r"""
import json, os, subprocess, sys, time
root, out, role = sys.argv[1], sys.argv[2], sys.argv[3]
facts = []
def write(name, data):
    path = os.path.join(root, name)
    with open(path, "wb") as f:
        f.write(data)
    facts.append(path)
for burst in range(6):  # six bursts read apart: several reads of the same facts
    for i in range(50):
        write("a.txt" if role == "parent" else "c.txt", str(i).encode())
    time.sleep(0.03)
if role == "parent":
    os.rename(os.path.join(root, "a.txt"), os.path.join(root, "b.txt"))
    write("b.txt", b"after")
    subprocess.run([sys.executable, __file__, root, out + ".child", "child"], check=True)
with open(out, "w") as f:
    json.dump({"pid": os.getpid(), "writes": len(facts)}, f)
"""


@needs_root
@pytest.mark.root
def test_a_real_workload_gets_one_record_per_fact_and_window(tmp_path: Path) -> None:
    """A real parent and child writing their files 300 times each, in bursts the reader reads
    apart, with a rename between: one open and one write record per (process, file) within the
    window, the counts never above the writes, and the old name's write before the rename in
    time. The receiver's ``fanotify.merged_events`` is what its records say they fold."""
    require_backend("linux")
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "work.py").write_text(WORK)
    out = tmp_path / "parent.json"
    argv = shlex.join([python(), str(tmp_path / "work.py"), str(root), str(out), "parent"])
    work = Gated(f"exec {argv}", cwd=str(tmp_path))
    try:
        config = HostConfig(backend="linux", startup_timeout=30, file_merge_window=30)
        observed = start_receiver(config, work.pid)
    except BaseException:
        work.kill()
        raise
    work.release()
    assert work.wait(timeout=120) == 0
    parent = json.loads(out.read_text())
    child = json.loads((tmp_path / "parent.json.child").read_text())
    finish(observed)
    mine = [
        r
        for r in observed.logs
        if str(r.attributes.get("file.path", "")).startswith(f"{root}/")
        and r.event_name in ("file.open", "file.write", "file.rename")
    ]
    facts = [
        (r.attributes["process.pid"], Path(str(r.attributes["file.path"])).name, r.event_name)
        for r in mine
    ]
    a_write = (parent["pid"], "a.txt", "file.write")
    rename = (parent["pid"], "a.txt", "file.rename")
    assert sorted(facts) == sorted(
        [
            (parent["pid"], "a.txt", "file.open"),
            a_write,
            rename,
            (parent["pid"], "b.txt", "file.open"),
            (parent["pid"], "b.txt", "file.write"),
            (child["pid"], "c.txt", "file.open"),
            (child["pid"], "c.txt", "file.write"),
        ]
    )  # one record per fact: the 300 writes of each file are one write record
    times = {fact: r.time_unix_nano for fact, r in zip(facts, mine, strict=True)}
    assert times[a_write] < times[rename]
    for r in mine:
        count = int(str(r.attributes.get(MERGED_EVENTS, 1)))
        assert 1 <= count <= 300
        if count > 1:
            assert int(str(r.attributes[LAST_TIME])) >= r.time_unix_nano
    folded = sum(int(str(r.attributes.get(MERGED_EVENTS, 1))) - 1 for r in observed.logs)
    assert _folded(observed.host.telemetry) == folded
