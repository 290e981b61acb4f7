"""Turns parsed syscalls (strace) into OS-event records. Shared helpers serve the ebpf backend."""

from __future__ import annotations

import dataclasses
import os
import re
import time

from otel_bridge.identity import is_loopback, start_ms_from_ticks
from otel_bridge.model import AnyValue
from otel_bridge.receivers.host.events import SYSCALL, HostContext
from otel_bridge.receivers.host.netscan import read_tables
from otel_bridge.receivers.host.procfs import (
    ProcessInfo,
    approx_start_ms,
    read_process,
    read_stat,
    tgid_of,
)
from otel_bridge.receivers.host.starts import StartGate
from otel_bridge.receivers.host.strace_parse import (
    Syscall,
    annotated_path,
    exec_environment,
    fd_annotation,
    split_args,
    string_arg,
    strings,
)

_SIGNALS = {
    "SIGHUP": 1,
    "SIGINT": 2,
    "SIGQUIT": 3,
    "SIGABRT": 6,
    "SIGKILL": 9,
    "SIGSEGV": 11,
    "SIGPIPE": 13,
    "SIGALRM": 14,
    "SIGTERM": 15,
}
_PORT = re.compile(r"sin6?_port=htons\((\d+)\)")
_ADDR4 = re.compile(r'inet_addr\("([^"]+)"\)')
_ADDR6 = re.compile(r'inet_pton\(AF_INET6, "([^"]+)"')
_SUN_PATH = re.compile(r'sun_path="((?:[^"\\]|\\.)*)"')
_SOCK_ANNO = re.compile(
    r"^(?P<proto>TCPv6|UDPv6|TCP|UDP|UNIX(?:-STREAM|-DGRAM)?)(?::\[(?P<addr>.*)\])?"
)


_DIRFD_CALLS = frozenset({"openat", "openat2", "unlinkat", "renameat", "renameat2", "execveat"})
"""Calls whose path arguments are relative to a directory descriptor (``creat`` is not one)."""


def open_access(flags: str) -> str:
    """``read`` / ``write`` / ``read_write`` from symbolic open flags (``O_WRONLY|O_CREAT``)."""
    names = set(flags.split("|"))
    if "O_RDWR" in names:
        return "read_write"
    if "O_WRONLY" in names:
        return "write"
    return "read"


_O_NAMES = (
    (0o1, "O_WRONLY"),
    (0o2, "O_RDWR"),
    (0o100, "O_CREAT"),
    (0o200, "O_EXCL"),
    (0o1000, "O_TRUNC"),
    (0o2000, "O_APPEND"),
    (0o4000, "O_NONBLOCK"),
    (0o200000, "O_DIRECTORY"),
    (0o2000000, "O_CLOEXEC"),
)


def open_flags_text(flags: int) -> str:
    """Symbolic text of numeric open flags (x86-64 values), ``O_RDONLY`` when no access bit."""
    names = [name for bit, name in _O_NAMES if flags & bit]
    if not flags & 0o3:
        names.insert(0, "O_RDONLY")
    return "|".join(names)


def ip_address(text: str) -> str:
    """``text`` as the socket tables write it: an IPv4-mapped IPv6 address (``::ffff:1.2.3.4``,
    an IPv6 socket talking IPv4) as the IPv4 address, so that an endpoint has one identity
    whichever backend saw it (``netscan``, ``socktrace``, ``sockdiag`` do the same)."""
    return text[len("::ffff:") :] if text.startswith("::ffff:") and "." in text else text


def parse_sockaddr(text: str) -> tuple[str, str, int] | None:
    """``(transport family, address, port)`` from strace's sockaddr rendering."""
    if "AF_INET6" in text:
        addr, port = _ADDR6.search(text), _PORT.search(text)
        if addr and port:
            return "inet6", ip_address(addr.group(1)), int(port.group(1))
    elif "AF_INET" in text:
        addr, port = _ADDR4.search(text), _PORT.search(text)
        if addr and port:
            return "inet", addr.group(1), int(port.group(1))
    elif "AF_UNIX" in text or "AF_LOCAL" in text:
        path = _SUN_PATH.search(text)
        if path:
            return "unix", path.group(1), 0
    return None


