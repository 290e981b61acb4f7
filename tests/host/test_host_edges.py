"""Edge cases: unavailable kernels say why, overruns degrade, pre-existing descendants, TTY."""

from __future__ import annotations

import os
import pty
import select
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from host_support import Gated, finish, needs_root, require_backend, start_receiver
from waiting import wait_until

from otel_bridge.component import Telemetry
from otel_bridge.errors import BackendUnavailableError
from otel_bridge.model import CollectionState
from otel_bridge.receivers.host import HostConfig, ebpf
from otel_bridge.receivers.host.events import Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.procfs import children_of, read_stat, tgid_of
from otel_bridge.redaction import Redactor
from otel_bridge.testing import RecordingConsumer


def test_ebpf_without_tracefs_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without syscall tracepoints the ebpf backend names tracefs and how to mount it."""
    if os.geteuid() != 0:
        pytest.skip("the root check comes first when not root")
    monkeypatch.setattr(ebpf, "TRACEFS", str(tmp_path / "no-tracefs"))
    with pytest.raises(BackendUnavailableError, match="tracefs not mounted") as info:
        ebpf.check_available("bpftrace" if shutil.which("bpftrace") else sys.executable)
    assert "mount -t tracefs" in str(info.value)


@needs_root
def test_linux_overrun_degrades_process_collection() -> None:
    """A netlink overrun (ENOBUFS) turns the process collection degraded and is counted."""
    from otel_bridge.receivers.host.linux import LinuxBackend

    require_backend("linux")
    sink = RecordingConsumer()
    telemetry = Telemetry()
    ctx = HostContext(
        config=HostConfig(),
        lineage=Lineage(os.getpid()),
        events=EventFactory("linux", "r", Emitter(sink, telemetry, batch_size=99, interval=60)),
        telemetry=telemetry,
        redactor=Redactor(),
    )
    backend = LinuxBackend()
    backend._ctx = ctx
    ctx.collection_state("process", CollectionState.AVAILABLE, "ok")
    backend._lost()
    backend._lost()
    assert backend.lost == 2
    assert ctx.states["process"][0] == "degraded"
    assert telemetry.counters()["receiver.host.linux.overruns"] == 2
    backend.stop()


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["linux", "strace", "ebpf"])
def test_descendants_running_before_start_are_followed(backend: str, tmp_path: Path) -> None:
    """Children that exist before observation starts are snapshotted and then followed."""
    require_backend(backend)
    ready = tmp_path / "ready"
    go = tmp_path / "go"
    script = (
        f"sh -c 'touch {ready}; while [ ! -e {go} ]; do sleep 0.02; done; "
        f"echo late > {tmp_path}/late.txt; exit 5' & wait $!"
    )
    proc = subprocess.Popen(["sh", "-c", script], cwd=tmp_path)
    try:
        wait_until(ready.exists, 10, "the pre-existing child to start")
        child = children_of(proc.pid)
        assert child, "pre-existing child missing"
        observed = start_receiver(HostConfig(backend=backend, startup_timeout=30), proc.pid)
        go.touch()
        assert proc.wait(timeout=20) == 5
        try:
            observed.wait_for("process.exit", child[0])
            observed.wait_for("process.exit", proc.pid)
        finally:
            finish(observed)
    finally:
        go.touch()
        proc.wait(timeout=20)
    assert observed.for_pid("process.start", child[0])
    assert observed.for_pid("process.start", child[0])[0]["evidence.attribution"] == (
        "sampled_process"
    )
    exits = observed.for_pid("process.exit", child[0])
    assert exits, [(r.event_name, dict(r.attributes).get("process.pid")) for r in observed.logs]
    assert exits[-1]["process.exit.code"] == 5
    opens = [a for a in observed.events("file.open") if a["file.path"].endswith("late.txt")]
    assert opens
    assert opens[0]["process.pid"] == child[0]


def test_procfs_helpers_on_this_process() -> None:
    """tgid_of, read_stat and children_of read this process's real /proc entries."""
    proc = subprocess.Popen(["sleep", "1"])
    try:
        assert tgid_of(os.getpid()) == os.getpid()
        stat = read_stat(proc.pid)
        assert stat is not None
        assert stat[0] == os.getpid()
        assert proc.pid in children_of(os.getpid())
        thread_ids = os.listdir(f"/proc/{os.getpid()}/task")
        assert all(tgid_of(int(t)) == os.getpid() for t in thread_ids)
    finally:
        proc.kill()
        proc.wait()
    assert tgid_of(4_000_000) is None
    assert read_stat(4_000_000) is None
    assert children_of(4_000_000) == []


@pytest.mark.slow
def test_observe_shows_live_progress_on_a_tty(tmp_path: Path) -> None:
    """On a terminal, observe redraws a progress line on stderr while CMD runs."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_bridge",
            "observe",
            "-o",
            str(tmp_path / "run"),
            "--",
            "sh",
            "-c",
            "sleep 1.2",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
        cwd=tmp_path,
    )
    os.close(slave)
    chunks: list[bytes] = []

    def pump() -> None:
        while True:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    return
                continue
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=pump)
    reader.start()
    assert proc.wait(timeout=60) == 0
    reader.join(timeout=5)
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert "otel-bridge: spans" in text
    assert "processes" in text
    assert "graph:" in text


def test_gated_workload_waits_for_release(tmp_path: Path) -> None:
    """The gate holds CMD until released (no blind window before observation starts)."""
    marker = tmp_path / "ran"
    work = Gated(f"touch {marker}", cwd=str(tmp_path))
    try:
        # Blocked at the gate means no part of the script has run: the shell runs it in order.
        wait_until(work.at_gate, 10, "the shell to block at the gate")
    except AssertionError:
        hidden = work.wait_channel() == "0"  # after 10 s the shell is blocked, not running
        work.kill()
        if hidden:
            pytest.skip("the kernel does not show wait channels (/proc/PID/wchan)")
        raise
    except BaseException:
        work.kill()
        raise
    assert not marker.exists()
    work.release()
    assert work.wait() == 0
    assert marker.exists()
