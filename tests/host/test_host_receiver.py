"""Host receiver config, factory lifecycle, backend selection and identity helpers."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from host_support import Gated, finish, needs_root, start_receiver
from waiting import wait_until

from otel_bridge.component import CreateSettings, Host
from otel_bridge.errors import BackendUnavailableError, StartupError
from otel_bridge.identity import iso_ms, linux_start_time_ms
from otel_bridge.receivers.host import HostConfig, HostReceiver, factory
from otel_bridge.receivers.host.config import MIN_POLL_INTERVAL
from otel_bridge.receivers.host.ebpf import EbpfBackend
from otel_bridge.receivers.host.procfs import (
    ProcessInfo,
    approx_start_ms,
    descendants_of,
    read_process,
)
from otel_bridge.receivers.host.selection import create_backend, probe_backends
from otel_bridge.receivers.host.strace import StraceBackend
from otel_bridge.redaction import Redactor
from otel_bridge.testing import RecordingConsumer


def test_default_config_validates() -> None:
    """The default config has no problems and asks for the auto backend."""
    config = factory.default_config()
    assert config.validate() == []
    assert config.backend == "auto"
    assert factory.type_name == "host"


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("backend", "dtrace", "backend: must be one of"),
        ("poll_interval", 0.001, "poll_interval: must be at least 5ms"),
        ("fanotify_events", ["open", "exec"], "fanotify_events[1]: must be one of"),
        ("fanotify_mark", "inode", "fanotify_mark:"),
        ("batch_size", 0, "batch_size:"),
        ("root_pid", -1, "root_pid:"),
    ],
)
def test_config_problems_name_the_key(field: str, value: object, problem: str) -> None:
    """Each bad value is reported with its key."""
    config = HostConfig()
    setattr(config, field, value)
    assert any(p.startswith(problem) for p in config.validate()), config.validate()


def test_min_poll_interval_is_5ms() -> None:
    """The documented minimum poll interval is 5 ms and is accepted."""
    assert MIN_POLL_INTERVAL == 0.005
    assert HostConfig(poll_interval=0.005).validate() == []


def test_shutdown_before_start_and_twice() -> None:
    """Shutdown is safe before start and twice."""
    receiver = factory.create(CreateSettings(id="host"), HostConfig(), RecordingConsumer())
    receiver.shutdown()
    receiver.shutdown()


def test_start_without_root_pid_is_a_standing_receiver() -> None:
    """With no root pid the receiver starts with an empty lineage and follows what it learns."""
    receiver = HostReceiver(
        CreateSettings(id="host"), HostConfig(backend="portable"), RecordingConsumer()
    )
    try:
        receiver.start(Host())
        assert receiver.standing
        assert receiver.context is not None
        assert receiver.context.lineage.snapshot() == []
    finally:
        receiver.shutdown()


def test_missing_tools_are_unavailable_with_reason() -> None:
    """A backend whose tool is missing raises BackendUnavailableError naming it."""
    with pytest.raises(BackendUnavailableError, match="not installed"):
        StraceBackend("/nonexistent/strace")
    with pytest.raises(BackendUnavailableError, match="not installed"):
        EbpfBackend("/nonexistent/bpftrace")
    with pytest.raises(BackendUnavailableError, match="unknown host backend"):
        create_backend("dtrace", HostConfig())


def test_explicit_unavailable_backend_fails_startup(tmp_path: Path) -> None:
    """An explicitly chosen backend that cannot run fails start-up with its reason."""
    work = Gated("true", cwd=str(tmp_path))
    try:
        receiver = HostReceiver(
            CreateSettings(id="host"),
            HostConfig(backend="strace", strace_path="/nonexistent/strace"),
            RecordingConsumer(),
        )
        receiver.set_root_pid(work.pid)
        with pytest.raises(StartupError, match="not installed"):
            receiver.start(Host())
    finally:
        work.kill()


def test_probe_lists_every_backend_and_portable_always_works() -> None:
    """probe_backends names each backend; portable never has a reason not to run."""
    probes = dict(probe_backends(HostConfig()))
    assert set(probes) == {"linux", "ebpf", "strace", "portable"}
    assert probes["portable"] == ""


@needs_root
def test_auto_picks_linux_and_says_why(tmp_path: Path) -> None:
    """backend auto picks linux here and records the reason in telemetry."""
    if dict(probe_backends(HostConfig()))["linux"]:
        pytest.skip("linux backend unavailable here")
    work = Gated("true", cwd=str(tmp_path))
    observed = start_receiver(HostConfig(), work.pid)
    work.release()
    work.wait()
    finish(observed)
    assert observed.receiver.explanation.startswith("linux: netlink process connector")
    assert observed.host.telemetry.notes()["host.backend"] == observed.receiver.explanation


def test_auto_skips_unavailable_backends_with_reasons(tmp_path: Path) -> None:
    """When stronger backends cannot run, auto continues and lists why it skipped them."""
    work = Gated("sleep 0.2", cwd=str(tmp_path))
    config = HostConfig(strace_path="/nonexistent/strace", bpftrace_path="/nonexistent/bt")
    config.backend = "auto"
    receiver = HostReceiver(CreateSettings(id="host"), config, RecordingConsumer())
    receiver.set_root_pid(work.pid)
    receiver.auto_order = ("ebpf", "strace", "portable")  # as if linux were unavailable
    try:
        receiver.start(Host())
    finally:
        work.release()
        work.wait()
        receiver.shutdown()
    assert receiver.backend_name == "portable"
    assert "skipped: ebpf:" in receiver.explanation
    assert "strace:" in receiver.explanation


def test_read_process_matches_identity_and_redacts() -> None:
    """read_process gives linux_start_time_ms's start and redacted argv."""
    proc = subprocess.Popen(["sh", "-c", "sleep 5", "sh", "--token=abcdef"])
    try:
        # Right after fork, and while exec replaces the image, cmdline reads as the parent's or
        # empty: wait for the exec'd shell's entry.
        def exec_d() -> ProcessInfo | None:
            found = read_process(proc.pid, Redactor())
            return found if found is not None and found.argv[:1] == ["sh"] else None

        info = wait_until(exec_d, 5, "the exec'd shell's /proc entry to be read")
        assert info.start_ms == linux_start_time_ms(proc.pid)
        assert info.argv == ["sh", "-c", "sleep 5", "sh", "--token=[REDACTED]"]
        assert info.name in ("dash", "sh", "bash")
        assert info.ppid == os.getpid()
        assert proc.pid in descendants_of(os.getpid())
    finally:
        proc.kill()
        proc.wait()
    assert read_process(proc.pid, Redactor()) is None


def test_approximate_start_is_close_to_real() -> None:
    """A start time derived from a monotonic timestamp at fork is within a tick of /proc's."""
    before = time.monotonic_ns()
    proc = subprocess.Popen(["sleep", "0.2"])
    try:
        real = linux_start_time_ms(proc.pid)
        assert real is not None
        approx = approx_start_ms(before)
        assert abs(approx - real) <= 20
    finally:
        proc.wait()


def test_iso_ms_format() -> None:
    """Creation times are ISO 8601 UTC with milliseconds."""
    assert iso_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert iso_ms(5) == "1970-01-01T00:00:00.005Z"
