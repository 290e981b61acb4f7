"""The ``linux`` backend: kernel-pushed process events, fanotify file events, socket scans.

* **Processes**: the netlink process connector (``NETLINK_CONNECTOR``, ``CN_IDX_PROC``,
  ``PROC_CN_MCAST_LISTEN``). The kernel pushes a fork, exec and exit event for every process;
  the reader keeps those of the lineage (a fork whose parent is tracked adds the child *before*
  the child can run, so there is no blind window). The child's identity is read from
  ``/proc/<pid>/stat`` at the fork (a process already gone gets an approximate identity, see
  :mod:`procfs`); its image is what it exec'd, read at the exec event and checked against that
  identity (:mod:`starts`): never the parent's image it carries until exec, and when the exec'd
  argv cannot be read any more the record says nothing about it (``argv_unknown`` is counted).
  The reader thread runs at real-time priority when allowed and the interpreter's switch
  interval is shortened while the backend runs, so the read comes before a short child exits.
  If the socket buffer overflows (``ENOBUFS``) events were lost: the process collection becomes
  ``degraded`` and the loss is counted.
* **Files**: fanotify (:mod:`fanotify`), kernel-attributed to the accessing pid.
* **Network**: the lineage's socket inodes are matched against the kernel's socket tables
  (:mod:`netscan`) on every fork/exec/exit and every ``network_poll_interval``. The socket
  tracer adds every TCP connect with its exact pid from the moment it attached: perf
  tracepoint events (:mod:`perftrace`, attached within ``start``), else bpftrace
  (:mod:`socktrace`, started beside the workload, never awaited). A TCP
  connection opened and closed between two scans that the tracer did not report (before it
  attached, or without it) is reported when the kernel destroys it (sock_diag destroy
  notifications, :mod:`sockdiag`) for every process of the namespace: it is recorded only with
  a scan's evidence that a lineage process owned it (its inode or 4-tuple), else counted as an
  unattributed machine connection and not recorded. UDP and other sockets that live between
  two scans are missed.

Needs root (``CAP_NET_ADMIN`` for the connector, ``CAP_SYS_ADMIN`` for fanotify).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

from otel_bridge.arming import (
    CN_IDX_PROC,
    CN_VAL_PROC,
    NETLINK_CONNECTOR,
    NLMSG_DONE,
    PROC_CN_MCAST_LISTEN,
    ArmedHost,
    open_proc_connector,
    subscribe_message,
)
from otel_bridge.errors import BackendUnavailableError
from otel_bridge.identity import start_ms_from_ticks
from otel_bridge.model import CollectionState
from otel_bridge.perfring import ArmedRings
from otel_bridge.receivers.host.events import SAMPLED, SYSCALL, HostContext
from otel_bridge.receivers.host.execreader import SAME_START_MS, ExecReader
from otel_bridge.receivers.host.fanotify import FanotifyWatcher
from otel_bridge.receivers.host.netscan import SocketScanner
from otel_bridge.receivers.host.perftrace import PerfSocketTracer
from otel_bridge.receivers.host.procfs import (
    ProcessInfo,
    approx_start_ms,
    descendants_of,
    monotonic_to_wall_ns,
    read_stat,
)
from otel_bridge.receivers.host.sockdiag import DestroyWatcher, same_network_namespace
from otel_bridge.receivers.host.socktrace import (
    SAMPLED_ONLY,
    ConnectTracer,
    Owner,
    SocketTracer,
)
from otel_bridge.receivers.host.starts import StartGate

__all__ = [
    "CN_IDX_PROC",
    "CN_VAL_PROC",
    "NETLINK_CONNECTOR",
    "NLMSG_DONE",
    "PROCESS_FILTER",
    "PROC_CN_MCAST_LISTEN",
    "LinuxBackend",
    "attach_process_filter",
    "open_proc_connector",
    "parse_messages",
    "retire_now",
    "subscribe_message",
]

PROC_CN_MCAST_IGNORE = 2
PROC_EVENT_NONE = 0
PROC_EVENT_FORK = 0x1
PROC_EVENT_EXEC = 0x2
PROC_EVENT_EXIT = 0x80000000

_NLMSGHDR = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
_EVENT_HEAD = struct.Struct("=IIQ")
_FORK = struct.Struct("=IIII")
_EXEC = struct.Struct("=II")
_EXIT = struct.Struct("=IIII")
_SWITCH_INTERVAL_S = 0.0005
"""The interpreter's thread switch interval while the backend runs (Python's default is 5 ms).

