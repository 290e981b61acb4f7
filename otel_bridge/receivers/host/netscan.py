"""Socket scans without tracing: match the lineage's socket inodes to the kernel socket tables.

Each scan reads the TCP/UDP tables of the workload's network namespace
(``/proc/<root>/net/{tcp,tcp6,udp,udp6}``) and the ``socket:[inode]`` links in each tracked
process's ``/proc/<pid>/fd``. A socket belongs to the process holding its inode. TCP
``ESTABLISHED`` sockets that this end initiated become ``network.connect`` (the direction is
decided by :mod:`.direction`, which does not need the listener to still exist: an accepted socket
is never an outbound connect, and a socket of undecidable direction is counted, not claimed),
``SYN_SENT`` becomes ``network.connect_attempt`` (``pending``), ``LISTEN`` becomes
``network.listen``; a UDP socket with a peer becomes a ``udp`` connect. With
``network_accepted`` an accepted TCP socket becomes ``network.accept`` (both ends' addresses).

This is sampling (attribution ``sampled_process``): a socket opened and closed between two
scans is missed. Scans run every ``network_poll_interval`` and immediately on every
fork/exec/exit event and follow; while no live process is followed the scanner sleeps until one
is (a standing collector that follows nothing costs no scans). The first scan of a process
followed while it ran (:meth:`SocketScanner.followed`) records what it holds as found then
(``network.observed_at=attach``), as :func:`record_held_sockets` does for ``strace``: opened
before that scan, when is unknown.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

from otel_bridge.model import AnyValue, CollectionState
from otel_bridge.receivers.host.direction import (
    Direction,
    DirectionRule,
    undecided_brief,
    undecided_note,
)
from otel_bridge.receivers.host.events import SAMPLED, HostContext

_TCP_ESTABLISHED = "01"
_TCP_SYN_SENT = "02"
_TCP_LISTEN = "0A"
_IDLE_S = 1.0
"""Seconds between the scanner's wake-ups while no live process is followed (it is asked for a
scan as soon as one is)."""


def decode_address(hex_addr: str) -> tuple[str, int]:
    """``("127.0.0.1", 8080)`` from a ``/proc/net/tcp`` ``0100007F:1F90`` field."""
    addr, port = hex_addr.split(":")
    raw = bytes.fromhex(addr)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        words = struct.unpack("<4I", raw)
        ip = socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *words))
        if ip.startswith("::ffff:") and "." in ip:
            ip = ip[len("::ffff:") :]
    return ip, int(port, 16)


SocketRow = tuple[str, str, int, str, int, str]
"""(transport, local address, local port, peer address, peer port, state)."""


def read_tables(pid: int) -> dict[int, SocketRow]:
    """Every TCP/UDP socket of ``pid``'s network namespace, by inode."""
    out: dict[int, SocketRow] = {}
    for name, transport in (("tcp", "tcp"), ("tcp6", "tcp"), ("udp", "udp"), ("udp6", "udp")):
        try:
            with open(f"/proc/{pid}/net/{name}", encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10:
                continue
            laddr, lport = decode_address(parts[1])
            raddr, rport = decode_address(parts[2])
            out[int(parts[9])] = (transport, laddr, lport, raddr, rport, parts[3])
    return out


def socket_inodes(pid: int) -> list[int]:
    """Inodes of the sockets ``pid`` holds open."""
    out: list[int] = []
    base = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(base)
    except OSError:
        return out
    for fd in fds:
        try:
            target = os.readlink(f"{base}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.append(int(target[8:-1]))
    return out


FOUND_AT_ATTACH = "attach"
"""``network.observed_at`` of a socket a process already held when a backend began observing it
(:func:`record_held_sockets`): the record's time is when it was found, not when it was opened."""
FOUND_BY_PROCFS = "procfs"
"""``network.found_by`` of such a socket: its inode, read from ``/proc/<pid>/fd``, found in
``/proc/<pid>/net/{tcp,tcp6,udp,udp6}`` (the process's network namespace)."""


def record_held_sockets(ctx: HostContext, pids: list[int]) -> int:
    """Record the TCP and UDP sockets ``pids`` hold now, found when a backend began observing
    them (``strace`` attaching to a running process): it never saw them being opened.

    Each socket is one record with attribution ``sampled_process``, no causal claim, the time of
    this read as its time, ``network.observed_at=attach``, ``network.found_by=procfs`` and its
    protocol as ``network.transport`` (``tcp`` or ``udp``). TCP: an established socket this end
    initiated is a ``network.connect``, one it accepted a ``network.accept`` (only with
    ``network_accepted``), ``SYN_SENT`` a pending ``network.connect_attempt`` and ``LISTEN`` a
    ``network.listen``; the direction of an established socket is decided by :mod:`.direction`
    from this table's listeners, and one it cannot decide is counted
    (``network.direction_unknown``), not recorded. UDP (:func:`_held_udp_event`): a connected
    socket (``connect()`` gave it a peer) is a ``network.connect`` with both ends, an
    unconnected one bound to a port a ``network.listen`` with its local end only (what arrives
    at that port is delivered to it), one bound to no port nothing. Returns the number of
    records. A process with no socket costs one ``/proc/<pid>/fd`` listing."""
    held = {inode: pid for pid in pids for inode in socket_inodes(pid)}
    if not held:
        return 0
    table = read_tables(next(iter(held.values())))
    rule = DirectionRule()
    for listener in table.values():
        if listener[0] == "tcp" and listener[5] == _TCP_LISTEN:
            rule.saw_listener("tcp", listener[2])
    now = time.time_ns()
    recorded = 0
    for inode, pid in held.items():
        row = table.get(inode)
        if row is None:
            continue
        name = _held_event(ctx, rule, row) if row[0] == "tcp" else _held_udp_event(row)
        if name is None:
            continue
        attrs = ctx.events.identity_attrs(pid)
        attrs.update(_socket_attrs(name, row))
        attrs["network.observed_at"] = FOUND_AT_ATTACH
        attrs["network.found_by"] = FOUND_BY_PROCFS
        ctx.emit(ctx.events.record(name, now, attrs, attribution=SAMPLED))
        recorded += 1
    if recorded:
        ctx.telemetry.count("network.held_at_attach", recorded)
    return recorded


def _held_event(ctx: HostContext, rule: DirectionRule, row: SocketRow) -> str | None:
    """The event a TCP socket found held at attach is recorded as (None: not recorded)."""
    _, laddr, lport, raddr, rport, state = row
    if state == _TCP_LISTEN:
        return "network.listen"
    if state == _TCP_SYN_SENT:
        return "network.connect_attempt"
    if state != _TCP_ESTABLISHED:
        return None  # closing: the connection is ending, nothing to claim
    direction = rule.decide("tcp", laddr, lport, raddr, rport)
    if direction is Direction.UNKNOWN:
        ctx.telemetry.count("network.direction_unknown")
        return None
    if direction is Direction.ACCEPTED:
        return "network.accept" if ctx.config.network_accepted else None
    return "network.connect"


def _held_udp_event(row: SocketRow) -> str | None:
    """The event a UDP socket found held at attach is recorded as (None: not recorded). A UDP
    socket has no connection: ``connect()`` only fixes its peer (the kernel's table then shows
    the peer's address and port, state ``01``), and it is a ``network.connect`` to that peer;
    an unconnected socket shows peer port 0 and is a ``network.listen`` on its local port (the
    datagrams sent to it there are delivered to it), or nothing when it has no port yet."""
    _, _, lport, _, rport, _ = row
    if rport:
        return "network.connect"
    return "network.listen" if lport else None


def _socket_attrs(name: str, row: SocketRow) -> dict[str, AnyValue]:
    """The network attributes of a socket record ``name`` for table row ``row``."""
    transport, laddr, lport, raddr, rport, _ = row
    attrs: dict[str, AnyValue] = {
        "network.transport": transport,
        "network.local.address": laddr,
        "network.local.port": lport,
    }
    if name != "network.listen":
        attrs["network.peer.address"] = raddr
        attrs["network.peer.port"] = rport
    if name == "network.connect_attempt":
        attrs["network.connect.result"] = "pending"
        attrs["error.type"] = "EINPROGRESS"
    return attrs


class SocketScanner:
    """Periodic and on-demand socket scans of the lineage (see the module docstring)."""

    def __init__(
        self, ctx: HostContext, *, attribution: str, rule: DirectionRule | None = None
    ) -> None:
        self._ctx = ctx
        self._attribution = attribution
        self.rule = rule if rule is not None else DirectionRule()
        self._seen: set[tuple[int, int, str]] = set()
        self._undecided: set[object] = set()
        self._claimed: set[tuple[str, int, str, int]] = set()
        """(local address, local port, peer address, peer port) of every established socket
        already attributed (by a scan or a destroy notification): each is recorded once."""
        self._fresh: set[int] = set()
        """Pids followed whose sockets no scan has read yet: what their first scan records was
        held when they were followed (``network.observed_at=attach``, :meth:`followed`)."""
        self.inode_pids: dict[int, int] = {}
        """Socket inode -> the lineage pid that held it, as last scanned."""
        self._tuple_pids: dict[tuple[str, int, str, int], int] = {}
        """TCP 4-tuple -> the lineage pid a scan saw holding it (in any state), until the
        connection's destroy notification asks for it (:meth:`holder`)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.scans = 0
        self.wakeups = 0
        """Times the scanner thread woke (asked, or its interval passed)."""
        self.interval = 0.01

    def start(self, interval: float, note: str = "", tracer: str = "") -> None:
        """Report the state (with ``note`` on what complements the scans; ``tracer``: the
        socket tracer's words for the state's brief) and start scanning."""
        self.interval = interval
        self._ctx.collection_state(
            "network", CollectionState.DEGRADED, self.reason(note), self.brief(tracer)
        )
        self._thread = threading.Thread(
            target=self._run, args=(interval,), name="host-netscan", daemon=True
        )
        self._thread.start()

    def brief(self, tracer: str = "") -> str:
        """The network collection's reason in a few words: what traces connects (``tracer``,
        the socket tracer's words; ``""``: none), what the scans leave unseen."""
        every = f"{self.interval * 1000:g}ms"
        if not tracer:
            return f"sockets sampled every {every}: short-lived connections can be missed"
        return f"{tracer}; other sockets sampled every {every}: short-lived ones can be missed"

    def reason(self, note: str = "") -> str:
        """The network collection's reason: the scans, then ``note`` on what complements them."""
        reason = f"socket-table scans every {self.interval * 1000:g}ms and on each fork/exec/exit: "
        return reason + (note or "a socket opened and closed between scans is missed")

    def followed(self, pids: list[int]) -> None:
        """``pids`` were just followed (running, unobserved before): the sockets their next
        scan finds are recorded as found then, not as opened then."""
        with self._lock:
            self._fresh.update(pids)

    def scan_now(self) -> None:
        """Ask the scanner thread for an immediate scan."""
        self._wake.set()

    def _run(self, interval: float) -> None:
        while not self._stop.is_set():
            # nothing live to scan (a standing collector that follows nothing yet): sleep until
            # asked (a follow, a fork, exec or exit asks), checking at most every _IDLE_S
            idle = not self._ctx.lineage.live()
            self._wake.wait(_IDLE_S if idle else interval)
            self._wake.clear()
            self.wakeups += 1
            self.scan()

    def scan(self) -> None:
        """One scan of every tracked process."""
        ctx = self._ctx
        pids = ctx.lineage.live()  # an exited process holds no descriptor: not read
        if not pids:
            return
        with self._lock:
            fresh = self._fresh.intersection(pids)
            self._fresh -= fresh
        holders: dict[int, int] = {}
        for pid in pids:
            for inode in socket_inodes(pid):
                holders.setdefault(inode, pid)
        if not holders:
            return
        table = self._table(pids)
        self.scans += 1
        now = time.time_ns()
        for inode, pid in holders.items():
            row = table.get(inode)
            if row is None:
                continue
            self.inode_pids[inode] = pid
            if row[0] == "tcp" and row[4]:
                self.saw_holder((row[1], row[2], row[3], row[4]), pid)
            self._classify(pid, inode, row, now, held=pid in fresh)

    def _table(self, pids: list[int]) -> dict[int, SocketRow]:
        """The namespace's socket table (through the first readable pid); learns listeners."""
        table: dict[int, SocketRow] = {}
        for pid in pids:
            table = read_tables(pid)
            if table:
                break
        for listener in table.values():
            if listener[5] == _TCP_LISTEN:
                self.rule.saw_listener(listener[0], listener[2])
        return table

    def refresh_listeners(self) -> None:
        """Read the socket table once only to learn the listening ports."""
        self._table([*self._ctx.lineage.live(), os.getpid()])

    @property
    def undecided(self) -> int:
        """Established TCP sockets whose direction could not be decided (none was claimed)."""
        return len(self._undecided)

    def _classify(self, pid: int, inode: int, row: SocketRow, now: int, *, held: bool) -> None:
        transport, laddr, lport, raddr, rport, state = row
        if transport == "tcp" and state == _TCP_LISTEN:
            name = "network.listen"
        elif transport == "tcp" and state == _TCP_ESTABLISHED:
            direction = self.rule.decide(transport, laddr, lport, raddr, rport)
            if direction is Direction.ACCEPTED and not self._ctx.config.network_accepted:
                return  # accepted from a listener: not this process's connect
            if direction is Direction.UNKNOWN:
                self.count_undecided(inode)
                return
            if not self.claim((laddr, lport, raddr, rport)):
                return  # attributed before (a scan, the socket tracer, a destroy notification)
            name = "network.accept" if direction is Direction.ACCEPTED else "network.connect"
        elif transport == "tcp" and state == _TCP_SYN_SENT:
            name = "network.connect_attempt"
        elif transport == "udp" and rport:
            name = "network.connect"
        else:
            return
        with self._lock:
            key = (pid, inode, name)
            if key in self._seen:
                return
            self._seen.add(key)
        ctx = self._ctx
        attrs: dict[str, AnyValue] = ctx.events.identity_attrs(pid)
        attrs.update(_socket_attrs(name, row))
        if held:
            attrs["network.observed_at"] = FOUND_AT_ATTACH
            attrs["network.found_by"] = FOUND_BY_PROCFS
        ctx.emit(ctx.events.record(name, now, attrs, attribution=self._attribution))

    def saw_holder(self, key: tuple[str, int, str, int], pid: int) -> None:
        """Remember that lineage process ``pid`` was seen holding the TCP connection ``key``."""
        with self._lock:
            self._tuple_pids[key] = pid

    def holder(self, inode: int, key: tuple[str, int, str, int]) -> int | None:
        """The lineage pid a scan saw holding the destroyed socket ``inode`` / ``key``, or None.

        This is the only evidence a destroy notification has of its owner: the inode a followed
        process held (the kernel usually reports 0 once the last descriptor is closed) or the
        4-tuple of a connection a followed process was seen holding (connecting, say). The
        4-tuple is forgotten once asked for: a later connection reusing it is not inferred.
        """
        with self._lock:
            by_tuple = self._tuple_pids.pop(key, None)
        by_inode = self.inode_pids.get(inode) if inode else None
        return by_inode if by_inode is not None else by_tuple

    def claimed(self, key: tuple[str, int, str, int]) -> bool:
        """True when the established connection ``key`` was already attributed."""
        with self._lock:
            return key in self._claimed

    def claim(self, key: tuple[str, int, str, int]) -> bool:
        """True the first time the established connection ``key`` is attributed."""
        with self._lock:
            if key in self._claimed:
                return False
            self._claimed.add(key)
            return True

    def count_undecided(self, socket_key: object) -> None:
        """Count one socket (inode or 4-tuple) whose direction could not be decided."""
        with self._lock:
            if socket_key in self._undecided:
                return
            self._undecided.add(socket_key)
        self._ctx.telemetry.count("network.direction_unknown")

    def stop(self) -> None:
        """One last scan, then stop. Safe twice."""
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        self._thread.join()
        self._thread = None
        self.scan()
        if self._undecided:
            reason = self._ctx.states.get("network", ("", ""))[1]
            note = undecided_note(len(self._undecided))
            brief = self._ctx.briefs.get("network", "")
            short = undecided_brief(len(self._undecided))
            self._ctx.collection_state(
                "network",
                CollectionState.DEGRADED,
                f"{reason}; {note}" if reason else note,
                f"{brief}; {short}" if brief else short,
            )
