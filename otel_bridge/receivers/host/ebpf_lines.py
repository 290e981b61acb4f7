"""Interpretation of the ebpf backend's bpftrace output lines (see :mod:`.ebpf`)."""

from __future__ import annotations

import os
import socket

from otel_bridge.model import AnyValue, CollectionState
from otel_bridge.receivers.host.events import SYSCALL, HostContext
from otel_bridge.receivers.host.linux import exit_code_of, fork_identity
from otel_bridge.receivers.host.procfs import monotonic_to_wall_ns
from otel_bridge.receivers.host.starts import StartGate
from otel_bridge.receivers.host.strace_events import ip_address, open_access, open_flags_text

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
        return "inet6", ip_address(socket.inet_ntop(socket.AF_INET6, raw[8:24])), port
    return None


class BpftraceInterpreter:
    """Turns the program's lines into OS-event records; keeps pending execve paths."""

    def __init__(self, ctx: HostContext) -> None:
        self.ctx = ctx
        self._exe: dict[int, str] = {}
        self.gate = StartGate(ctx, attribution=SYSCALL)
        """Holds each new child's start until its own image is known (:mod:`.starts`)."""
        self.lost = 0

    def handle_line(self, line: str) -> None:
        """Interpret one line of the program's output."""
        ctx = self.ctx
        kind, _, rest = line.partition(" ")
        if kind == "Lost" or line.startswith("Lost "):
            self._lost(line)
            return
        parts = rest.split(" ", 4)
        self.gate.due()
        if kind == "F":
            parent, child, ts = int(parts[0]), int(parts[1]), int(parts[2])
            self.gate.forked(fork_identity(child, parent, ts), monotonic_to_wall_ns(ts))
            ctx.lineage.add(child)
        elif kind == "e":
            self._exe[int(parts[0])] = rest.split(" ", 2)[2] if len(parts) > 2 else ""
        elif kind == "E":
            pid, ts, ret = int(parts[0]), int(parts[1]), int(parts[2])
            path = self._exe.pop(pid, "")
            if ret == 0:
                self._exec(pid, ts, path)
        elif kind == "X":
            pid, ts, status = int(parts[0]), int(parts[1]), int(parts[2])
            self.gate.exited(pid)
            if ctx.config.processes:
                ctx.emit(
                    ctx.events.exit_event(
                        pid, monotonic_to_wall_ns(ts), exit_code_of(status), attribution=SYSCALL
                    )
                )
        elif kind == "O" and ctx.config.files:
            pid, ts, ret, flags = int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3])
            if ret < 0:
                ctx.telemetry.count("ebpf.failed_opens")
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
        """The image read now if it still belongs to ``pid``'s identity, else argv unknown."""
        ctx = self.ctx
        info = self.gate.exec_image(pid, ctx.events.processes.get(pid))
        if not info.exe and path:
            info.exe = path  # the traced filename: exact even when the process is gone
        ctx.events.remember(info)
        if ctx.config.processes:
            ctx.emit(
                ctx.events.process_event(
                    "process.exec", info, monotonic_to_wall_ns(ts), attribution=SYSCALL
                )
            )
        self.gate.execed(pid)  # after the exec: a node is named by its first naming record

    def _emit(self, name: str, pid: int, ts: int, extra: dict[str, AnyValue]) -> None:
        ctx = self.ctx
        attrs = ctx.events.identity_attrs(pid)
        attrs.update(extra)
        ctx.emit(
            ctx.events.record(
                name, monotonic_to_wall_ns(ts), attrs, attribution=SYSCALL, causal=True
            )
        )

    def _lost(self, line: str) -> None:
        ctx = self.ctx
        self.lost += 1
        for name in ("process", "file", "network"):
            if ctx.states.get(name, ("",))[0] == CollectionState.AVAILABLE:
                ctx.collection_state(
                    name,
                    CollectionState.DEGRADED,
                    f"perf buffer: {line}",
                    f"{ctx.briefs.get(name, '')}; events lost (perf buffer full)".lstrip("; "),
                )