The event reader needs the GIL to read an exec'd image, and a 5 ms child is gone by the time a
busy thread (fanotify, the socket scans, the pipeline) gives the GIL up at the default interval:
measured with three concurrent receivers under CPU load, exact argv rose from 8-29/30 to
28-30/30 per run. The previous interval is restored on stop."""
_BACKLOG_READS = 100_000
"""Datagrams an armed backlog is read for at most before the event thread takes over."""
_RETIRE_AFTER_S = 2.0
"""An exited pid stays in the lineage at least this long so its late socket events still count,
and until the fanotify watcher has handled every file event queued before its exit."""
_RETIRE_AT_MOST_S = 60.0
"""An exited pid leaves the lineage after this long even when the fanotify watcher is still
behind (its file events read later are counted as unattributed)."""
_FORGET_EXIT_AFTER_S = 60.0
"""How long after its retirement an exit time is kept to judge late socket tracer reports (a
connect before the exit is the process's; after it, a recycled pid's). Later, unknown = not
the lineage's."""


def parse_messages(data: bytes) -> list[tuple[int, int, tuple[int, ...]]]:
    """``(what, timestamp_ns, fields)`` for each proc event in one netlink datagram."""
    out: list[tuple[int, int, tuple[int, ...]]] = []
    offset = 0
    while offset + _NLMSGHDR.size <= len(data):
        length = _NLMSGHDR.unpack_from(data, offset)[0]
        if length < _NLMSGHDR.size:
            break
        body = offset + _NLMSGHDR.size + _CN_MSG.size
        if body + _EVENT_HEAD.size <= offset + length:
            what, _cpu, ts = _EVENT_HEAD.unpack_from(data, body)
            rest = body + _EVENT_HEAD.size
            fields: tuple[int, ...] = ()
            if what == PROC_EVENT_FORK:
                fields = _FORK.unpack_from(data, rest)
            elif what == PROC_EVENT_EXEC:
                fields = _EXEC.unpack_from(data, rest)
            elif what == PROC_EVENT_EXIT:
                fields = _EXIT.unpack_from(data, rest)
            out.append((what, ts, fields))
        offset += (length + 3) & ~3
    return out


def _be(value: int) -> int:
    """A host-order field as the socket filter's big-endian word load reads it."""
    return int.from_bytes(struct.pack("=I", value), "big")


_SO_ATTACH_FILTER = 26
_WHAT, _FORK_CHILD, _EXIT_PID = 36, 60, 52
"""Offsets in a connector datagram (netlink header 16 + ``cn_msg`` 20): the event type, a fork's
child pid (its tgid follows) and an exit's pid (its tgid follows)."""
PROCESS_FILTER: tuple[tuple[int, int, int, int], ...] = (
    (0x20, 0, 0, _WHAT),  # A = what
    (0x15, 2, 0, _be(PROC_EVENT_FORK)),
    (0x15, 9, 0, _be(PROC_EVENT_EXEC)),
    (0x15, 4, 9, _be(PROC_EVENT_EXIT)),
    (0x20, 0, 0, _FORK_CHILD),  # fork: keep it when child pid == child tgid (a process)
    (0x07, 0, 0, 0),
    (0x20, 0, 0, _FORK_CHILD + 4),
    (0x1D, 4, 5, 0),
    (0x20, 0, 0, _EXIT_PID),  # exit: keep it when pid == tgid (a process, not a thread)
    (0x07, 0, 0, 0),
    (0x20, 0, 0, _EXIT_PID + 4),
    (0x1D, 0, 1, 0),
    (0x06, 0, 0, 0xFFFFFFFF),  # keep
    (0x06, 0, 0, 0),  # drop
)
"""A classic socket filter (``SO_ATTACH_FILTER``) passing only what :meth:`LinuxBackend._handle`
reads: process forks (not thread starts), execs and process exits (not thread exits). The
connector reports every event of the machine; the kernel drops the rest before they are queued,
so a busy machine's threads cost the reader nothing (the exec image helper uses the same
program)."""


