"""Paced fanotify reading keeps every distinct fact: (pid, file, kind) of a real workload.

The kernel merges a pid's identical events on one file while they wait unread (their masks
OR-ed), and the ``linux`` backend's reader pauses when its queue is busy so that it does
(``PACE_S``, ``PACE_EVENTS``). A merged event stands for one or more opens (or writable closes)
of that entry by that pid between two reads: fewer records, the same facts. These tests compare
the facts recorded with the facts each process of a real workload states it produced: every one
is recorded, none is invented, and different pids, files and kinds stay apart.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from host_support import (
    Gated,
    finish,
    held_context,
    needs_root,
    python,
    require_backend,
    start_receiver,
)

from otel_bridge.identity import linux_start_time_ms
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host import fanotify as fanotify_module
from otel_bridge.receivers.host.fanotify import FanotifyWatcher
from otel_bridge.receivers.host.linux import LinuxBackend
from otel_bridge.receivers.host.procfs import ProcessInfo
from otel_bridge.testing import RecordingConsumer

Fact = tuple[int, str, str]

WORK = r"""
import json, os, subprocess, sys
root, facts_dir, me = sys.argv[1], sys.argv[2], os.getpid()
facts = set()
def write(name, data=b"x"):
    path = os.path.join(root, name)
    with open(path, "wb") as f:
        f.write(data)
    facts.update({(me, path, "file.open"), (me, path, "file.write")})
def read(name):
    path = os.path.join(root, name)
    with open(path, "rb") as f:
        f.read()
    facts.add((me, path, "file.open"))
if sys.argv[3] == "parent":
    for i in range(16):
        write(f"f{i}.bin")
    for i in range(3000):  # a busy queue: the same 16 entries, over and over
        write(f"f{i % 16}.bin", str(i).encode() * 64)
        read(f"f{i % 16}.bin")
    for k in range(3):  # other pids on the same files: one reads, one writes, one does both
        subprocess.run([sys.executable, __file__, root, facts_dir, f"child{k}"], check=True)
    for i in range(8):  # opened read-only only: an open, never a write
        read(f"f{i}.bin")
    write("zz-last.bin")
else:
    k = int(sys.argv[3][-1])
    for i in range(400):
        if k != 1:
            read(f"f{i % 4}.bin")
        if k != 0:
            write(f"c{k}-{i % 4}.bin")
with open(os.path.join(facts_dir, f"{me}.json"), "w") as f:
    json.dump(sorted(facts), f)
"""


def _stated(facts_dir: Path) -> set[Fact]:
    """The facts every process of the workload says it produced."""
    out: set[Fact] = set()
    for path in facts_dir.iterdir():
        out.update(
            (int(pid), str(file), str(kind)) for pid, file, kind in json.loads(path.read_text())
        )
    return out


@needs_root
@pytest.mark.root
def test_paced_reads_record_every_distinct_fact_of_a_real_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_backend("linux")
    # every pass that read an event pauses: the paced path runs whatever the machine's load
    monkeypatch.setattr(fanotify_module, "PACE_EVENTS", 1)
    root, facts_dir = tmp_path / "root", tmp_path / "facts"
    root.mkdir()
    facts_dir.mkdir()
    (tmp_path / "work.py").write_text(WORK)
    argv = shlex.join([python(), str(tmp_path / "work.py"), str(root), str(facts_dir), "parent"])
    work = Gated(f"exec {argv}", cwd=str(tmp_path))
    try:
        observed = start_receiver(HostConfig(backend="linux", startup_timeout=30), work.pid)
    except BaseException:
        work.kill()
        raise
    work.release()
    assert work.wait(timeout=120) == 0
    stated = _stated(facts_dir)
    assert len({pid for pid, _, _ in stated}) == 4
    observed.wait_for("file.write", work.pid, path_end="zz-last.bin", timeout=30)
    observed.receiver.wait_idle()
    backend = observed.receiver.backends[0]
    assert isinstance(backend, LinuxBackend)
    watcher = backend._fanotify
    assert watcher is not None
    finish(observed)
    assert watcher.paced > 0
    records = [
        r
        for r in observed.logs
        if r.event_name in ("file.open", "file.write")
        and str(r.attributes.get("file.path", "")).startswith(f"{root}/")
    ]
    recorded = {
        (int(str(r.attributes["process.pid"])), str(r.attributes["file.path"]), r.event_name)
        for r in records
    }
    assert recorded == stated  # every distinct fact, and nothing the workload did not do
    # kinds stay apart per pid: the children that only read the parent's files wrote none
    children = {pid for pid, _, _ in stated} - {work.pid}
    assert not any(k == "file.write" and "/f" in f for p, f, k in recorded if p in children)


@needs_root
def test_events_merged_while_unread_give_one_record_per_fact(tmp_path: Path) -> None:
    """What a pause lets the kernel do, played without a reader thread: 200 opens and writable
    closes of four files wait unread, one read gives one open and one write record per file."""
    require_backend("linux")
    sink = RecordingConsumer()
    me = os.getpid()
    ctx = held_context(me, sink)
    ctx.events.remember(ProcessInfo(pid=me, start_ms=linux_start_time_ms(me) or 0))
    watcher = FanotifyWatcher(ctx)  # not started: nothing reads until the test does
    try:
        for i in range(200):
            with open(tmp_path / f"m{i % 4}.txt", "w") as f:
                f.write(str(i))
        with open(tmp_path / "r.txt", "w"):
            pass
        watcher._read(watcher._fd)
    finally:
        watcher.stop()
    ctx.events.emitter.flush()
    mine = [
        (r.event_name, r.attributes.get("file.path"))
        for r in sink.logs
        if r.attributes.get("process.pid") == me
        and str(r.attributes.get("file.path", "")).startswith(str(tmp_path))
    ]
    expected = {
        (kind, str(tmp_path / name))
        for name in ("m0.txt", "m1.txt", "m2.txt", "m3.txt", "r.txt")
        for kind in ("file.open", "file.write")
    }
    assert set(mine) == expected
    assert len(mine) < 200  # merged in the queue: not one record per open
