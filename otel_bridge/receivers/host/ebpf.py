"""The ``ebpf`` backend: a bpftrace program on kernel tracepoints, filtered to the lineage.

The program keeps a map of tracked pids seeded with the root and its running descendants;
``task:task_newtask`` (a new task whose ``clone_flags`` lack ``CLONE_THREAD``) adds each child
*in the kernel*, before it runs, so the lineage filter has no window. It prints one line per event:

* ``F parent child ns`` (fork), ``e pid ns path`` / ``E pid ns ret`` (execve enter/exit),
  ``X pid ns status`` (``sched_process_exit`` of a thread-group leader, wait status);
* ``O pid ns ret flags path`` (``openat``), ``C pid ns ret sockaddr`` (``connect``, the raw
  sockaddr bytes as bpftrace's ``%r``).

Timestamps are ``nsecs`` (CLOCK_MONOTONIC). Paths longer than 200 bytes are truncated (the
bpftrace string limit). Needs root, tracefs mounted at
``/sys/kernel/tracing`` with syscall tracepoints, and BTF for ``curtask``. Events are emitted
through a per-CPU perf buffer: if it overflows bpftrace prints ``Lost N events`` and the
collections become ``degraded``. bpftrace takes a few seconds to compile and attach;
``start`` waits for its ``READY`` line so nothing in the lineage runs unobserved.
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
from otel_bridge.receivers.host.ebpf_lines import BpftraceInterpreter
from otel_bridge.receivers.host.events import HostContext

TRACEFS = "/sys/kernel/tracing"
STRLEN = 200
"""bpftrace's string limit (``BPFTRACE_STRLEN``; 200 is its maximum): longer paths are cut."""

PROGRAM = r"""
BEGIN { SEED printf("READY\n"); }
tracepoint:task:task_newtask /@track[pid] && !(args->clone_flags & 0x10000)/ {
  @track[args->pid] = 1; printf("F %d %d %llu\n", pid, args->pid, nsecs); }
tracepoint:syscalls:sys_enter_execve /@track[pid]/ {
  @ex[tid] = 1; printf("e %d %llu %s\n", pid, nsecs, str(args->filename)); }
tracepoint:syscalls:sys_exit_execve /@ex[tid]/ {
  delete(@ex[tid]); printf("E %d %llu %d\n", pid, nsecs, args->ret); }
tracepoint:syscalls:sys_enter_openat /@track[pid]/ {
  @op[tid] = args->filename; @fl[tid] = args->flags; }
tracepoint:syscalls:sys_exit_openat /@op[tid]/ {
  printf("O %d %llu %d %d %s\n", pid, nsecs, args->ret, @fl[tid], str(@op[tid]));
  delete(@op[tid]); delete(@fl[tid]); }
tracepoint:syscalls:sys_enter_connect /@track[pid]/ { @ca[tid] = args->uservaddr; }
tracepoint:syscalls:sys_exit_connect /@ca[tid]/ {
  printf("C %d %llu %d %r\n", pid, nsecs, args->ret, buf(@ca[tid], 28)); delete(@ca[tid]); }
tracepoint:sched:sched_process_exit /@track[pid] && pid == tid/ {
  printf("X %d %llu %d\n", pid, nsecs, curtask->exit_code); delete(@track[pid]); }
END { clear(@track); clear(@ex); clear(@op); clear(@fl); clear(@ca); }
"""


def check_available(bpftrace_path: str) -> str:
    """The bpftrace executable, or ``BackendUnavailableError`` saying what is missing."""
    path = shutil.which(bpftrace_path)
    if path is None:
        raise BackendUnavailableError(f"ebpf: {bpftrace_path!r} is not installed")
    if os.geteuid() != 0:
        raise BackendUnavailableError("ebpf: needs root (CAP_BPF/CAP_PERFMON) to load programs")
    if not os.path.isdir(f"{TRACEFS}/events/syscalls"):
        raise BackendUnavailableError(
            f"ebpf: syscall tracepoints not found under {TRACEFS} (tracefs not mounted: "
            f"`mount -t tracefs nodev {TRACEFS}`, or a kernel without CONFIG_FTRACE_SYSCALLS)"
        )
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        raise BackendUnavailableError("ebpf: kernel BTF (/sys/kernel/btf/vmlinux) is missing")
    return path


