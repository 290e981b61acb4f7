"""The ``strace`` backend: ptrace-based syscall tracing of the lineage.

strace attaches to the root (and any descendants already running) with ``-p`` and follows every
new child (``-f``). Its output goes to a pipe (``-o /dev/fd/N``) and is parsed incrementally:

* ``execve``/``execveat`` successes -> ``process.exec`` (argv from the trace, redacted);
  ``clone``/``fork``/``vfork`` and a new pid's first line -> ``process.start``;
  ``+++ exited with N +++`` -> ``process.exit`` with the code;
* successful ``open``/``openat``/``openat2``/``creat`` -> ``file.open`` with flags and access
  (failures are counted, not emitted); ``unlink*`` -> ``file.delete``; ``rename*`` ->
  ``file.rename``;
* ``connect`` = 0 -> ``network.connect``; ``EINPROGRESS`` -> ``network.connect_attempt``
  ``pending``; other errors -> ``connect_attempt`` ``failed``; ``listen`` -> ``network.listen``;
* the TCP sockets a process already holds when strace attaches to it (a process a standing
  collector follows, a ``root_pid``) were opened before any of this could be traced: they are
  read once from ``/proc`` right after the attach and recorded as found then
  (:func:`~otel_bridge.receivers.host.netscan.record_held_sockets`,
  ``network.observed_at=attach``).

Attaching by pid cannot use ``--seccomp-bpf`` (strace applies that filter only to commands it
launches), so every traced syscall of the lineage stops in the tracer: strace is the
highest-overhead backend. Attribution is ``syscall``, causal.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from typing import IO

from otel_bridge.errors import BackendUnavailableError
from otel_bridge.model import CollectionState
from otel_bridge.receivers.host.events import HostContext
from otel_bridge.receivers.host.netscan import record_held_sockets
from otel_bridge.receivers.host.strace_events import SyscallInterpreter
from otel_bridge.receivers.host.strace_parse import StraceParser

TRACE_SET = (
    "execve,execveat,clone,clone3,fork,vfork,exit_group,"
    "open,openat,openat2,creat,unlink,unlinkat,rename,renameat,renameat2,"
    "connect,listen"
)
ACCEPT_SET = ",accept,accept4"
"""Traced as well with ``network_accepted`` (each accept then stops in the tracer)."""


def _drain_and_close(stream: IO[bytes]) -> None:
    with stream:
        while stream.read(65536):
            pass


_OFF = {"process": "processes: false", "file": "files: false", "network": "network: false"}


class _Session:
    """One strace process attached to a set of pids, parsed from its pipe by one thread."""

    def __init__(self, path: str, pids: list[int], ctx: HostContext) -> None:
        read_fd, write_fd = os.pipe()
        cmd = [path, "-f", "-ttt", "-yy", "-s", "4096", "-o", f"/dev/fd/{write_fd}"]
        trace = TRACE_SET + (ACCEPT_SET if ctx.config.network_accepted else "")
        # envp printed in full at each exec: a short-lived command's TRACEPARENT is read from
        # the trace itself, since its /proc/PID/environ may be gone before the line is parsed
        cmd += ["-e", f"trace={trace}", "-e", "signal=none", "-e", "abbrev=!execve,execveat"]
        for pid in pids:
            cmd += ["-p", str(pid)]
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(write_fd,),
            )
        finally:
            os.close(write_fd)
        self._read_fd = read_fd
        self._thread: threading.Thread | None = None
        self._drain: threading.Thread | None = None
        self.interp: SyscallInterpreter | None = None
        self._wait_attached(pids, ctx.config.startup_timeout)
        for pid in pids:  # observed from now: only now are they the lineage (see follow)
            ctx.lineage.add(pid)
        self.interp = SyscallInterpreter(ctx)
        self.interp.running_threads(pids)
        if ctx.config.network:
            # strace traces the connects made from now on; the sockets they hold already (an
            # OTLP exporter's connection, for one) are read once, as found at the attach
            record_held_sockets(ctx, pids)
        self._thread = threading.Thread(target=self._run, name="host-strace", daemon=True)
        self._thread.start()

    def _wait_attached(self, pids: list[int], timeout: float) -> None:
        assert self.proc is not None
        assert self.proc.stderr is not None
        deadline = time.monotonic() + timeout
        waiting = {str(p) for p in pids}
        while waiting and time.monotonic() < deadline:
            line = self.proc.stderr.readline().decode("utf-8", "replace")
            if not line:
                break
            # "strace: Process 123 attached"
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "Process" and parts[3] == "attached":
                waiting.discard(parts[2])
            elif "attach" in line and ("ptrace" in line or "Operation" in line):
                failed = next((w.rstrip("):,") for w in parts if w.rstrip("):,") in waiting), "")
                if failed and failed != str(pids[0]) and "No such process" in line:
                    waiting.discard(failed)  # a descendant that exited meanwhile
                    continue
                self.stop()
                raise BackendUnavailableError(f"strace: cannot attach: {line.strip()}")
        if waiting:
            self.stop()
            raise BackendUnavailableError(
                f"strace: did not attach to {', '.join(sorted(waiting))} within {timeout:g}s"
            )
        # keep draining stderr so strace never blocks on it
        self._drain = threading.Thread(
            target=_drain_and_close, args=(self.proc.stderr,), name="strace-stderr", daemon=True
        )
        self._drain.start()

    def _run(self) -> None:
        interp = self.interp
        assert interp is not None
        parser = StraceParser()
        with os.fdopen(self._read_fd, "rb", closefd=True) as stream:
            self._read_fd = -1
            for raw in stream:
                call = parser.feed(raw.decode("utf-8", "surrogateescape"))
                if call is not None:
                    interp.handle(call)
        if parser.unparsed:
            interp.ctx.telemetry.count("strace.unparsed", parser.unparsed)

    def stop(self) -> None:
        """Detach strace (SIGINT), parse what it wrote, and stop. Safe twice."""
        proc = self.proc
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(2)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if self._drain is not None:
                self._drain.join(timeout=10)
                self._drain = None
            elif proc.stderr is not None:
                proc.stderr.close()
            self.proc = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self.interp is not None:
            self.interp.gate.flush()
            self.interp = None
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1


class StraceBackend:
    """strace -f -p ROOT, parsed from a pipe (see the module docstring).

    A standing collector (no root) starts no tracer until it learns a process to follow; each
    followed process gets its own ``strace -f -p PID`` session (:meth:`follow`).
    """

    name = "strace"

    def __init__(self, strace_path: str = "strace") -> None:
        path = shutil.which(strace_path)
        if path is None:
            raise BackendUnavailableError(f"strace: {strace_path!r} is not installed")
        try:
            version = subprocess.run(
                [path, "-V"], capture_output=True, text=True, timeout=10, check=False
            ).stdout.splitlines()[0]
        except (OSError, subprocess.TimeoutExpired, IndexError) as exc:
            raise BackendUnavailableError(f"strace: cannot run {path}: {exc}") from exc
        self._path = path
        self.version = version
        self.why = (
            f"{version}: ptrace syscall tracing of the lineage (attached by pid, so no "
            "--seccomp-bpf: every traced syscall stops in the tracer)"
        )
        self._ctx: HostContext | None = None
        self._sessions: list[_Session] = []
        self._lock = threading.Lock()

    def start(self, ctx: HostContext) -> None:
        """Attach strace to the lineage (if it has a root) and wait until every pid is attached."""
        self._ctx = ctx
        pids = ctx.snapshot_lineage()
        if pids:
            self._sessions.append(_Session(self._path, pids, ctx))
        on = {"process": ctx.config.processes, "file": ctx.config.files}
        on["network"] = ctx.config.network
        details = {
            "process": self.why,
            "file": "open/openat/openat2/creat, unlink, rename syscalls (successful opens only; "
            "bytes read or written are not traced)",
            "network": "connect/listen syscalls (accepted connections only with network_accepted)",
        }
        briefs = {
            "process": "ptrace",
            "file": "open, unlink and rename syscalls",
            "network": "connect and listen syscalls",
        }
        for name, wanted in on.items():
            ctx.collection_state(
                name,
                CollectionState.AVAILABLE if wanted else CollectionState.NOT_REQUESTED,
                details[name] if wanted else _OFF[name],
                briefs[name] if wanted else "",
            )

    def follow(self, pid: int) -> str:
        """Attach a new tracer to ``pid`` and its running descendants; ``""`` or why not.

        Returns once strace reported every pid attached: the pids join the lineage then, and
        the caller's "following pid N from now" is true from that moment."""
        ctx = self._ctx
        if ctx is None:
            return "strace: not running"
        # identified now, in the lineage only once strace is attached (the session adds them):
        # until then nothing they do is traced, so nothing may treat them as followed
        pids = ctx.adopt(pid, track=False)
        if not pids:
            return ""
        try:
            session = _Session(self._path, pids, ctx)
        except (BackendUnavailableError, OSError) as exc:
            return str(exc)
        with self._lock:
            self._sessions.append(session)
        return ""

    def stop(self) -> None:
        """Detach every tracer, parse what they wrote, and stop. Safe twice."""
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for session in sessions:
            session.stop()
