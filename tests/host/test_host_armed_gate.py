"""An armed ``linux`` backend and the gate its root waited behind (``otel_bridge/arming.py``,
``otel_bridge/launch.py``; ``docs/host.md`` "Process images").

The kernel sends a process's exec event only after it let ``posix_spawn``'s caller go on, so a
gate's own exec (its ``sh``) can reach sources attached after the spawn returned (seen under load
as a warm run whose root had a second exec record, or CMD's argv on the gate's exec and none on
CMD's). Here that order is made certain: the connector is subscribed before the gate is spawned.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from host_support import needs_root, require_backend
from test_host_interpreters import Harness
from waiting import wait_until

from otel_bridge import arming
from otel_bridge.identity import start_ms_from_ticks
from otel_bridge.launch import GATE_NAME, exit_code, open_gate, spawn_gate
from otel_bridge.receivers.host.execreader import ExecReader, Image
from otel_bridge.receivers.host.linux import LinuxBackend

CMD = ["sh", "-c", 'echo "$0" > out.txt; read _ < go; exit 3', "written"]
"""The same executable as the gate (``sh``): only the exec event tells the two images apart. It
waits on the fifo ``go`` until its exec record is in: its image is read from ``/proc`` at the
exec event, and a root that exits within a millisecond can be gone first on a loaded machine."""


@needs_root
def test_the_gates_own_exec_reported_late_is_no_record(tmp_path: Path) -> None:
    """The root's exec event from before its gate opened is the gate's (``observe``'s
    machinery): not recorded, counted; CMD's exec names the root with CMD's argv, once; the
    root's start is the identity read while it was gated (no image sampled later)."""
    require_backend("linux")
    early = arming.open_proc_connector()  # subscribed before the gate's exec
    fifo = str(tmp_path / "gate")
    os.mkfifo(tmp_path / "go")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        pid = spawn_gate(CMD, dict(os.environ), fifo)
    finally:
        os.chdir(cwd)
    try:
        armed = arming.arm_linux(pid)
    except BaseException:
        early.close()
        os.kill(pid, 9)
        exit_code(pid)
        raise
    assert armed.proc_socket is not None
    armed.proc_socket.close()
    armed.proc_socket = early  # holds the gate's exec event, as a late delivery would
    armed.gate_opened_ns = open_gate(fifo, "http://127.0.0.1:9", "http/protobuf")
    os.unlink(fifo)
    h = Harness(root=pid)
    backend = LinuxBackend()
    backend.adopt(armed)
    backend.start(h.ctx)
    try:
        wait_until(lambda: _execs(h, pid), 30, "CMD's exec record")
    except BaseException:
        backend.stop()
        os.kill(pid, 9)
        exit_code(pid)
        raise
    with open(tmp_path / "go", "w") as go:  # CMD goes on to its exit
        go.write("\n")
    code = exit_code(pid)
    backend.stop()
    assert code == 3
    (cmd,) = _execs(h, pid)  # one exec: CMD's
    assert list(cmd["process.command_args"]) == CMD
    assert cmd["process.working_directory"] == str(tmp_path)
    records = h.records()
    assert not any(GATE_NAME in str(attrs) for _, attrs in records), records
    (start,) = [a for n, a in records if n == "process.start" and a["process.pid"] == pid]
    assert "process.executable.path" not in start  # identity only: the image is CMD's exec's
    assert start["process.parent_pid"] == os.getpid()
    assert armed.root_start_ticks is not None
    assert h.ctx.events.processes[pid].start_ms == start_ms_from_ticks(armed.root_start_ticks)
    assert h.telemetry.counters()["receiver.host.linux.gate_exec"] == 1


def _execs(h: Harness, pid: int) -> list[dict[str, Any]]:
    return [a for a in h.named("process.exec") if a["process.pid"] == pid]


def _line(pid: int, ticks: int, argv: list[str], event_ns: int) -> str:
    """One exec image line as the helper writes it (hex fields)."""
    fields = [b"/usr/bin/dash", b"\0".join(a.encode() for a in argv) + b"\0", b"/w", b""]
    return " ".join([str(pid), str(ticks), *(f.hex() for f in fields), str(event_ns)])


def test_one_execs_image_is_never_lent_to_another_exec_of_the_same_process() -> None:
    """A process that exec'd twice (a gate, then CMD; ``sh -c 'exec sh ...'``) has one
    identity and two exec events: each event gets the image the helper read at it, or none;
    never the other's. (A ``cat`` stands in for the helper: it writes back the lines given.)"""
    echo = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    reader = ExecReader([], process=echo)
    try:
        pid, ticks, first, second = 4_000_001, 500, 1_000, 2_000
        reader.follow_words([_line(pid, ticks, ["sh", "gate"], first)])
        reader.follow_words([_line(pid, ticks, ["sh", "cmd"], second)])
        reader.follow_words(["S"])  # the helper's answer: every line before it is read
        assert reader.drained(1, 30)
        start_ms = start_ms_from_ticks(ticks)
        taken = reader.take_event(pid, first)
        assert taken is not None
        assert taken[1].argv == ["sh", "gate"]  # though the later exec holds the identity's slot
        cmd: Image | None = reader.take_exec(pid, start_ms, second)
        assert cmd is not None
        assert cmd.argv == ["sh", "cmd"]
        reader.follow_words([_line(pid, ticks, ["sh", "again"], 3_000)])
        reader.follow_words(["S"])
        assert reader.drained(2, 30)
        assert reader.take_exec(pid, start_ms, first) is None  # not the image of 3_000
        again = reader.take_exec(pid, start_ms, 3_000)
        assert again is not None
        assert again.argv == ["sh", "again"]
    finally:
        reader.close()
