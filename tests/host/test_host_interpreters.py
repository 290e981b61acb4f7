"""Syscall interpreters (strace, bpftrace lines) turn calls into the right OS-event records."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from typing import Any

import pytest

from otel_bridge.component import Telemetry
from otel_bridge.identity import iso_ms, linux_start_time_ms
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.ebpf_lines import BpftraceInterpreter
from otel_bridge.receivers.host.events import Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.procfs import ProcessInfo
from otel_bridge.receivers.host.strace import StraceBackend
from otel_bridge.receivers.host.strace_events import SyscallInterpreter
from otel_bridge.receivers.host.strace_parse import StraceParser
from otel_bridge.redaction import Redactor
from otel_bridge.testing import RecordingConsumer

GONE = 4_000_000  # above pid_max: never a live process
T0 = 1_700_000_000_000_000_000


class Harness:
    """A HostContext over a recording consumer, flushed on demand."""

    def __init__(self, root: int = GONE, **config: Any) -> None:
        self.sink = RecordingConsumer()
        self.telemetry = Telemetry()
        self.emitter = Emitter(self.sink, self.telemetry, batch_size=100_000, interval=60)
        self.ctx = HostContext(
            config=HostConfig(**config),
            lineage=Lineage(root),
            events=EventFactory("test", "run-1", self.emitter),
            telemetry=self.telemetry,
            redactor=Redactor(),
        )
        self.ctx.events.remember(ProcessInfo(pid=root, start_ms=1000, cwd="/work"))

    def records(self) -> list[tuple[str, dict[str, Any]]]:
        """Every record emitted so far, as (event name, attributes)."""
        self.emitter.flush()
        return [(r.event_name, dict(r.attributes)) for r in self.sink.logs]

    def named(self, name: str) -> list[dict[str, Any]]:
        """Attributes of the records named ``name``."""
        return [a for n, a in self.records() if n == name]


def _strace(h: Harness, *lines: str) -> SyscallInterpreter:
    interp = SyscallInterpreter(h.ctx)
    parser = StraceParser()
    for line in lines:
        call = parser.feed(line)
        if call is not None:
            interp.handle(call)
    return interp


def test_strace_successful_open_with_flags_and_access() -> None:
    """A successful openat becomes file.open with flags, access and the -yy resolved path."""
    h = Harness()
    _strace(
        h, f'{GONE} 1.0 openat(AT_FDCWD</work>, "a.txt", O_RDWR|O_CREAT, 0644) = 3</work/a.txt>'
    )
    (rec,) = h.named("file.open")
    assert rec["file.path"] == "/work/a.txt"
    assert rec["file.open.flags"] == "O_RDWR|O_CREAT"
    assert rec["file.access"] == "read_write"
    assert rec["evidence.attribution"] == "syscall"
    assert rec["evidence.causal"] is True
    assert rec["process.creation.time"] == iso_ms(1000)


def test_strace_failed_opens_are_counted_not_emitted() -> None:
    """Failed opens produce no record and are counted."""
    h = Harness()
    interp = _strace(
        h,
        f'{GONE} 1.0 openat(AT_FDCWD</work>, "nope", O_RDONLY) = -1 ENOENT (No such file)',
        f'{GONE} 1.1 open("/etc/x", O_RDONLY) = -1 EACCES (Permission denied)',
    )
    assert h.named("file.open") == []
    assert interp.failed_opens == 2
    assert h.telemetry.counters()["receiver.host.strace.failed_opens"] == 2


def test_strace_creat_open_relative_path_uses_cwd() -> None:
    """creat implies write flags; a relative open path without annotation resolves via cwd."""
    h = Harness()
    _strace(h, f'{GONE} 1.0 creat("out.log", 0644) = 4', f'{GONE} 1.1 open("sub/in", O_RDONLY) = 5')
    recs = h.named("file.open")
    assert recs[0]["file.path"] == "/work/out.log"
    assert recs[0]["file.open.flags"] == "O_WRONLY|O_CREAT|O_TRUNC"
    assert recs[0]["file.access"] == "write"
    assert recs[1]["file.path"] == "/work/sub/in"
    assert recs[1]["file.access"] == "read"


def test_strace_unlink_and_rename() -> None:
    """unlinkat becomes file.delete, renameat2 becomes file.rename with both paths."""
    h = Harness()
    _strace(
        h,
        f'{GONE} 1.0 unlinkat(AT_FDCWD</work>, "old.tmp", 0) = 0',
        f'{GONE} 1.1 renameat2(AT_FDCWD</work>, "a", AT_FDCWD</work>, "b", RENAME_NOREPLACE) = 0',
        f'{GONE} 1.2 rename("/x/c", "/x/d") = 0',
        f'{GONE} 1.3 unlink("/missing") = -1 ENOENT (No such file or directory)',
    )
    assert [a["file.path"] for a in h.named("file.delete")] == ["/work/old.tmp"]
    renames = h.named("file.rename")
    assert (renames[0]["file.path"], renames[0]["file.new_path"]) == ("/work/a", "/work/b")
    assert (renames[1]["file.path"], renames[1]["file.new_path"]) == ("/x/c", "/x/d")


@pytest.mark.parametrize(
    ("ret", "event", "result"),
    [
        ("0", "network.connect", None),
        ("-1 EINPROGRESS (Operation now in progress)", "network.connect_attempt", "pending"),
        ("-1 ECONNREFUSED (Connection refused)", "network.connect_attempt", "failed"),
    ],
)
def test_strace_connect_outcomes(ret: str, event: str, result: str | None) -> None:
    """connect successes, pending (EINPROGRESS) and failures are told apart."""
    h = Harness()
    _strace(
        h,
        f"{GONE} 1.0 connect(3<TCP:[77]>, {{sa_family=AF_INET, sin_port=htons(8080), "
        f'sin_addr=inet_addr("127.0.0.1")}}, 16) = {ret}',
    )
    (rec,) = h.named(event)
    assert (rec["network.peer.address"], rec["network.peer.port"]) == ("127.0.0.1", 8080)
    assert rec["network.transport"] == "tcp"
    if result is None:
        assert "network.connect.result" not in rec
    else:
        assert rec["network.connect.result"] == result
        assert rec["error.type"] == ret.split()[1]


def test_strace_udp_unix_connect_and_listen() -> None:
    """UDP and unix connects get their transport; listen reads its address from -yy."""
    h = Harness()
    _strace(
        h,
        f"{GONE} 1.0 connect(4<UDP:[9]>, {{sa_family=AF_INET, sin_port=htons(53), "
        f'sin_addr=inet_addr("127.0.0.53")}}, 16) = 0',
        f'{GONE} 1.1 connect(5<UNIX:[10]>, {{sa_family=AF_UNIX, sun_path="/run/a.sock"}}, 110) = 0',
        f"{GONE} 1.2 listen(6<TCP:[127.0.0.1:8000]>, 128) = 0",
        f"{GONE} 1.3 connect(7<NETLINK:[11]>, {{sa_family=AF_NETLINK}}, 12) = 0",
    )
    connects = h.named("network.connect")
    assert [c["network.transport"] for c in connects] == ["udp", "unix"]
    assert connects[1]["network.peer.address"] == "/run/a.sock"
    (listen,) = h.named("network.listen")
    assert (listen["network.local.address"], listen["network.local.port"]) == ("127.0.0.1", 8000)


def test_strace_process_lifecycle() -> None:
    """clone/execve/exit become start (with parent), exec (redacted argv) and exit records."""
    child = GONE + 1
    h = Harness()
    _strace(
        h,
        f"{GONE} 1.0 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD) = {child}",
        f'{child} 1.1 execve("/usr/bin/mysql", ["mysql", "--password", "pw"], 0x1) = 0',
        f"{child} 1.2 +++ exited with 4 +++",
        f"{GONE} 1.3 clone(child_stack=0x1, flags=CLONE_VM|CLONE_THREAD) = {child + 1}",
        f"{GONE} 1.4 +++ killed by SIGTERM +++",
    )
    starts = h.named("process.start")
    assert [s["process.pid"] for s in starts] == [child]
    assert starts[0]["process.parent_pid"] == GONE
    assert starts[0]["process.creation.time.approximate"] is True
    (exec_,) = h.named("process.exec")
    assert exec_["process.executable.path"] == "/usr/bin/mysql"
    assert exec_["process.command_args"] == ("mysql", "--password", "[REDACTED]")
    exits = {e["process.pid"]: e["process.exit.code"] for e in h.named("process.exit")}
    assert exits == {child: 4, GONE: -15}


def test_strace_files_off_drops_file_events() -> None:
    """With files: false no file records are produced, network still is."""
    h = Harness(files=False)
    _strace(
        h,
        f'{GONE} 1.0 openat(AT_FDCWD</w>, "a", O_RDONLY) = 3</w/a>',
        f"{GONE} 1.1 connect(3<TCP:[1]>, {{sa_family=AF_INET, sin_port=htons(1), "
        'sin_addr=inet_addr("127.0.0.1")}, 16) = 0',
    )
    names = [n for n, _ in h.records()]
    assert names == ["network.connect"]


def test_strace_identity_of_live_process_is_exact() -> None:
    """A live process first seen in strace output gets its exact /proc identity."""
    proc = subprocess.Popen(["sleep", "2"])
    try:
        h = Harness()
        interp = _strace(
            h, f'{proc.pid} 1.0 openat(AT_FDCWD</>, "/etc/hostname", O_RDONLY) = 3</etc/hostname>'
        )
        interp.gate.flush()  # a new pid's start waits for its own image (receivers/host/starts)
        (start,) = h.named("process.start")
        expected = linux_start_time_ms(proc.pid)
        assert expected is not None
        assert start["process.creation.time"] == iso_ms(expected)
        assert "process.creation.time.approximate" not in start
    finally:
        proc.kill()
        proc.wait()


def _raw(data: bytes) -> str:
    return "".join(f"\\x{b:02x}" for b in data)


def test_bpftrace_fork_exec_exit_lines() -> None:
    """F/e/E/X lines become start (parent), exec (path when gone) and exit (wait status)."""
    child = GONE + 2
    h = Harness()
    lines = BpftraceInterpreter(h.ctx)
    lines.handle_line(f"F {GONE} {child} 1000000")
    lines.handle_line(f"e {child} 1000100 /usr/bin/env")
    lines.handle_line(f"E {child} 1000200 0")
    lines.handle_line(f"e {child} 1000300 /no/such")
    lines.handle_line(f"E {child} 1000400 -2")
    lines.handle_line(f"X {child} 1000500 {2 << 8}")
    (start,) = h.named("process.start")
    assert start["process.parent_pid"] == GONE
    assert start["process.creation.time.approximate"] is True
    (exec_,) = h.named("process.exec")
    assert exec_["process.executable.path"] == "/usr/bin/env"
    (exit_,) = h.named("process.exit")
    assert exit_["process.exit.code"] == 2
    assert exit_["process.creation.time"] == start["process.creation.time"]


def test_bpftrace_open_and_connect_lines() -> None:
    """O lines become file.open with symbolic flags; C lines connect or connect_attempt."""
    h = Harness()
    lines = BpftraceInterpreter(h.ctx)
    lines.handle_line(f"O {GONE} 5 3 {0o1101} rel/out.txt")
    lines.handle_line(f"O {GONE} 6 -2 0 /missing")
    v4 = struct.pack("<H", 2) + struct.pack(">H", 8443) + bytes([127, 0, 0, 1]) + bytes(20)
    lines.handle_line(f"C {GONE} 7 0 {_raw(v4)}")
    lines.handle_line(f"C {GONE} 8 -115 {_raw(v4)}")
    lines.handle_line(f"C {GONE} 9 -111 {_raw(v4)}")
    (open_,) = h.named("file.open")
    assert open_["file.path"] == "/work/rel/out.txt"
    assert open_["file.open.flags"] == "O_WRONLY|O_CREAT|O_TRUNC"
    assert h.telemetry.counters()["receiver.host.ebpf.failed_opens"] == 1
    (connect,) = h.named("network.connect")
    assert (connect["network.peer.address"], connect["network.peer.port"]) == ("127.0.0.1", 8443)
    attempts = h.named("network.connect_attempt")
    assert [(a["network.connect.result"], a["error.type"]) for a in attempts] == [
        ("pending", "EINPROGRESS"),
        ("failed", "ECONNREFUSED"),
    ]


def test_bpftrace_lost_events_degrade_collections() -> None:
    """A 'Lost N events' line turns available collections into degraded ones."""
    h = Harness()
    from otel_bridge.model import CollectionState

    h.ctx.collection_state("process", CollectionState.AVAILABLE, "ok")
    lines = BpftraceInterpreter(h.ctx)
    lines.handle_line("Lost 12 events")
    assert lines.lost == 1
    assert h.ctx.states["process"][0] == "degraded"
    assert h.telemetry.notes()["host.collection.process"].startswith("degraded: perf buffer")


def test_records_carry_resource_and_unique_ids() -> None:
    """Every record has the os resource tags, a run id and a unique record id."""
    h = Harness()
    _strace(h, *(f'{GONE} 1.{i} open("/f{i}", O_RDONLY) = 3' for i in range(50)))
    h.emitter.flush()
    logs = h.sink.logs
    ids = {r.attributes["evidence.record_id"] for r in logs}
    assert len(ids) == len(logs) == 50
    resource = logs[0].resource.attributes
    assert resource["evidence.backend"] == "test"
    assert resource["otel_bridge.run.id"] == "run-1"
    assert [r.time_unix_nano for r in logs[:2]] == [1_000_000_000, 1_100_000_000]


def test_strace_openat2_and_execveat() -> None:
    """openat2 reads its flags from the open_how struct; execveat names the executable."""
    h = Harness()
    _strace(
        h,
        f'{GONE} 1.0 openat2(AT_FDCWD</w>, "x", {{flags=O_WRONLY|O_CREAT, mode=0600}}, 24)'
        " = 3</w/x>",
        f'{GONE} 1.1 execveat(3</usr/bin>, "env", ["env", "-i"], 0x1, 0) = 0',
    )
    (open_,) = h.named("file.open")
    assert open_["file.open.flags"] == "O_WRONLY|O_CREAT"
    assert open_["file.access"] == "write"
    (exec_,) = h.named("process.exec")
    assert exec_["process.executable.path"] == "env"
    assert exec_["process.command_args"] == ("env", "-i")


def test_strace_resumed_without_pending_half_is_still_parsed() -> None:
    """A resumed line whose first half was never seen (attach mid-call) still parses."""
    call = StraceParser().feed(f"{GONE} 1.0 <... wait4 resumed>, NULL) = 5")
    assert call is not None
    assert (call.name, call.ret) == ("wait4", 5)


TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_strace_exec_traceparent_comes_from_the_traced_envp_of_an_exited_process() -> None:
    """A short-lived command has exited before its exec line is parsed (its /proc/PID/environ
    is gone); the TRACEPARENT it was given is still read from the execve's envp in the trace.
    The regression: under load, ``cp`` of a tool call lost its exact traceparent link."""
    h = Harness()
    _strace(
        h,
        f'{GONE} 1.1 execve("/usr/bin/cp", ["cp", "a", "b"], ["HOME=/root", "TRACEPARENT={TP}"])'
        " = 0",
    )
    (exec_,) = h.named("process.exec")
    assert exec_["process.env.traceparent"] == TP
    assert "process.environment" not in exec_  # not captured unless asked


def test_strace_execveat_envp_and_captured_environment_is_redacted() -> None:
    """execveat's envp is its fourth argument; a captured environment is redacted."""
    h = Harness(capture_environment=True)
    _strace(
        h,
        f'{GONE} 1.1 execveat(3</usr/bin>, "env", ["env"], ["API_TOKEN=s3cret", "TRACEPARENT={TP}"]'
        ", 0) = 0",
    )
    (exec_,) = h.named("process.exec")
    assert exec_["process.env.traceparent"] == TP
    assert "s3cret" not in str(exec_)
    info = h.ctx.events.processes[GONE]
    assert info.env is not None
    assert info.env["API_TOKEN"] == "[REDACTED]"


