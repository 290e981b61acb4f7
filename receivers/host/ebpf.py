"""The ``ebpf`` backend: a bpftrace program on kernel tracepoints, filtered to the lineage.

The program keeps a map of tracked pids seeded with the root; ``task:task_newtask`` (a new task
whose ``clone_flags`` lack ``CLONE_THREAD``) adds each child *in the kernel*, before it runs, so
the lineage filter has no window. It prints one line per event:

* ``F parent child ns`` (fork), ``e pid ns path`` / ``E pid ns ret`` (execve enter/exit),
  ``X pid ns status`` (``sched_process_exit`` of a thread-group leader, wait status);
* ``O pid ns ret flags path`` (``openat``), ``C pid ns ret sockaddr`` (``connect``, the raw
  sockaddr bytes as bpftrace's ``%r``).

Timestamps are ``nsecs`` (CLOCK_MONOTONIC). Needs root, tracefs mounted at
``/sys/kernel/tracing`` with syscall tracepoints, and BTF for ``curtask``. Events are emitted
through a per-CPU perf buffer: if it overflows bpftrace prints ``Lost N events`` and the
collections become ``degraded``. bpftrace takes a few seconds to compile and attach;
``start`` waits for its ``READY`` line so nothing in the lineage runs unobserved.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from typing import IO

from otel_bridge.errors import BackendUnavailableError
from otel_bridge.model import AnyValue, CollectionState
from otel_bridge.receivers.host.events import SAMPLED, SYSCALL, HostContext, lookup_process
from otel_bridge.receivers.host.linux import exit_code_of
from otel_bridge.receivers.host.procfs import (
    ProcessInfo,
    descendants_of,
    monotonic_to_wall_ns,
    read_process,
)
from otel_bridge.receivers.host.strace_events import open_access, open_flags_text

TRACEFS = "/sys/kernel/tracing"

PROGRAM = r"""
BEGIN { @track[$1] = 1; printf("READY\n"); }
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

_ERRNO = {
    -4: "EINTR",
    -11: "EAGAIN",
    -13: "EACCES",
    -101: "ENETUNREACH",
    -110: "ETIMEDOUT",
    -111: "ECONNREFUSED",
    -113: "EHOSTUNREACH",
    -114: "EALREADY",
    -115: "EINPROGRESS",
}