def attach_process_filter(sock: socket.socket) -> bool:
    """Attach :data:`PROCESS_FILTER` to a connector socket; False when the kernel refused it
    (the reader then skips those events itself, as :meth:`LinuxBackend._handle` always does)."""
    program = b"".join(struct.pack("=HBBI", *insn) for insn in PROCESS_FILTER)
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("HL", len(PROCESS_FILTER), ctypes.addressof(buffer))
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
    except OSError:
        return False
    return True


def retire_now(now: float, due: float, handled: float, files_drained: float | None) -> bool:
    """Whether an exited lineage pid leaves the lineage at ``now`` (monotonic seconds): its
    ``due`` time has come and the fanotify watcher has handled every event queued before its
    exit was ``handled`` (``files_drained``: the start of its last pass that emptied its queues,
    None without a watcher): the kernel queues a process's file events before it reports the
    exit, so none of them can be read after that pass. At most :data:`_RETIRE_AT_MOST_S` after
    ``handled`` when the watcher is that far behind."""
    if now < due:
        return False
    if files_drained is None or files_drained >= handled:
        return True
    return now >= handled + _RETIRE_AT_MOST_S


def exit_code_of(status: int) -> int:
    """A wait status as Python reports it: the exit code, or minus the killing signal."""
    sig = status & 0x7F
    return -sig if sig else (status >> 8) & 0xFF


def _prefer_this_thread() -> None:
    """Run the event reader at real-time priority when allowed (root), else leave it be.

    An exec'd image can only be read while the process lives; a short child may exit a
    millisecond after its exec event, so the reader should not queue behind busy processes.
    """
    try:
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)


def _exec_reader(ctx: HostContext, armed: ArmedHost | None) -> ExecReader | None:
    """The exec image helper over the lineage (the armed one when given), or None (noted)."""
    if armed is not None and armed.helper is not None:
        process, armed.helper = armed.helper, None
        return ExecReader([], process=process)
    try:
        root = ctx.lineage.root
        return ExecReader([root, *descendants_of(root)] if root else [])
    except OSError as exc:
        ctx.telemetry.note("host.exec_images", f"no exec image helper: {exc}")
        return None


def _destroy_watcher(ctx: HostContext, scanner: SocketScanner) -> tuple[DestroyWatcher | None, str]:
    """The TCP destroy watcher and a note for the network state, or None and why not."""
    # a standing collector (no root) follows processes of its own namespace only: see docs/host.md
    if same_network_namespace(ctx.lineage.root or os.getpid()) is False:
        return None, (
            "the workload runs in another network namespace: TCP destroy notifications are not "
            "followed, so a connection opened and closed between scans is missed"
        )
    try:
        watcher = DestroyWatcher(ctx, scanner)
    except OSError as exc:
        reason = "needs CAP_NET_ADMIN" if exc.errno in (errno.EPERM, errno.EACCES) else exc
        return None, (
            f"sock_diag destroy notifications refused ({reason}): a connection opened and "
            "closed between scans is missed"
        )
    return watcher, (
        "TCP connections closed between scans are recorded from sock_diag destroy "
        "notifications only when a scan saw a followed process hold them; the others are "
        "counted as unattributed machine connections, never attributed"
    )