class EbpfBackend:
    """bpftrace on tracepoints, lineage-filtered in the kernel (see the module docstring)."""

    name = "ebpf"

    def __init__(self, bpftrace_path: str = "bpftrace") -> None:
        self._path = check_available(bpftrace_path)
        self.why = (
            "bpftrace on sched/task/syscall tracepoints: kernel-side lineage filter, execve/"
            "openat/connect/exit with no blind window (perf buffer may drop under load)"
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._ctx: HostContext | None = None
        self._lines: BpftraceInterpreter | None = None

    def follow(self, pid: int) -> str:
        """Not supported: why ``pid`` is not followed (the filter is fixed at start)."""
        return (
            f"ebpf: pid {pid} not followed: the kernel-side lineage filter is fixed when the "
            "probe is compiled"
        )

    def start(self, ctx: HostContext) -> None:
        """Start bpftrace and wait for READY (it compiles and attaches first)."""
        self._ctx = ctx
        if not ctx.lineage.root:
            raise BackendUnavailableError(
                "ebpf: the lineage filter is compiled into the probe at start, so it cannot "
                "follow processes learned later (a standing collector without root_pid)"
            )
        pids = ctx.snapshot_lineage()
        seed = " ".join(f"@track[{pid}] = 1;" for pid in pids)
        cmd = [self._path, "-B", "line", "-e", PROGRAM.replace("SEED", seed)]
        env = dict(os.environ, BPFTRACE_STRLEN=str(STRLEN))
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        assert self._proc.stdout is not None
        deadline = time.monotonic() + ctx.config.startup_timeout
        ready = _ReadyWaiter(self._proc.stdout)
        if not ready.wait(deadline - time.monotonic()):
            err = self._stop_process()
            raise BackendUnavailableError(
                f"ebpf: bpftrace failed or did not attach within {ctx.config.startup_timeout:g}s: "
                f"{err.strip().splitlines()[-1] if err.strip() else 'no output'}"
            )
        for name, on in (
            ("process", ctx.config.processes),
            ("file", ctx.config.files),
            ("network", ctx.config.network),
        ):
            detail = {
                "process": self.why,
                "file": "openat syscalls (successful opens with flags; no unlink/rename)",
                "network": "connect syscalls (no listen/accept; UDP sends without connect unseen)",
            }[name]
            brief = {
                "process": "kernel tracepoints",
                "file": "opens only (no deletes or renames)",
                "network": "connects only (no listens or accepts)",
            }[name]
            ctx.collection_state(
                name,
                CollectionState.AVAILABLE if on else CollectionState.NOT_REQUESTED,
                detail if on else f"{name}: false",
                brief if on else "",
            )
        self._lines = BpftraceInterpreter(ctx)
        self._thread = threading.Thread(target=self._run, name="host-ebpf", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            try:
                assert self._lines is not None
                self._lines.handle_line(raw.decode("utf-8", "replace").rstrip("\n"))
            except (ValueError, IndexError):
                if self._ctx is not None:
                    self._ctx.telemetry.count("ebpf.unparsed")

    def _stop_process(self) -> str:
        proc = self._proc
        if proc is None:
            return ""
        if proc.poll() is None:
            proc.send_signal(2)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        err = b""
        if proc.stderr is not None:
            err = proc.stderr.read()
            proc.stderr.close()
        return err.decode("utf-8", "replace")

    def stop(self) -> None:
        """Stop bpftrace (SIGINT), parse the rest of its output. Safe twice."""
        if self._proc is None:
            return
        self._stop_process()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._lines is not None:
            self._lines.gate.flush()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None


class _ReadyWaiter:
    """Reads lines until ``READY`` (bpftrace attached), in a helper thread with a timeout."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._event = threading.Event()
        self._ready = False

    def wait(self, timeout: float) -> bool:
        """True once READY was read; False on timeout or when bpftrace ended first (at once)."""
        thread = threading.Thread(target=self._read, daemon=True)
        thread.start()
        self._event.wait(max(0.0, timeout))
        return self._ready

    def _read(self) -> None:
        for raw in self._stream:
            if raw.strip() == b"READY":
                self._ready = True
                self._event.set()
                return
        self._event.set()  # bpftrace exited (it failed to compile or attach): do not wait on
