"""TCP connections that lived between two socket scans, recorded when the kernel destroys them.

The ``linux`` backend scans socket tables (:mod:`.netscan`), so a connection opened and closed
between two scans (a 1 ms loopback HTTP request) used to be missed. The kernel also *pushes* a
message for every TCP socket it destroys to ``NETLINK_SOCK_DIAG`` subscribers of the multicast
groups ``SKNLGRP_INET_TCP_DESTROY`` / ``SKNLGRP_INET6_TCP_DESTROY`` (needs ``CAP_NET_ADMIN``).
:class:`DestroyWatcher` turns those into records, honestly attributed:

* The message names the socket's addresses and ports and carries ``tcp_info``; a connection that
  never completed (refused, reset during the handshake) has no RTT sample and a zero peer port,
  and is dropped. Only established connections count.
* Direction comes from :mod:`.direction` (accepted sockets are never connects; undecidable ones
  are counted, not claimed).
* A socket a scan already attributed is skipped: one connection seen by both is one occurrence
  (the scanner and this watcher claim each 4-tuple once through :meth:`SocketScanner.claim`).
* Notifications cover every TCP socket of the network namespace: the whole machine for a
  standing collector, every other process for ``observe``. A destroyed connection is recorded
  only when a followed process is shown to own it by evidence: the socket inode a scan saw in a
  followed process's fd table, the 4-tuple of a connection a scan saw a followed process holding
  (:meth:`SocketScanner.holder`), or the eBPF socket tracer's report with a followed pid. It is
  then recorded with that pid. The message's inode is normally 0 (the socket is destroyed after
  its last descriptor closed), so a connection opened and closed between two scans that the
  tracer did not report has no such evidence: it is **not recorded** and is counted
  (``sockdiag.unattributed``); the network collection state says "unattributed machine
  connections: N" at stop. Never is it attributed to the session or a pid by guess.
* When the eBPF socket tracer (:mod:`.socktrace`) runs, it reports the same connection with
  its pid; the two reports are joined by 4-tuple (see :class:`DestroyWatcher`).

Notifications come from the collector's own network namespace: when the workload runs in another
one the watcher is not started and the network collection says why.
"""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass

from otel_bridge.model import AnyValue, CollectionState
from otel_bridge.receivers.host.direction import Direction
from otel_bridge.receivers.host.events import HostContext
from otel_bridge.receivers.host.netscan import SocketScanner
from otel_bridge.receivers.host.socktrace import ConnectTracer

NETLINK_SOCK_DIAG = 4
SKNLGRP_INET_TCP_DESTROY = 1
SKNLGRP_INET6_TCP_DESTROY = 3
SOCK_DIAG_BY_FAMILY = 20
INET_DIAG_INFO = 2
_NLMSGHDR = struct.Struct("=IHHII")
_DIAG_HEAD = struct.Struct("=BBBB")
_PORTS = struct.Struct(">HH")
_DIAG_TAIL = struct.Struct("=IIIIIIII")  # if, cookie[2], expires, rqueue, wqueue, uid, inode
_DIAG_MSG_SIZE = 72
_TCPI_RTT_OFFSET = 68
_RCVBUF = 4 * 1024 * 1024
TRACE_WAIT_S = 1.0
"""How long a destroyed connection waits for the socket tracer's report of it (the tracer's
output goes through bpftrace and a pipe, which a loaded machine can delay)."""


@dataclass(frozen=True, slots=True)
class Destroyed:
    """One destroyed TCP socket as the kernel reported it."""

    local_address: str
    local_port: int
    peer_address: str
    peer_port: int
    inode: int
    established: bool
    """True when the connection completed its handshake (``tcp_info`` has an RTT sample)."""


def _address(family: int, raw: bytes) -> str:
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    text = socket.inet_ntop(socket.AF_INET6, raw[:16])
    return text[len("::ffff:") :] if text.startswith("::ffff:") and "." in text else text