def _socket_tracer(
    ctx: HostContext,
    scanner: SocketScanner,
    owner: Owner,
    on_state: Callable[[str], None],
    rings: ArmedRings | None = None,
) -> tuple[ConnectTracer | None, str]:
    """The socket tracer (attached already when it is perf's, not started) and its part of the
    network state, or None and why: perf (adopting ``rings`` armed before the collector was
    built), else bpftrace, else lineage only (``docs/host.md``)."""
    cfg = ctx.config
    if not cfg.socket_tracing or cfg.socket_tracer not in ("auto", "perf"):
        if rings is not None:
            rings.close()  # armed for a tracer this configuration does not use
        rings = None
    if not cfg.socket_tracing:
        return None, (
            f"socket attribution: lineage only (no socket tracer: socket_tracing is off): "
            f"{SAMPLED_ONLY}"
        )
    why: list[str] = []
    if cfg.socket_tracer in ("auto", "perf"):
        try:
            perf = PerfSocketTracer(ctx, scanner, owner, on_state, armed=rings)
        except OSError as exc:
            if rings is not None:
                rings.close()
            why.append(f"perf: {exc.strerror or exc}")
        else:
            return perf, perf.note
    if cfg.socket_tracer in ("auto", "bpftrace"):
        instead = why[0] if why else ""
        unused = f" (perf tracer unavailable: {instead})" if instead else ""
        try:
            tracer = SocketTracer(
                ctx, scanner, owner, cfg.bpftrace_path, on_state, instead_of=instead
            )
        except OSError as exc:
            why.append(f"bpftrace: {exc}")
        else:
            return tracer, (
                "TCP connects will be traced with their exact pid once bpftrace "
                f"(sock:inet_sock_set_state) has attached{unused}; until then a connection "
                "closed between scans is missed unless a scan saw its owner"
            )
    why_not = "; ".join(why)
    return None, f"socket attribution: lineage only (no socket tracer: {why_not}): {SAMPLED_ONLY}"


def fork_identity(pid: int, ppid: int, event_monotonic_ns: int) -> ProcessInfo:
    """A forked child's identity from ``/proc/<pid>/stat``, approximate when it is gone (or the
    pid already belongs to a process started long after the fork)."""
    stat = read_stat(pid)
    approx = approx_start_ms(event_monotonic_ns)
    if stat is None or abs(start_ms_from_ticks(stat[1]) - approx) > SAME_START_MS:
        return ProcessInfo(pid=pid, start_ms=approx, ppid=ppid, approximate=True)
    return ProcessInfo(pid=pid, start_ms=start_ms_from_ticks(stat[1]), ppid=ppid)