def decode_r(text: str) -> bytes:
    """Bytes from bpftrace's ``%r`` rendering (``\\xHH`` escapes, printable chars literal)."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 3 < len(text) + 1 and text[i + 1] == "x":
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        elif text[i] == "\\" and i + 1 < len(text):
            out.append(ord(text[i + 1]))
            i += 2
        else:
            out.append(ord(text[i]) & 0xFF)
            i += 1
    return bytes(out)


def decode_sockaddr(raw: bytes) -> tuple[str, str, int] | None:
    """``(family, address, port)`` of a raw ``sockaddr_in``/``sockaddr_in6``."""
    if len(raw) < 8:
        return None
    family = int.from_bytes(raw[:2], "little")
    port = int.from_bytes(raw[2:4], "big")
    if family == socket.AF_INET:
        return "inet", socket.inet_ntop(socket.AF_INET, raw[4:8]), port
    if family == socket.AF_INET6 and len(raw) >= 24:
        return "inet6", socket.inet_ntop(socket.AF_INET6, raw[8:24]), port
    return None


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
        self._exe: dict[int, str] = {}
        self.lost = 0

    def start(self, ctx: HostContext) -> None:
        """Start bpftrace and wait for READY (it compiles and attaches first)."""
        self._ctx = ctx
        root = ctx.lineage.root
        now = time.time_ns()
        for pid in [root, *descendants_of(root)]:
            info = read_process(
                pid, ctx.redactor, capture_environment=ctx.config.capture_environment
            )
            if info is None:
                continue
            ctx.lineage.add(pid)
            ctx.events.remember(info)
            if ctx.config.processes:
                ctx.emit(ctx.events.process_event("process.start", info, now, attribution=SAMPLED))
        cmd = [self._path, "-B", "line", "-e", PROGRAM, str(root)]
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert self._proc.stdout is not None
        deadline = time.monotonic() + ctx.config.startup_timeout
        ready = _ReadyWaiter(self._proc.stdout)
        if not ready.wait(deadline - time.monotonic()):
            err = self._stop_process()
            raise BackendUnavailableError(
                f"ebpf: bpftrace did not attach within {ctx.config.startup_timeout:g}s: "
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
            ctx.collection_state(
                name,
                CollectionState.AVAILABLE if on else CollectionState.NOT_REQUESTED,
                detail if on else f"{name}: false",
            )
        self._thread = threading.Thread(target=self._run, name="host-ebpf", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            try:
                self.handle_line(raw.decode("utf-8", "replace").rstrip("\n"))
            except (ValueError, IndexError):
                if self._ctx is not None:
                    self._ctx.telemetry.count("receiver.host.ebpf.unparsed")

    def handle_line(self, line: str) -> None:
        """Interpret one line of the program's output."""
        ctx = self._ctx
        assert ctx is not None
        kind, _, rest = line.partition(" ")
        if kind == "Lost" or line.startswith("Lost "):
            self._lost(line)
            return
        parts = rest.split(" ", 4)
        if kind == "F":
            parent, child, ts = int(parts[0]), int(parts[1]), int(parts[2])
            ctx.lineage.add(child)
            info = lookup_process(ctx, child, event_monotonic_ns=ts)
            info.ppid = parent
            if ctx.config.processes:
                ctx.emit(
                    ctx.events.process_event(
                        "process.start", info, monotonic_to_wall_ns(ts), attribution=SYSCALL
                    )
                )
        elif kind == "e":
            self._exe[int(parts[0])] = rest.split(" ", 2)[2] if len(parts) > 2 else ""
        elif kind == "E":
            pid, ts, ret = int(parts[0]), int(parts[1]), int(parts[2])
            path = self._exe.pop(pid, "")
            if ret == 0:
                self._exec(pid, ts, path)
        elif kind == "X":
            pid, ts, status = int(parts[0]), int(parts[1]), int(parts[2])
            if ctx.config.processes:
                ctx.emit(
                    ctx.events.exit_event(
                        pid, monotonic_to_wall_ns(ts), exit_code_of(status), attribution=SYSCALL
                    )
                )
        elif kind == "O" and ctx.config.files:
            pid, ts, ret, flags = int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])
            if ret < 0:
                ctx.telemetry.count("receiver.host.ebpf.failed_opens")
                return
            path = parts[4] if len(parts) > 4 else ""
            if path and not os.path.isabs(path):
                known = ctx.events.processes.get(pid)
                if known is not None and known.cwd:
                    path = os.path.normpath(os.path.join(known.cwd, path))
            text = open_flags_text(flags)
            self._emit(
                "file.open",
                pid,
                ts,
                {"file.path": path, "file.open.flags": text, "file.access": open_access(text)},
            )
        elif kind == "C" and ctx.config.network:
            pid, ts, ret = int(parts[0]), int(parts[1]), int(parts[2])
            addr = decode_sockaddr(decode_r(rest.split(" ", 3)[3]))
            if addr is None:
                return
            attrs: dict[str, AnyValue] = {
                "network.transport": "tcp",
                "network.peer.address": addr[1],
                "network.peer.port": addr[2],
            }
            if ret == 0:
                self._emit("network.connect", pid, ts, attrs)
            else:
                errno = _ERRNO.get(ret, f"errno {-ret}")
                attrs["network.connect.result"] = "pending" if ret == -115 else "failed"
                attrs["error.type"] = errno
                self._emit("network.connect_attempt", pid, ts, attrs)

    def _exec(self, pid: int, ts: int, path: str) -> None:
        ctx = self._ctx
        assert ctx is not None
        fresh = read_process(pid, ctx.redactor, capture_environment=ctx.config.capture_environment)
        if fresh is None:
            base = lookup_process(ctx, pid, event_monotonic_ns=ts)
            fresh = ProcessInfo(
                pid=pid,
                start_ms=base.start_ms,
                ppid=base.ppid,
                approximate=base.approximate,
                exe=path,
                argv=[],
                cwd=base.cwd,
            )
        ctx.events.remember(fresh)
        if ctx.config.processes:
            ctx.emit(
                ctx.events.process_event(
                    "process.exec", fresh, monotonic_to_wall_ns(ts), attribution=SYSCALL
                )
            )

    def _emit(self, name: str, pid: int, ts: int, extra: dict[str, AnyValue]) -> None:
        ctx = self._ctx
        assert ctx is not None
        attrs = ctx.events.identity_attrs(pid)
        attrs.update(extra)
        ctx.emit(
            ctx.events.record(
                name, monotonic_to_wall_ns(ts), attrs, attribution=SYSCALL, causal=True
            )
        )

    def _lost(self, line: str) -> None:
        ctx = self._ctx
        assert ctx is not None
        self.lost += 1
        for name in ("process", "file", "network"):
            if ctx.states.get(name, ("",))[0] == CollectionState.AVAILABLE:
                ctx.collection_state(name, CollectionState.DEGRADED, f"perf buffer: {line}")

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
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None


class _ReadyWaiter:
    """Reads lines until ``READY`` (bpftrace attached), in a helper thread with a timeout."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._event = threading.Event()

    def wait(self, timeout: float) -> bool:
        thread = threading.Thread(target=self._read, daemon=True)
        thread.start()
        return self._event.wait(max(0.0, timeout))

    def _read(self) -> None:
        for raw in self._stream:
            if raw.strip() == b"READY":
                self._event.set()
                return
