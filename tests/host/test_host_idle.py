"""A standing ``linux`` receiver that follows nothing does (almost) nothing, then follows.

With an empty lineage every file event of the machine is another process's: the fanotify
reader drops its reads unparsed, and the socket scanner sleeps instead of waking every
``network_poll_interval``. Once a process is followed, its files and connections are recorded
as before.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

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
)
from waiting import wait_until

from otel_bridge.component import CreateSettings, Host, ProcessInterest
from otel_bridge.identity import host_id, linux_start_time_ms
from otel_bridge.receivers.host import HostConfig, HostReceiver
from otel_bridge.receivers.host.linux import LinuxBackend
from otel_bridge.testing import RecordingConsumer


@needs_root
@pytest.mark.root
def test_an_idle_standing_receiver_skips_the_machine_and_then_follows(tmp_path: Path) -> None:
    require_backend("linux")
    sink = RecordingConsumer()
    receiver = HostReceiver(CreateSettings(id="host"), HostConfig(backend="linux"), sink)
    observed = Observed(receiver, sink, Host())
    receiver.start(observed.host)
    with loopback_server() as server:
        child = shlex.join([python(), "-c", child_code(server.port)])
        script = f"echo followed > out.txt; exec {child}"
        work = Gated(script, cwd=str(tmp_path))
        try:
            backend = receiver.backends[0]
            assert isinstance(backend, LinuxBackend)
            watcher, scanner = backend._fanotify, backend._scanner
            assert watcher is not None
            assert scanner is not None
            began, woke = time.monotonic(), scanner.wakeups
            for i in range(50):  # activity of a process nobody follows
                (tmp_path / f"noise{i % 5}.txt").write_text(str(i))
            wait_until(lambda: watcher.idle_reads > 0, 20, "an idle read of the file queue")
            idle_for = time.monotonic() - began
            # asleep while nothing is followed: at most one wake-up a second (plus the start),
            # where a 10 ms interval would have woken about a hundred times a second
            assert scanner.wakeups - woke <= idle_for + 2
            assert not [r for r in sink.logs if r.event_name.startswith("file.")]

            start = linux_start_time_ms(work.pid)
            observed.host.interests.publish(
                ProcessInterest(pid=work.pid, host_id=host_id(), start_time_ms=start, source="test")
            )
            ctx = receiver.context
            assert ctx is not None
            wait_until(lambda: work.pid in ctx.lineage, 20, "the reported pid in the lineage")
            work.release()
            assert work.wait() == 0
            observed.wait_for("process.exit", work.pid)
        finally:
            work.kill()
            finish(observed)
    writes = [
        a
        for a in observed.for_pid("file.write", work.pid)
        if str(a["file.path"]).endswith("/out.txt")
    ]
    assert writes, [r.event_name for r in observed.logs]
    connects = observed.for_pid("network.connect", work.pid)
    assert [c["network.peer.port"] for c in connects] == [server.port]
    assert not [a for a in observed.events("file.open") if "noise" in str(a.get("file.path", ""))]
