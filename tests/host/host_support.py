"""Helpers for host receiver tests: gated real workloads, a loopback server, record queries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import pytest
from waiting import wait_until

from otel_bridge.component import CreateSettings, Host, Telemetry
from otel_bridge.errors import BackendUnavailableError
from otel_bridge.model import LogRecord
from otel_bridge.receivers.host import HostConfig, HostReceiver
from otel_bridge.receivers.host.events import Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.selection import create_backend
from otel_bridge.redaction import Redactor
from otel_bridge.testing import LoopbackServer, RecordingConsumer

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="needs root (netlink, fanotify, ptrace, bpf)")


def backend_reason(name: str, **overrides: Any) -> str:
    """Why backend ``name`` cannot run here, or "" when it can."""
    try:
        create_backend(name, HostConfig(backend=name, **overrides))
    except BackendUnavailableError as exc:
        return str(exc)
    return ""


def require_backend(name: str) -> None:
    """Skip the test with the backend's own reason when it cannot run here."""
    reason = backend_reason(name)
    if reason:
        pytest.skip(reason)


def require_socket_tracer(name: str) -> None:
    """Skip with the reason when the linux backend or its ``name`` socket tracer (``perf`` or
    ``bpftrace``) cannot run here."""
    from otel_bridge.perfring import online_cpus, open_rings
    from otel_bridge.receivers.host.perftrace import tracepoint
    from otel_bridge.receivers.host.socktrace import check_socket_tracing

    require_backend("linux")
    try:
        if name == "bpftrace":
            check_socket_tracing("bpftrace")
            return
        event_id, _ = tracepoint()
        for ring in open_rings(event_id, online_cpus()):
            ring.close()
    except OSError as exc:
        pytest.skip(f"no {name} socket tracer here: {exc}")


@contextmanager
def loopback_server() -> Iterator[LoopbackServer]:
    """A :class:`LoopbackServer` for the duration of the block."""
    server = LoopbackServer()
    try:
        yield server
    finally:
        server.close()


def child_code(port: int, hold: float = 0.3) -> str:
    """Python source of a child that connects to ``port``, holds it, and exits 0.

    The sleep is the workload: the connection must stay open long enough for a sampling
    backend to see it.
    """
    return (
        "import socket,time;"
        f"s=socket.create_connection(('127.0.0.1',{port}));"
        f"time.sleep({hold});s.close()"
    )


class Gated:
    """A real ``sh -c SCRIPT`` workload that waits on a FIFO until :meth:`release`."""

    def __init__(self, script: str, cwd: str, env: dict[str, str] | None = None) -> None:
        self._dir = tempfile.mkdtemp(prefix="gate-")
        self._fifo = os.path.join(self._dir, "gate")
        os.mkfifo(self._fifo, 0o600)
        self.proc = subprocess.Popen(
            ["sh", "-c", f"read _ < {self._fifo}; {script}"],
            cwd=cwd,
            env=env,
            process_group=0,
        )
        self.pid = self.proc.pid
        self._released = False

    def release(self) -> None:
        """Let the script run."""
        with open(self._fifo, "w") as f:
            f.write("go\n")
        self._released = True
        shutil.rmtree(self._dir, ignore_errors=True)

    def wait_channel(self) -> str:
        """The kernel function the shell sleeps in (``/proc/PID/wchan``): ``0`` while it runs, or
        always where the kernel hides wait channels; empty once it is gone."""
        try:
            with open(f"/proc/{self.pid}/wchan") as f:
                return f.read().strip()
        except OSError:
            return ""

    def at_gate(self) -> bool:
        """True while the script is blocked opening the gate's FIFO, that is before any of it
        ran (the shell sleeps in ``wait_for_partner``: a FIFO open waiting for a writer)."""
        return self.wait_channel() == "wait_for_partner"

    def wait(self, timeout: float = 20) -> int:
        """The script's exit status."""
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """Kill the workload's process group (cleanup)."""
        with suppress(ProcessLookupError):
            os.killpg(self.pid, 9)
        self.proc.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


@dataclass
class Observed:
    """What one receiver emitted for one workload."""

    receiver: HostReceiver
    sink: RecordingConsumer
    host: Host
    logs: list[LogRecord] = field(default_factory=list)

    def events(self, name: str) -> list[dict[str, Any]]:
        """Attributes of every record named ``name``."""
        return [dict(r.attributes) for r in self.logs if r.event_name == name]

    def for_pid(self, name: str, pid: int) -> list[dict[str, Any]]:
        """Attributes of every ``name`` record of process ``pid``."""
        return [a for a in self.events(name) if a.get("process.pid") == pid]

    def wait_for(
        self, name: str, pid: int | None = None, *, path_end: str = "", timeout: float = 10
    ) -> None:
        """Wait until the receiver emitted a ``name`` record (of ``pid``, of a ``file.path``
        ending in ``path_end``, when given): the receiver has caught up with the workload that
        far. Reads the live sink, so it works before :func:`finish`."""

        def seen() -> bool:
            for r in self.sink.logs:
                if r.event_name != name:
                    continue
                if pid is not None and r.attributes.get("process.pid") != pid:
                    continue
                if not str(r.attributes.get("file.path", "")).endswith(path_end):
                    continue
                return True
            return False

        what = f"a {name} record" + (f" of pid {pid}" if pid is not None else "")
        wait_until(seen, timeout, what + (f" for *{path_end}" if path_end else ""))


def start_receiver(config: HostConfig, root_pid: int) -> Observed:
    """A started host receiver rooted at ``root_pid``."""
    sink = RecordingConsumer()
    receiver = HostReceiver(CreateSettings(id="host"), config, sink)
    receiver.set_root_pid(root_pid)
    host = Host()
    receiver.start(host)
    return Observed(receiver, sink, host)


def held_context(root: int, sink: RecordingConsumer) -> HostContext:
    """A host context over ``root``'s lineage (file events: open and close-write) whose records
    stay in ``sink``'s emitter until flushed."""
    telemetry = Telemetry()
    return HostContext(
        config=HostConfig(fanotify_events=["open", "close_write"]),
        lineage=Lineage(root),
        events=EventFactory("test", "run", Emitter(sink, telemetry, batch_size=10**5, interval=60)),
        telemetry=telemetry,
        redactor=Redactor(),
    )


def finish(observed: Observed) -> Observed:
    """Shut the receiver down and collect its records."""
    observed.receiver.shutdown()
    observed.logs = list(observed.sink.logs)
    return observed


def python() -> str:
    """The real interpreter (not a pyenv shim), so exec events name python itself."""
    return os.path.realpath(sys.executable)


def have(tool: str) -> bool:
    """True when ``tool`` is on PATH."""
    return shutil.which(tool) is not None
