"""Per-plane ``auto``: a plane the first backend cannot cover goes to the next that works."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from host_support import Gated, backend_reason, finish, start_receiver

from otel_bridge.component import CreateSettings, Host
from otel_bridge.receivers.host import HostConfig, HostReceiver
from otel_bridge.testing import RecordingConsumer


def _file_states(logs: Sequence[Mapping[str, object]]) -> list[tuple[object, object]]:
    return [
        (a["collection.state"], a["collection.reason"])
        for a in logs
        if a.get("collection.name") == "file"
    ]


def test_a_plane_the_first_backend_cannot_cover_goes_to_the_next(tmp_path: Path) -> None:
    """portable first (no watch_paths: files not sampled), then strace for files only: the
    file write is recorded by strace, the status names each plane's backend, and the gap
    record of portable's file plane is not emitted (strace covered it)."""
    reason = backend_reason("strace")
    if reason:
        pytest.skip(reason)
    work = Gated("echo planes > planes.txt", cwd=str(tmp_path))
    sink = RecordingConsumer()
    receiver = HostReceiver(CreateSettings(id="host"), HostConfig(), sink)
    receiver.auto_order = ("portable", "strace")  # as if linux and ebpf were unavailable
    receiver.set_root_pid(work.pid)
    try:
        receiver.start(Host())
        work.release()
        assert work.wait() == 0
    finally:
        work.kill()
        receiver.shutdown()
    assert receiver.backend_name == "portable+strace"
    assert "per plane: process: portable, file: strace, network: portable" in (receiver.explanation)
    status = receiver.status()
    assert status.collections["file"].startswith("available: strace:")
    assert status.collections["process"].startswith("degraded: portable:")
    logs = [dict(r.attributes) for r in sink.logs]
    states = _file_states(logs)
    assert [s for s, _ in states] == ["available"], states
    writes = [a for a in logs if str(a.get("file.path", "")).endswith("planes.txt")]
    assert writes
    assert {
        r.resource.attributes["evidence.backend"] for r in sink.logs if "file.path" in r.attributes
    } == {"strace"}


def test_a_backend_that_fills_no_gap_is_not_kept(tmp_path: Path) -> None:
    """A next backend that cannot cover the gap either is stopped and named as skipped; the
    first backend's gap record is then emitted (files: not sampled, with its reason)."""
    work = Gated("true", cwd=str(tmp_path))
    sink = RecordingConsumer()
    receiver = HostReceiver(CreateSettings(id="host"), HostConfig(), sink)
    receiver.auto_order = ("portable", "portable")
    receiver.set_root_pid(work.pid)
    try:
        receiver.start(Host())
        work.release()
        assert work.wait() == 0
    finally:
        work.kill()
        receiver.shutdown()
    assert receiver.backend_name == "portable"
    assert "portable: cannot observe file here either" in receiver.explanation
    states = _file_states([dict(r.attributes) for r in sink.logs])
    assert states == [("not_sampled", "no watch_paths configured for watchdog")]
    assert receiver.status().collections["file"].startswith("not_sampled: portable:")


def test_an_explicit_backend_runs_alone(tmp_path: Path) -> None:
    """``backend: portable`` keeps its gap: no second backend is started for files."""
    work = Gated("true", cwd=str(tmp_path))
    observed = start_receiver(HostConfig(backend="portable"), work.pid)
    work.release()
    work.wait()
    finish(observed)
    assert observed.receiver.backend_name == "portable"
    assert [
        a["collection.state"]
        for a in observed.events("collection.state")
        if a["collection.name"] == "file"
    ] == ["not_sampled"]