class SyscallInterpreter:
    """Emits records for the syscalls of the lineage; keeps per-pid state (cwd, started)."""

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self._started: set[int] = set(ctx.lineage.snapshot())
        self.gate = StartGate(ctx, attribution=SYSCALL)
        """Holds each new child's start until its own image is known (:mod:`.starts`)."""
        self.failed_opens = 0
        self.failed_connects = 0
        self._threads: dict[int, int] = {}
        """Thread id -> its process id (thread group), for the threads that are not a
        process's first: ``strace -f`` names each line by the thread that made the call."""

    def handle(self, call: Syscall) -> None:
        """Interpret one syscall."""
        ctx = self.ctx
        tgid = self._threads.get(call.pid)
        if tgid is None and call.pid not in self._started:
            tgid = self._thread_group(call.pid)
        if tgid is not None:
            if call.name == "+exit":  # a thread ended, not its process
                del self._threads[call.pid]
                return
            call = dataclasses.replace(call, pid=tgid)
        if call.pid not in self._started:
            self._start(call.pid, call.time_ns, parent=None)
        self.gate.due()
        name = call.name
        if name == "+exit":
            self.gate.exited(call.pid)
            code = call.ret if call.ret is not None else -_SIGNALS.get(call.args, 0)
            if ctx.config.processes:
                ctx.emit(ctx.events.exit_event(call.pid, call.time_ns, code, attribution=SYSCALL))
            return
        if name in ("clone", "clone3", "fork", "vfork"):
            child = call.ret
            if child is None or child <= 0:
                return
            if "CLONE_THREAD" in call.args:
                self._threads[child] = call.pid
            elif child not in self._started:
                self._start(child, call.time_ns, parent=call.pid)
            return
        if name in ("execve", "execveat"):
            if call.ret == 0:
                self._exec(call)
            return
        if not ctx.config.files and name not in _NETWORK_CALLS:
            return
        if name in ("open", "openat", "openat2", "creat"):
            self._open(call)
        elif name in ("unlink", "unlinkat"):
            if call.ret == 0:
                self._file("file.delete", call, self._path_arg(call))
        elif name in ("rename", "renameat", "renameat2"):
            if call.ret == 0:
                self._rename(call)
        elif name == "connect" and ctx.config.network:
            self._connect(call)
        elif name == "listen" and ctx.config.network and call.ret == 0:
            self._listen(call)
        elif name in ("accept", "accept4") and ctx.config.network_accepted and ctx.config.network:
            self._accept(call)

    def running_threads(self, pids: list[int]) -> None:
        """Learn the threads ``pids`` run now (``strace -f -p`` attached to them too): one
        that ends without a traced call shows only its exit, when ``/proc`` no longer has it."""
        for pid in pids:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                if tid.isdigit() and int(tid) != pid:
                    self._threads[int(tid)] = pid

    def _thread_group(self, tid: int) -> int | None:
        """The process of ``tid`` when it is a thread other than its process's first, seen
        before the ``clone`` that made it (strace printed its line first); None for a process.
        A thread already gone when its first line is parsed (one that ended before the
        ``clone`` returned) cannot be told from a process and is taken for one."""
        tgid = tgid_of(tid)
        if tgid is None or tgid == tid:
            return None
        self._threads[tid] = tgid
        return tgid

    def _start(self, pid: int, time_ns: int, *, parent: int | None) -> None:
        """A new child: its identity now, its start once its own image is known."""
        ctx = self.ctx
        self._started.add(pid)
        stat = read_stat(pid)
        if stat is None:
            known = ctx.events.processes.get(pid)
            start_ms = approx_start_ms(_wall_to_mono(time_ns))
            info = ProcessInfo(pid=pid, start_ms=start_ms, ppid=parent or 0, approximate=True)
            if known is not None and parent is None:
                info = known
        else:
            info = ProcessInfo(pid=pid, start_ms=start_ms_from_ticks(stat[1]), ppid=stat[0])
        if parent is not None:
            info.ppid = parent
        self.gate.forked(info, time_ns)
        ctx.lineage.add(pid)

    def _exec(self, call: Syscall) -> None:
        """The traced argv is exact; executable, cwd and environment are read now if still ours."""
        ctx = self.ctx
        known = ctx.events.processes.get(call.pid)
        args = split_args(call.args)
        values = strings(call.args)
        exe = values[0] if values else ""
        if call.name == "execveat" and len(args) > 1:
            exe = string_arg(args[1]) or exe
        argv = strings(args[1 if call.name == "execve" else 2]) if len(args) > 2 else []
        fresh = read_process(
            call.pid, ctx.redactor, capture_environment=ctx.config.capture_environment
        )
        if fresh is not None and known is not None and fresh.start_ms != known.start_ms:
            fresh = None  # the pid already belongs to another process
        traceparent, env = self._exec_environment(call.name, args, fresh)
        info = ProcessInfo(
            pid=call.pid,
            start_ms=known.start_ms if known else (fresh.start_ms if fresh else 0),
            ppid=known.ppid if known else (fresh.ppid if fresh else 0),
            approximate=known.approximate if known else fresh is None,
            exe=os.path.realpath(exe) if os.path.isabs(exe) else (fresh.exe if fresh else exe),
            argv=ctx.redactor.argv(argv),
            cwd=fresh.cwd if fresh else (known.cwd if known else ""),
            traceparent=traceparent,
            env=env,
        )
        if not argv:
            self.gate.unknown_argv()
        ctx.events.remember(info)
        if ctx.config.processes:
            ctx.emit(
                ctx.events.process_event("process.exec", info, call.time_ns, attribution=SYSCALL)
            )
        self.gate.execed(call.pid)  # after the exec: a node is named by its first naming record

    def _exec_environment(
        self, name: str, args: list[str], fresh: ProcessInfo | None
    ) -> tuple[str, dict[str, str] | None]:
        """``TRACEPARENT`` and (if captured) the redacted environment the exec passed.

        The traced ``envp`` is exact and outlives the process; ``/proc/PID/environ`` (read now,
        in ``fresh``) is only a fallback when the trace shows no or a cut environment: a
        short-lived command has often exited before its exec line is parsed."""
        index = 2 if name == "execve" else 3  # execve(path, argv, envp), execveat(fd, path, ..)
        traced = exec_environment(args[index]) if index < len(args) else None
        env, complete = traced if traced is not None else ({}, False)
        traceparent = env.get("TRACEPARENT", "")
        if not traceparent and not complete:
            traceparent = fresh.traceparent if fresh else ""
        if not self.ctx.config.capture_environment:
            return traceparent, None
        if complete:
            return traceparent, self.ctx.redactor.env(env)
        return traceparent, fresh.env if fresh else None

    def _path_arg(self, call: Syscall, index: int = 0) -> str:
        args = split_args(call.args)
        if call.name in _DIRFD_CALLS:
            base = annotated_path(fd_annotation(args[index])) if index < len(args) else ""
            value = string_arg(args[index + 1]) if index + 1 < len(args) else None
        else:
            base = ""
            value = string_arg(args[index]) if index < len(args) else None
        if value is None:
            return ""
        if not os.path.isabs(value):
            info = self.ctx.events.processes.get(call.pid)
            base = base or (info.cwd if info else "")
            value = os.path.join(base, value) if base else value
        return os.path.normpath(value)

    def _open(self, call: Syscall) -> None:
        if call.ret is None or call.ret < 0:
            self.failed_opens += 1
            self.ctx.telemetry.count("strace.failed_opens")
            return
        args = split_args(call.args)
        if call.name == "creat":
            flags = "O_WRONLY|O_CREAT|O_TRUNC"
        elif call.name == "open":
            flags = args[1] if len(args) > 1 else "O_RDONLY"
        elif call.name == "openat2":
            found = re.search(r"flags=([A-Z_|0-9x]+)", call.args)
            flags = found.group(1) if found else "O_RDONLY"
        else:
            flags = args[2] if len(args) > 2 else "O_RDONLY"
        path = annotated_path(call.ret_annotation) if call.ret_annotation else ""
        path = path or self._path_arg(call)
        attrs: dict[str, AnyValue] = {
            "file.path": path,
            "file.open.flags": flags,
            "file.access": open_access(flags),
        }
        self._emit("file.open", call, attrs)

    def _rename(self, call: Syscall) -> None:
        old = self._path_arg(call, 0)
        new = self._path_arg(call, 2 if call.name != "rename" else 1)
        self._emit("file.rename", call, {"file.path": old, "file.new_path": new})

    def _file(self, name: str, call: Syscall, path: str) -> None:
        if path:
            self._emit(name, call, {"file.path": path})

    def _connect(self, call: Syscall) -> None:
        args = split_args(call.args)
        addr = parse_sockaddr(args[1]) if len(args) > 1 else None
        if addr is None:
            return
        family, address, port = addr
        anno = _SOCK_ANNO.match(fd_annotation(args[0]))
        proto = anno.group("proto") if anno else ""
        transport = "unix" if family == "unix" else "udp" if proto.startswith("UDP") else "tcp"
        attrs: dict[str, AnyValue] = {
            "network.transport": transport,
            "network.peer.address": address,
            "network.peer.port": port,
        }
        pending = call.errno == "EINPROGRESS"  # a non-blocking connect: its port is bound
        # The local end joins a gateway's accept (network_accepted) and, for a loopback peer,
        # the transport peer of an OTLP request to its sender (correlate's transport_peer).
        if (
            (call.ret == 0 or pending)
            and anno is not None
            and (self.ctx.config.network_accepted or is_loopback(address))
        ):
            attrs.update(_local_end(call.pid, anno.group("addr") or ""))
        if call.ret == 0:
            self._emit("network.connect", call, attrs)
            return
        self.failed_connects += 1
        attrs["network.connect.result"] = "pending" if pending else "failed"
        attrs["error.type"] = call.errno or "unknown"
        self._emit("network.connect_attempt", call, attrs)

    def _accept(self, call: Syscall) -> None:
        """``accept4(...) = 4<TCP:[local->peer]>``: both ends from strace's annotation."""
        if call.ret is None or call.ret < 0:
            return
        anno = _SOCK_ANNO.match(call.ret_annotation)
        if anno is None or "->" not in (anno.group("addr") or ""):
            return
        local, _, peer = (anno.group("addr") or "").partition("->")
        ends = [_split_hostport(local), _split_hostport(peer)]
        if ends[0] is None or ends[1] is None:
            return
        attrs: dict[str, AnyValue] = {
            "network.transport": "udp" if anno.group("proto").startswith("UDP") else "tcp",
            "network.local.address": ends[0][0],
            "network.local.port": ends[0][1],
            "network.peer.address": ends[1][0],
            "network.peer.port": ends[1][1],
        }
        self._emit("network.accept", call, attrs)

    def _listen(self, call: Syscall) -> None:
        args = split_args(call.args)
        anno = _SOCK_ANNO.match(fd_annotation(args[0])) if args else None
        if anno is None or not anno.group("addr"):
            return
        host, _, port = anno.group("addr").rpartition(":")
        if not port.isdigit():
            return
        attrs: dict[str, AnyValue] = {
            "network.transport": "udp" if anno.group("proto").startswith("UDP") else "tcp",
            "network.local.address": ip_address(host.strip("[]")),
            "network.local.port": int(port),
        }
        self._emit("network.listen", call, attrs)

    def _emit(self, name: str, call: Syscall, extra: dict[str, AnyValue]) -> None:
        ctx = self.ctx
        attrs = ctx.events.identity_attrs(call.pid)
        attrs.update(extra)
        ctx.emit(ctx.events.record(name, call.time_ns, attrs, attribution=SYSCALL, causal=True))


_NETWORK_CALLS = frozenset({"connect", "listen", "accept", "accept4"})


def _split_hostport(text: str) -> tuple[str, int] | None:
    host, _, port = text.rpartition(":")
    return (ip_address(host.strip("[]")), int(port)) if host and port.isdigit() else None


def _local_end(pid: int, inode_text: str) -> dict[str, AnyValue]:
    """The local address and port of the socket with inode ``inode_text`` (strace names an
    unbound socket by its inode), read from ``pid``'s socket tables now; nothing when the socket
    is already gone."""
    if not inode_text.isdigit():
        return {}
    row = read_tables(pid).get(int(inode_text))
    if row is None or not row[2]:
        return {}
    return {"network.local.address": row[1], "network.local.port": row[2]}


def _wall_to_mono(wall_ns: int) -> int:
    return wall_ns - (time.time_ns() - time.monotonic_ns())