class LinuxBackend:
    """Process connector + fanotify + socket scans (see the module docstring)."""

    name = "linux"

    def __init__(self) -> None:
        if os.geteuid() != 0:
            raise BackendUnavailableError(
                "linux: needs root (netlink process connector and fanotify)"
            )
        sock = open_proc_connector()  # fails here, before start, if the kernel lacks it
        sock.close()
        self.why = (
            "netlink process connector works here: fork/exec/exit are pushed by the kernel "
            "with no blind window and no tracing cost"
        )
        self._sock: socket.socket | None = None
        self._ctx: HostContext | None = None
        self._thread: threading.Thread | None = None
        self._stop_r, self._stop_w = -1, -1
        self._wake_r, self._wake_w = -1, -1
        self._passed = threading.Condition()
        """Notified after every pass of the event thread (:attr:`_read_at` advanced)."""
        self._fanotify: FanotifyWatcher | None = None
        self._scanner: SocketScanner | None = None
        self._destroys: DestroyWatcher | None = None
        self._tracer: ConnectTracer | None = None
        self._forgetting: deque[tuple[float, int, int | None]] = deque()
        self._exited: dict[int, int] = {}
        """Lineage pid -> monotonic ns of its exit (until it is forked in the lineage again)."""
        self._retiring: deque[tuple[float, float, int]] = deque()
        """(retire at the earliest, exit handled at (monotonic), pid) of exited lineage pids."""
        self._read_at = 0.0
        """Monotonic time at which the event thread's last pass that drained the connector began
        (every fork queued before then is in the lineage): :attr:`FanotifyWatcher.lineage_read`."""
        self._reading = True
        """False once the event thread has made its last pass (stopped): no pass comes any more."""
        self._gate: StartGate | None = None
        self._switch = 0.005
        self.lost = 0
        self._armed: ArmedHost | None = None
        self._gate_opened_ns = 0
        """When the armed root's gate opened (:attr:`ArmedHost.gate_opened_ns`), 0 unarmed."""

    def adopt(self, armed: ArmedHost) -> None:
        """Use the sources ``armed`` attached before the collector was built (before start):
        what the kernel reported since is read from their queues, in order, by :meth:`start`."""
        self._armed = armed

    def start(self, ctx: HostContext) -> None:
        """Subscribe, snapshot the existing lineage, then follow kernel events.

        Armed (:meth:`adopt`), the sources were attached while the root was still gated, so
        every descendant's fork is in the connector's queue: only the root is snapshot."""
        self._ctx = ctx
        armed, self._armed = self._armed, None
        if armed is not None and armed.root_pid != ctx.lineage.root:
            armed.close()  # armed for another lineage: nothing of it is ours
            armed = None
        try:
            self._start(ctx, armed)
        finally:
            if armed is not None:
                armed.close()  # the sources this configuration does not use

    def _start(self, ctx: HostContext, armed: ArmedHost | None) -> None:
        cfg = ctx.config
        if armed is not None and armed.proc_socket is not None:
            self._sock, armed.proc_socket = armed.proc_socket, None
        else:
            self._sock = open_proc_connector()
        attach_process_filter(self._sock)  # what is queued already is read and skipped as ever
        self._gate = StartGate(ctx, attribution=SYSCALL)
        if cfg.processes:
            self._gate.images = _exec_reader(ctx, armed)
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, _SWITCH_INTERVAL_S))
        self._stop_r, self._stop_w = os.pipe()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)  # a full pipe: a pass is asked for already
        if cfg.processes:
            ctx.collection_state(
                "process", CollectionState.AVAILABLE, self.why, "kernel process connector"
            )
        else:
            ctx.collection_state("process", CollectionState.NOT_REQUESTED, "processes: false")
        if armed is None:
            ctx.snapshot_lineage()
        else:
            self._armed_root(ctx, armed)
            self._read_backlog()  # the lineage as it is now, before files are attributed
        if cfg.files:
            try:
                self._fanotify = FanotifyWatcher(
                    ctx, armed=armed.fanotify if armed is not None else None
                )
                self._fanotify.emit_for = self._gate.emit_for
                self._fanotify.lineage_read = self._lineage_read
                self._fanotify.sync_lineage = self._sync_lineage
                self._fanotify.exited_at = self._exited_at
                self._fanotify.start()
            except OSError as exc:
                refused = exc.errno in (errno.EPERM, errno.EACCES)
                ctx.collection_state(
                    "file",
                    CollectionState.UNAVAILABLE,
                    f"fanotify failed: {exc}",
                    "fanotify refused (needs CAP_SYS_ADMIN)"
                    if refused
                    else f"fanotify failed ({exc.strerror or exc})",
                )
                self._fanotify = None
        else:
            ctx.collection_state("file", CollectionState.NOT_REQUESTED, "files: false")
        if cfg.network:
            self._start_network(ctx, armed.perf if armed is not None else None)
            if armed is not None:
                armed.perf = None  # adopted by the tracer, or closed by _start_network
        else:
            ctx.collection_state("network", CollectionState.NOT_REQUESTED, "network: false")
        self._thread = threading.Thread(target=self._run, name="host-linux", daemon=True)
        self._thread.start()

    def _start_network(self, ctx: HostContext, rings: ArmedRings | None = None) -> None:
        """Socket scans, destroy notifications and the eBPF socket tracer (started, not awaited)."""
        scanner = self._scanner = SocketScanner(ctx, attribution=SAMPLED)
        self._destroys, destroy_note = _destroy_watcher(ctx, scanner)

        def on_state(note: str) -> None:
            reason = scanner.reason(f"{destroy_note}; {note}")
            tracer = self._tracer
            brief = scanner.brief(tracer.brief if tracer is not None else "")
            ctx.collection_state("network", CollectionState.DEGRADED, reason, brief)

        self._tracer, trace_note = _socket_tracer(ctx, scanner, self._owns, on_state, rings)
        scanner.start(
            ctx.config.network_poll_interval,
            f"{destroy_note}; {trace_note}",
            self._tracer.brief if self._tracer is not None else "",
        )
        if self._destroys is not None:
            self._destroys.tracer = self._tracer
            self._destroys.start()
        if self._tracer is not None:
            self._tracer.start()

    def _owns(self, pid: int, connect_ns: int) -> bool | None:
        """Whether a connect by ``pid`` at ``connect_ns`` (monotonic) was the lineage's; None
        while the pid is unknown (its fork event may not have been read yet)."""
        ended = self._exited.get(pid)
        if ended is not None:
            return connect_ns <= ended  # after its exit: the pid was recycled by another process
        ctx = self._ctx
        return True if ctx is not None and pid in ctx.lineage else None

    def follow(self, pid: int) -> str:
        """Adopt ``pid`` and its running descendants; ``""`` (the connector follows any pid).

        File events of theirs read before the follow (held for a pid the lineage did not know,
        or still queued) are dropped first: they are from before it (see :mod:`.fanotify`)."""
        ctx, gate = self._ctx, self._gate
        if ctx is None or gate is None:
            return "linux: not running"
        watcher = self._fanotify
        if watcher is None:
            pids = ctx.adopt(pid)
        else:
            marked = [pid, *descendants_of(pid)]
            if not watcher.before_follow(marked):
                ctx.telemetry.count("fanotify.follow_unsynced")
            try:
                pids = ctx.adopt(pid)
            finally:
                watcher.followed(marked)
        if gate.images is not None:
            gate.images.follow(pids)
        if self._scanner is not None:
            self._scanner.followed(pids)
        self._scan()
        return ""

    def _run(self) -> None:
        _prefer_this_thread()
        assert self._sock is not None
        sock = self._sock
        gate = self._gate
        assert gate is not None
        sock.setblocking(False)
        ctx = self._ctx
        assert ctx is not None
        while True:
            # a held start is judged every 10 ms, a retiring pid every 50; nothing followed and
            # nothing retiring: only the kernel's events (and a pass asked for) wake the reader
            timeout = 0.01 if gate else 0.05 if self._retiring or not ctx.lineage.empty() else 0.5
            began = time.monotonic()
            ready, _, _ = select.select(
                [sock.fileno(), self._stop_r, self._wake_r], [], [], timeout
            )
            if self._wake_r in ready:
                os.read(self._wake_r, 4096)
            # drain what the kernel already queued: a held start is judged on every event so far
            while self._recv_once(sock):
                pass
            stopping = self._stop_r in ready
            with self._passed:
                self._read_at = began  # every fork queued before ``began`` is in the lineage now
                self._reading = not stopping
                self._passed.notify_all()
            if stopping:
                return
            gate.due()
            self._retire_due()

    def _recv_once(self, sock: socket.socket) -> bool:
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno == errno.ENOBUFS:
                self._lost()
                return True
            return False
        for what, ts, fields in parse_messages(data):
            self._handle(what, ts, fields)
        return True

    def _lost(self) -> None:
        ctx = self._ctx
        assert ctx is not None
        self.lost += 1
        ctx.telemetry.count("linux.overruns")
        if ctx.states.get("process", ("",))[0] == CollectionState.AVAILABLE:
            ctx.collection_state(
                "process",
                CollectionState.DEGRADED,
                "netlink socket overrun (ENOBUFS): some process events were lost",
                "kernel process connector; some events lost (overrun)",
            )

    def _handle(self, what: int, ts: int, fields: tuple[int, ...]) -> None:
        ctx = self._ctx
        assert ctx is not None
        wall = monotonic_to_wall_ns(ts)
        gate = self._gate
        assert gate is not None
        if what == PROC_EVENT_FORK:
            _ppid, ptgid, cpid, ctgid = fields
            if cpid != ctgid or ptgid not in ctx.lineage:
                return  # a new thread, or outside the lineage
            # the identity only: the image /proc shows now is the parent's until the child execs
            gate.forked(self._fork_identity(ctgid, ptgid, ts), wall)
            self._exited.pop(ctgid, None)
            # Only now, with its identity known: the file and socket watchers report a pid's
            # events as soon as it is in the lineage, and they run in other threads.
            ctx.lineage.add(ctgid)
            self._scan()
        elif what == PROC_EVENT_EXEC:
            _pid, tgid = fields
            if tgid not in ctx.lineage:
                return
            if tgid == ctx.lineage.root and ts < self._gate_opened_ns:
                self._gate_exec(tgid, ts)
                return
            gate.exec_event(tgid, ctx.events.processes.get(tgid), wall, event_ns=ts)
            self._scan()
        elif what == PROC_EVENT_EXIT:
            pid, tgid, status, _sig = fields
            if pid != tgid or tgid not in ctx.lineage:
                return
            gate.exited(tgid)
            ctx.lineage.ended(tgid)  # kept until retired, but its descriptors are closed
            self._exited[tgid] = ts
            if ctx.config.processes:
                gate.emit_for(
                    tgid,
                    ctx.events.exit_event(tgid, wall, exit_code_of(status), attribution=SYSCALL),
                )
            handled = time.monotonic()
            self._retiring.append((handled + _RETIRE_AFTER_S, handled, tgid))
            self._scan()  # the rest of the lineage may hold sockets the scan has not seen yet

    def _armed_root(self, ctx: HostContext, armed: ArmedHost) -> None:
        """The root's start as of when the sources were armed: the identity read then, while it
        was gated (its image was the gate's, ``observe``'s machinery). Never an image read now:
        the gate is open by now, and what the root exec'd is named by its exec event, read from
        the backlog next (a ``/proc`` read now would give a sampled image or none, depending on
        how long the build took)."""
        self._gate_opened_ns = armed.gate_opened_ns
        root = ctx.lineage.root
        if armed.root_start_ticks is None:  # gone before it was armed: nothing to say
            return
        info = ctx.events.remember(
            ProcessInfo(
                pid=root,
                start_ms=start_ms_from_ticks(armed.root_start_ticks),
                ppid=armed.root_ppid,
            )
        )
        if ctx.config.processes:
            ctx.emit(
                ctx.events.process_event(
                    "process.start", info, armed.armed_ns or time.time_ns(), attribution=SAMPLED
                )
            )

    def _gate_exec(self, pid: int, event_ns: int) -> None:
        """The armed root's exec event from before its gate opened: the gate's own ``sh``
        (``observe``'s machinery, like the gate a ``/proc`` snapshot leaves unnamed), which
        the kernel reported only after the sources were attached. Not a record: its image is
        not the user's, and a read now would be CMD's, lent to the wrong exec."""
        images = self._gate.images if self._gate is not None else None
        if images is not None:
            images.take_event(pid, event_ns)  # the helper's image of it, if any, is dropped
        assert self._ctx is not None
        self._ctx.telemetry.count("linux.gate_exec")

    def _read_backlog(self) -> None:
        """Handle every process event queued since the sources were armed, in order."""
        sock, gate = self._sock, self._gate
        assert sock is not None
        assert gate is not None
        if gate.images is not None:
            gate.images.sync(1.0)  # the helper's forks and images of those events are read
        sock.setblocking(False)
        for _ in range(_BACKLOG_READS):  # the rest, if the machine keeps it busy: the thread
            if not self._recv_once(sock):
                break

    def _fork_identity(self, pid: int, ppid: int, event_ns: int) -> ProcessInfo:
        """The identity the exec image helper read at the fork (exact even when this event is
        read late, from an armed backlog), else :func:`fork_identity`."""
        images = self._gate.images if self._gate is not None else None
        known = images.fork_identity(pid, event_ns) if images is not None else None
        if known is not None:
            return ProcessInfo(pid=pid, start_ms=known[0], ppid=ppid)
        return fork_identity(pid, ppid, event_ns)

    def _scan(self) -> None:
        if self._scanner is not None:
            self._scanner.scan_now()

    def _lineage_read(self) -> float:
        return self._read_at

    def _sync_lineage(self, after: float, timeout: float) -> bool:
        """Ask the event thread for a pass that begins after ``after`` (monotonic) and wait
        for it at most ``timeout`` s: True once every fork queued before ``after`` is in the
        lineage (:attr:`FanotifyWatcher.sync_lineage`). Asked before the thread runs, its
        first pass answers; asked after its last pass (the backend is stopping), nothing will,
        and the answer is at once."""
        if self._read_at >= after:
            return True
        if self._wake_w < 0 or not self._reading:
            return False
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass  # the pipe is full: a pass is asked for already
        except OSError:
            return False  # stopped meanwhile
        with self._passed:
            self._passed.wait_for(lambda: self._read_at >= after or not self._reading, timeout)
            return self._read_at >= after

    def _exited_at(self, pid: int) -> int | None:
        ended = self._exited.get(pid)
        return None if ended is None else monotonic_to_wall_ns(ended)

    def _retire_due(self) -> None:
        """Retire the exited pids that are due, oldest first. The queue is in the order the
        exits were handled, and :func:`retire_now` never retires a later exit before an
        earlier one (its due time and the file watcher's progress it needs grow with the
        handling time), so the first pid that stays ends the pass: a pass costs the pids it
        retires, not every exit of the last 2 s (a workload spawning thousands of children)."""
        ctx = self._ctx
        assert ctx is not None
        now = time.monotonic()
        files = self._fanotify
        retiring = self._retiring
        while retiring:
            due, handled, pid = retiring[0]
            if not retire_now(now, due, handled, files.drained_at if files is not None else None):
                break
            retiring.popleft()
            ctx.lineage.discard(pid)
            self._forgetting.append((now + _FORGET_EXIT_AFTER_S, pid, self._exited.get(pid)))
        while self._forgetting and self._forgetting[0][0] <= now:
            _, pid, ended = self._forgetting.popleft()
            if self._exited.get(pid) == ended:  # not forked again in the lineage since
                self._exited.pop(pid, None)

    def stop(self) -> None:
        """Stop every reader; pending kernel events are drained first."""
        if self._thread is not None and self._stop_w >= 0:
            os.write(self._stop_w, b"x")
            self._thread.join()
            self._thread = None
        if self._gate is not None:
            self._gate.flush()
            if self._gate.images is not None:
                self._gate.images.close()
            self._gate = None
            sys.setswitchinterval(self._switch)
        if self._destroys is not None:
            self._destroys.stop_reading()
        if self._tracer is not None:
            self._tracer.stop()  # its last reports decide the destroyed connections waiting
            self._tracer = None
        if self._destroys is not None:
            self._destroys.stop()
            self._destroys = None
        if self._scanner is not None:
            self._scanner.stop()
            self._scanner = None
        if self._fanotify is not None:
            self._fanotify.stop()
            self._fanotify = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        for fd in (self._stop_r, self._stop_w, self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = self._wake_r = self._wake_w = -1