def _rtt(body: bytes) -> int:
    offset = _DIAG_MSG_SIZE
    while offset + 4 <= len(body):
        length, kind = struct.unpack_from("=HH", body, offset)
        if length < 4:
            break
        if kind == INET_DIAG_INFO and length >= 4 + _TCPI_RTT_OFFSET + 4:
            return int(struct.unpack_from("=I", body, offset + 4 + _TCPI_RTT_OFFSET)[0])
        offset += (length + 3) & ~3
    return 0


def parse_destroyed(data: bytes) -> list[Destroyed]:
    """The destroyed sockets in one ``NETLINK_SOCK_DIAG`` datagram."""
    out: list[Destroyed] = []
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length, kind = _NLMSGHDR.unpack_from(data, offset)[:2]
        if length < _NLMSGHDR.size:
            break
        body = data[offset + _NLMSGHDR.size : offset + length]
        offset += (length + 3) & ~3
        if kind != SOCK_DIAG_BY_FAMILY or len(body) < _DIAG_MSG_SIZE:
            continue
        family = _DIAG_HEAD.unpack_from(body, 0)[0]
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        sport, dport = _PORTS.unpack_from(body, 4)
        inode = _DIAG_TAIL.unpack_from(body, 40)[7]
        out.append(
            Destroyed(
                local_address=_address(family, body[8:24]),
                local_port=sport,
                peer_address=_address(family, body[24:40]),
                peer_port=dport,
                inode=inode,
                established=_rtt(body) > 0,
            )
        )
    return out


def open_destroy_socket() -> socket.socket:
    """A socket subscribed to TCP destroy notifications; ``OSError`` when refused."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
    try:
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, _RCVBUF)  # SO_RCVBUFFORCE (root)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        groups = (1 << (SKNLGRP_INET_TCP_DESTROY - 1)) | (1 << (SKNLGRP_INET6_TCP_DESTROY - 1))
        sock.bind((0, groups))
    except OSError:
        sock.close()
        raise
    return sock


def same_network_namespace(pid: int) -> bool | None:
    """True when ``pid`` shares the collector's network namespace; None when unknowable."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    except OSError:
        return None