@pytest.mark.parametrize(
    "envp",
    [
        "0x7ffd1234 /* 25 vars */",  # not printed: nothing observed
        f'["TRACEPARENT={TP[:20]}"...]',  # the value cut at -s
        '["HOME=/root", ...]',  # the array cut: TRACEPARENT may be further on
    ],
)
def test_strace_exec_without_a_complete_envp_does_not_invent_a_traceparent(envp: str) -> None:
    """A cut or absent envp of an exited process gives no traceparent (unknown, not a guess)."""
    h = Harness()
    _strace(h, f'{GONE} 1.1 execve("/usr/bin/cp", ["cp"], {envp}) = 0')
    (exec_,) = h.named("process.exec")
    assert "process.env.traceparent" not in exec_


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_real_strace_gives_each_exec_the_traceparent_it_was_passed() -> None:
    """A real tracer: ``env`` is exec'd with one TRACEPARENT and execs ``true`` with another in
    the same pid, which exits at once. Each exec record carries the one its own envp passed
    (reading /proc at parse time would give the later image's, or nothing once it exited)."""
    outer, inner = TP, TP.replace("b7ad", "c8be")
    env = {**os.environ, "TRACEPARENT": outer}
    script = "import subprocess, sys; sys.stdin.readline(); subprocess.run(sys.argv[1:])"
    argv = [sys.executable, "-c", script, "env", "-i", f"TRACEPARENT={inner}", "true"]
    root = subprocess.Popen(argv, stdin=subprocess.PIPE, env=env)
    assert root.stdin is not None
    try:
        h = Harness(root=root.pid)
        backend = StraceBackend()
        backend.start(h.ctx)  # returns once strace is attached
        root.stdin.write(b"go\n")
        root.stdin.close()
        assert root.wait(timeout=60) == 0
        backend.stop()
    finally:
        root.kill()
        root.wait()
    execs = {e["process.command_args"][0]: e for e in h.named("process.exec")}
    assert execs["env"]["process.env.traceparent"] == outer
    assert execs["true"]["process.env.traceparent"] == inner
