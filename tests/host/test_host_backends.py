"""Each backend that runs here observes a real lineage: processes, a file, a loopback connect."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import psutil
import pytest
from host_support import (
    Gated,
    Observed,
    child_code,
    finish,
    loopback_server,
    needs_root,
    python,
    require_backend,
    start_receiver,
)

from otel_bridge.identity import host_id, iso_ms, linux_start_time_ms
from otel_bridge.receivers.host import HostConfig

BACKENDS = ["linux", "strace", "ebpf", "portable"]


def _config(backend: str, tmp_path: Path) -> HostConfig:
    return HostConfig(
        backend=backend,
        poll_interval=0.005,
        watch_paths=[str(tmp_path)] if backend == "portable" else [],
        startup_timeout=30,
    )


def _observe(
    backend: str, tmp_path: Path, script: str, *, written: str = ""
) -> tuple[Observed, Gated, int]:
    """Run ``script`` under ``backend`` until the receiver has reported the script's exit (and,
    when ``written`` is given, a change of a file of that name: a file watcher reports apart
    from the process events)."""
    work = Gated(script, cwd=str(tmp_path))
    try:
        observed = start_receiver(_config(backend, tmp_path), work.pid)
    except BaseException:
        work.kill()
        raise
    work.release()
    code = work.wait()
    try:
        observed.wait_for("process.exit", work.pid)
        if written:
            observed.wait_for("file.change", path_end=written)
    finally:
        finish(observed)
    return observed, work, code


def _lineage_script(port: int) -> str:
    return (
        "echo hi > f.txt; "
        f"{shlex.quote(python())} -c {shlex.quote(child_code(port))} --password hunter2; "
        "exit 3"
    )


def _child_starts(observed: Observed) -> list[dict[str, Any]]:
    """start/exec records of the python child (identified by its executable)."""
    return [
        a
        for name in ("process.start", "process.exec")
        for a in observed.events(name)
        if str(a.get("process.executable.path", "")).startswith(os.path.dirname(python()))
        and "python" in str(a.get("process.executable.name", ""))
    ]


@needs_root
@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_backend_observes_real_lineage(backend: str, tmp_path: Path) -> None:
    """The backend reports the root, the python child (redacted argv), its connect and the file."""
    require_backend(backend)
    with loopback_server() as server:
        observed, work, code = _observe(
            backend,
            tmp_path,
            _lineage_script(server.port),
            written="f.txt" if backend == "portable" else "",
        )
    assert code == 3
    resource = observed.logs[0].resource.attributes
    assert resource["evidence.channel"] == "os"
    assert resource["evidence.backend"] == backend
    assert resource["host.id"] == host_id()
    assert resource["service.name"] == "otel-bridge-host"
    ids = [r.attributes["evidence.record_id"] for r in observed.logs]
    assert len(ids) == len(set(ids))
    # the root
    root_starts = observed.for_pid("process.start", work.pid)
    assert root_starts, "root process.start missing"
    # the child, with its arguments redacted
    child = _child_starts(observed)
    assert child, f"{backend}: python child not observed"
    args = child[-1]["process.command_args"]
    assert "hunter2" not in args
    assert "[REDACTED]" in args
    assert child[-1]["process.parent_pid"] == work.pid
    # the connect to the harness server
    connects = [
        a for a in observed.events("network.connect") if a["network.peer.port"] == server.port
    ]
    assert connects, f"{backend}: connect to the loopback server not observed"
    assert connects[0]["process.pid"] == child[-1]["process.pid"]
    # the file
    if backend == "portable":
        changes = [a for a in observed.events("file.change") if a["file.path"].endswith("f.txt")]
        assert changes
        assert all(a["evidence.causal"] is False for a in changes)
        assert all(a["evidence.attribution"] == "session_observation" for a in changes)
        assert all("process.pid" not in a for a in changes)
    else:
        opens = [
            a for a in observed.events("file.open") if a["file.path"] == str(tmp_path / "f.txt")
        ]
        assert opens
        assert opens[0]["process.pid"] == work.pid
        assert opens[0]["evidence.attribution"] == "syscall"
        assert opens[0]["evidence.causal"] is True
    # exit of the root
    exits = observed.for_pid("process.exit", work.pid)
    assert exits
    if backend != "portable":
        assert exits[-1]["process.exit.code"] == 3
    # collection states reported as records and telemetry notes
    states = {
        a["collection.name"]: a["collection.state"] for a in observed.events("collection.state")
    }
    assert set(states) == {"process", "file", "network"}
    assert observed.host.telemetry.notes()["host.backend"].startswith(backend)


@needs_root
@pytest.mark.slow
def test_attribution_per_backend(tmp_path: Path) -> None:
    """portable process records are sampled_process; kernel-reported ones are causal syscall."""
    require_backend("linux")
    observed, _work, _ = _observe("linux", tmp_path, f"{shlex.quote(python())} -c pass")
    child = _child_starts(observed)
    assert child
    assert all(
        a["evidence.attribution"] == "syscall" and a["evidence.causal"] is True for a in child
    )
    # The child's sleep is the workload: it lives long enough for the sampler to see it.
    observed_p, _work_p, _ = _observe(
        "portable", tmp_path, f"{shlex.quote(python())} -c 'import time; time.sleep(0.2)'"
    )
    child_p = _child_starts(observed_p)
    assert child_p
    assert all(a["evidence.attribution"] == "sampled_process" for a in child_p)
    assert all("evidence.causal" not in a for a in child_p)


@needs_root
@pytest.mark.slow
def test_same_process_one_identity_across_backends(tmp_path: Path) -> None:
    """Every backend running at once gives a process the same (pid, creation time) identity."""
    available = [b for b in BACKENDS if b != "ebpf"]
    for backend in available:
        require_backend(backend)
    # The sleeps are the workload: processes that live long enough for every backend to see.
    script = f"{shlex.quote(python())} -c 'import time; time.sleep(0.3)'; sleep 0.3"
    work = Gated(script, cwd=str(tmp_path))
    receivers = []
    try:
        for backend in available:
            receivers.append(start_receiver(_config(backend, tmp_path), work.pid))
        work.release()
        assert work.wait() == 0
        for observed in receivers:
            observed.wait_for("process.exit", work.pid)
    finally:
        work.kill()
        for r in receivers:
            finish(r)
    seen: dict[int, dict[str, str]] = {}
    for observed in receivers:
        backend = str(observed.logs[0].resource.attributes["evidence.backend"])
        for name in ("process.start", "process.exec"):
            for a in observed.events(name):
                if a.get("process.creation.time.approximate"):
                    continue
                seen.setdefault(a["process.pid"], {})[backend] = a["process.creation.time"]
    shared = {pid: by for pid, by in seen.items() if len(by) > 1}
    assert work.pid in shared
    assert len(shared) >= 2, seen
    for pid, by_backend in shared.items():
        assert len(set(by_backend.values())) == 1, (pid, by_backend)


@needs_root
def test_identity_matches_linux_start_time(tmp_path: Path) -> None:
    """process.creation.time is identity.linux_start_time_ms of the pid, as ISO 8601 ms."""
    require_backend("linux")
    work = Gated("sleep 0.3", cwd=str(tmp_path))
    expected = linux_start_time_ms(work.pid)
    assert expected is not None
    observed = start_receiver(_config("linux", tmp_path), work.pid)
    work.release()
    work.wait()
    finish(observed)
    starts = observed.for_pid("process.start", work.pid)
    assert starts[0]["process.creation.time"] == iso_ms(expected)


@needs_root
def test_descendant_outliving_root_gets_no_exit(tmp_path: Path) -> None:
    """A background child still running at shutdown is not given a fabricated exit event."""
    require_backend("linux")
    marker = tmp_path / "bg.pid"
    # The workload: a background child (sleep 5) that outlives the root.
    work = Gated(f"sleep 5 & echo $! > {marker}; exit 0", cwd=str(tmp_path))
    observed = start_receiver(_config("linux", tmp_path), work.pid)
    work.release()
    work.wait()
    bg = int(marker.read_text())  # written by the shell before it exited
    try:
        observed.wait_for("process.start", bg)
        observed.wait_for("process.exit", work.pid)
        assert psutil.pid_exists(bg)  # still running when the receiver stops
        finish(observed)
        assert observed.for_pid("process.start", bg)
        assert observed.for_pid("process.exit", work.pid)
        assert not observed.for_pid("process.exit", bg)
    finally:
        os.kill(bg, 9)


@needs_root
def test_environment_only_traceparent_unless_captured(tmp_path: Path) -> None:
    """Only TRACEPARENT is read from the environment; capture_environment stores it redacted."""
    require_backend("linux")
    env = dict(
        os.environ,
        TRACEPARENT="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        MY_API_TOKEN="tok-secret-value",
    )
    for capture in (False, True):
        work = Gated("sleep 0.1", cwd=str(tmp_path), env=env)
        config = _config("linux", tmp_path)
        config.capture_environment = capture
        observed = finish_after(work, config)
        start = observed.for_pid("process.start", work.pid)[0]
        assert start["process.env.traceparent"] == env["TRACEPARENT"]
        if capture:
            assert start["process.environment"]["MY_API_TOKEN"] == "[REDACTED]"
        else:
            assert "process.environment" not in start
        assert "tok-secret-value" not in repr(observed.logs)


def finish_after(work: Gated, config: HostConfig) -> Observed:
    """Observe ``work`` to completion with ``config``."""
    observed = start_receiver(config, work.pid)
    work.release()
    work.wait()
    return finish(observed)


@needs_root
def test_batches_respect_batch_size(tmp_path: Path) -> None:
    """The emitter never hands the consumer more than batch_size records at once."""
    require_backend("linux")
    work = Gated(
        "for i in 1 2 3 4 5 6; do true; done; ls >/dev/null; ls >/dev/null", cwd=str(tmp_path)
    )
    config = _config("linux", tmp_path)
    config.batch_size = 2
    observed = finish_after(work, config)
    assert observed.sink.batches
    assert max(len(b.logs) for b in observed.sink.batches) <= 2
    assert len(observed.logs) > 4


def test_portable_notices_exec_between_samples(tmp_path: Path) -> None:
    """The portable sampler reports an exec of a tracked process (same pid, new image)."""
    # The workload: a process that execs a new image between two samples.
    work = Gated("sleep 0.2; exec sleep 0.4", cwd=str(tmp_path))
    observed = start_receiver(_config("portable", tmp_path), work.pid)
    work.release()
    assert work.wait() == 0
    finish(observed)
    execs = observed.for_pid("process.exec", work.pid)
    assert execs, observed.events("process.exec")
    assert execs[-1]["process.executable.name"] == "sleep", execs
    assert execs[-1]["evidence.attribution"] == "sampled_process"


@needs_root
@pytest.mark.slow
def test_directory_entry_changes_are_attributed(tmp_path: Path) -> None:
    """linux: creating, renaming and deleting files and a directory is reported with full paths
    and attributed to the process that did it (fanotify's directory-entry group). (strace sees a
    creation as an ``O_CREAT`` open and does not trace mkdir/rmdir.)"""
    backend = "linux"
    require_backend(backend)
    script = "touch a.txt; mv a.txt b.txt; rm b.txt; mkdir sub; rmdir sub"
    observed, work, code = _observe(backend, tmp_path, script)
    assert code == 0
    in_tmp = str(tmp_path) + os.sep

    def paths(name: str) -> list[tuple[str, int]]:
        return [
            (str(a["file.path"]).removeprefix(in_tmp), int(a["process.pid"]))
            for a in observed.events(name)
            if str(a["file.path"]).startswith(in_tmp)
        ]

    creates, deletes = paths("file.create"), paths("file.delete")
    renames = [a for a in observed.events("file.rename") if str(a["file.path"]) == in_tmp + "a.txt"]
    assert {p for p, _ in creates} >= {"a.txt", "sub"}
    assert {p for p, _ in deletes} >= {"b.txt", "sub"}
    assert len(renames) == 1
    assert renames[0]["file.new_path"] == in_tmp + "b.txt"
    # each change belongs to the process that made it: a child of the shell, never the shell
    doers = {pid for _, pid in creates + deletes} | {int(renames[0]["process.pid"])}
    assert work.pid not in doers
    starts = {int(a["process.pid"]) for a in observed.events("process.start")}
    assert doers <= starts
    for a in observed.events("file.create") + observed.events("file.rename"):
        assert a["evidence.attribution"] == "syscall"
        assert a["evidence.causal"] is True


@needs_root
@pytest.mark.slow
def test_short_lived_children_keep_their_file_writes(tmp_path: Path) -> None:
    """linux: files written by children that live a few milliseconds (cp, a redirect of sed)
    are attributed to those children, not dropped and not given to the shell."""
    require_backend("linux")
    script = "cp /etc/hostname copy.txt; sed -n 1p copy.txt > line.txt; cp copy.txt again.txt"
    observed, work, code = _observe("linux", tmp_path, script)
    assert code == 0
    writers: dict[str, set[int]] = {}
    for a in observed.events("file.write"):
        writers.setdefault(str(a["file.path"]), set()).add(int(a["process.pid"]))
    copies = writers.get(str(tmp_path / "copy.txt"), set()) | writers.get(
        str(tmp_path / "again.txt"), set()
    )
    assert copies, f"cp's writes were not reported: {sorted(writers)}"
    assert work.pid not in copies
    starts = {int(a["process.pid"]): a for a in observed.events("process.start")}
    assert copies <= set(starts)
    for a in observed.events("file.write"):
        assert "process.creation.time" in a  # reported with the process's identity