class DestroyWatcher:
    """Records connections from destroy notifications (see the module docstring).

    With a :class:`.socktrace.ConnectTracer` attached (:attr:`tracer`), a destroyed connection
    first waits up to :data:`TRACE_WAIT_S` for the tracer's report of its 4-tuple (the two come
    through different channels, in either order): a connection the tracer recorded is one
    occurrence (counted ``sockdiag.joined``), another process's connection is dropped, and one
    the tracer never saw (opened before it attached, or lost) is recorded only with a scan's
    evidence of its owner, else counted as unattributed.
    """

    def __init__(self, ctx: HostContext, scanner: SocketScanner) -> None:
        self._ctx = ctx
        self._scanner = scanner
        self._sock = open_destroy_socket()
        self._stop_r, self._stop_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._pending: list[tuple[float, Destroyed]] = []
        self._pending_lock = threading.Lock()
        self.tracer: ConnectTracer | None = None
        self.recorded = 0
        self.unattributed = 0
        self.overruns = 0

    def start(self) -> None:
        """Start reading notifications."""
        self._thread = threading.Thread(target=self._run, name="host-sockdiag", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sock = self._sock
        sock.setblocking(False)
        while True:
            timeout = 0.02 if self._pending else 0.5
            ready, _, _ = select.select([sock.fileno(), self._stop_r], [], [], timeout)
            while self._recv_once(sock):
                pass
            self.settle(final=False)
            if self._stop_r in ready:
                return

    def _recv_once(self, sock: socket.socket) -> bool:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno == errno.ENOBUFS:
                self.overruns += 1
                self._ctx.telemetry.count("sockdiag.overruns")
                return True
            return False
        for gone in parse_destroyed(data):
            self.handle(gone)
        return True

    def handle(self, gone: Destroyed) -> None:
        """Record one destroyed socket if it is an established, initiated, unseen connection."""
        if not gone.established or not gone.peer_port:
            return
        tracer = self.tracer
        if tracer is not None and tracer.attached.is_set():
            with self._pending_lock:
                self._pending.append((time.monotonic() + TRACE_WAIT_S, gone))
            return
        self._resolve(gone)

    def settle(self, *, final: bool) -> None:
        """Decide the destroyed connections waiting for the tracer (all of them when ``final``)."""
        tracer = self.tracer
        now = time.monotonic()
        with self._pending_lock:
            pending, self._pending = self._pending, []
        keep: list[tuple[float, Destroyed]] = []
        for deadline, gone in pending:
            key = (gone.local_address, gone.local_port, gone.peer_address, gone.peer_port)
            owned = tracer.status(key) if tracer is not None else None
            if owned is None and not final and now < deadline:
                keep.append((deadline, gone))
                continue
            if owned is True:
                self._ctx.telemetry.count("sockdiag.joined")
            elif owned is None:
                self._resolve(gone)
            # owned False: another process's connection, as the tracer saw it: not recorded
        with self._pending_lock:
            self._pending[:0] = keep

    def _resolve(self, gone: Destroyed) -> None:
        """Record ``gone`` with the pid a scan saw owning it, else count it unattributed."""
        scanner = self._scanner
        args = ("tcp", gone.local_address, gone.local_port, gone.peer_address, gone.peer_port)
        key = (gone.local_address, gone.local_port, gone.peer_address, gone.peer_port)
        pid = scanner.holder(gone.inode, key)
        if scanner.claimed(key):
            return  # a scan or the socket tracer recorded it: one occurrence
        if pid is None:
            if scanner.rule.decide(*args) is not Direction.ACCEPTED:
                self.unattributed += 1  # whose it was is unknown: another process, as likely
                self._ctx.telemetry.count("sockdiag.unattributed")
            return
        direction = scanner.rule.decide(*args)
        if direction is Direction.UNKNOWN:
            scanner.refresh_listeners()  # a listener that still runs decides it
            direction = scanner.rule.decide(*args)
        accepted = direction is Direction.ACCEPTED
        if accepted and not self._ctx.config.network_accepted:
            return
        if direction is Direction.UNKNOWN:
            scanner.count_undecided(key)
            return
        if scanner.claim(key):  # else a scan or the socket tracer recorded it: one occurrence
            self._emit(gone, pid, "network.accept" if accepted else "network.connect")

    def _emit(self, gone: Destroyed, pid: int, name: str) -> None:
        ctx = self._ctx
        attrs: dict[str, AnyValue] = ctx.events.identity_attrs(pid)
        attrs["network.transport"] = "tcp"
        attrs["network.local.address"] = gone.local_address
        attrs["network.local.port"] = gone.local_port
        attrs["network.peer.address"] = gone.peer_address
        attrs["network.peer.port"] = gone.peer_port
        attrs["network.observed_at"] = "close"
        record = ctx.events.record(name, time.time_ns(), attrs, attribution="sampled_process")
        self.recorded += 1
        ctx.telemetry.count("sockdiag.connections")
        ctx.emit(record)

    def report_unattributed(self) -> None:
        """Add "unattributed machine connections: N" to the network collection state (when N>0)."""
        if not self.unattributed:
            return
        ctx = self._ctx
        reason = ctx.states.get("network", ("", ""))[1]
        note = (
            f"unattributed machine connections: {self.unattributed} (TCP connections closed "
            "between scans that no observed process was shown to own; not recorded)"
        )
        brief = ctx.briefs.get("network", "")
        short = f"{self.unattributed} closed connections not attributed"
        ctx.collection_state(
            "network",
            CollectionState.DEGRADED,
            f"{reason}; {note}" if reason else note,
            f"{brief}; {short}" if brief else short,
        )

    def stop_reading(self) -> None:
        """Read what is queued and stop the reader; what waits for the tracer stays. Safe twice."""
        if self._thread is not None:
            os.write(self._stop_w, b"x")
            self._thread.join()
            self._thread = None

    def stop(self) -> None:
        """Read what is queued, decide what waits, then stop. Safe twice."""
        self.stop_reading()
        self.settle(final=True)
        if self._stop_r >= 0:
            self.report_unattributed()
            self._sock.close()
            for fd in (self._stop_r, self._stop_w):
                os.close(fd)
            self._stop_r = self._stop_w = -1
