"""Kernel-pushed TCP connects for the ``linux`` backend (bpftrace on ``inet_sock_set_state``).

:class:`ConnectTracer` is the rule both socket tracers share (what is recorded, once, for whom);
:class:`SocketTracer` is the bpftrace reader, the fallback when the perf reader
(:mod:`.perftrace`, attached in milliseconds, no compiler) cannot open the tracepoint.

Socket scans (:mod:`.netscan`) miss a connection that lives between two scans, and the kernel's
destroy notification (:mod:`.sockdiag`) comes after the last descriptor closed, when the owner
can no longer be read. This tracer adds what neither has: the process that *initiated* each TCP
connection, pushed by the kernel as it happens.

One bpftrace program on the tracepoint ``sock:inet_sock_set_state`` (host-wide; the lineage is
filtered here, because the ``linux`` lineage grows in user space):

* ``CLOSE -> SYN_SENT`` runs inside ``connect()``, in the connecting process: its tgid and the
  time are kept in a kernel map keyed by the socket address;
* ``SYN_SENT -> ESTABLISHED`` (softirq context, so its own pid means nothing) prints that kept
  tgid with the now complete 4-tuple (the local port is only chosen after ``SYN_SENT``) as
  ``C tgid connect_ns family sport dport saddr daddr saddr6 daddr6``; ``SYN_SENT -> CLOSE``
  (refused, reset, timed out) drops the entry;
* ``SYN_RECV -> ESTABLISHED`` is an *accepted* socket: ``A family sport dport ...``. It never
  becomes a connection; it tells :class:`.direction.DirectionRule` the direction exactly.

A connection whose tgid is in the lineage (or was, and the connect came before its exit) is
recorded once (the 4-tuple is claimed through :meth:`.netscan.SocketScanner.claim`, shared with
the scans and the destroy notifications) as ``network.connect`` with ``evidence.attribution=
syscall``, ``evidence.causal=true`` and ``network.observed_at=connect``. A tgid not known yet
(its fork event may still be on its way) is decided again for up to :data:`OWNER_WAIT_S`;
then it is another process's connection: not recorded, and the destroy notification of the same
4-tuple is dropped too (it is not the workload's). A connect made before the process that now
has the pid started (a process followed late: the lineage never saw the pid's earlier owner
exit) was that earlier owner's: not recorded either (``socktrace.before_start``).

bpftrace compiles and attaches in one to several seconds. The tracer starts in parallel with
the workload and never delays it: :attr:`SocketTracer.attached` is set when the program's
``BEGIN`` probe runs, and connections closed before then keep the destroy notification's
network-namespace attribution, which the network collection state says. A missing or refused
bpftrace leaves ``socket attribution: lineage only (no eBPF: ...)`` in that state.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from otel_bridge.identity import iso_ms
from otel_bridge.model import AnyValue
from otel_bridge.receivers.host.events import SYSCALL, HostContext
from otel_bridge.receivers.host.netscan import SocketScanner
from otel_bridge.receivers.host.procfs import approx_start_ms, monotonic_to_wall_ns

TRACEPOINT = "/sys/kernel/tracing/events/sock/inet_sock_set_state"
OWNER_WAIT_S = 0.3
"""How long a connection of a pid not (yet) in the lineage waits for the pid's fork event."""
START_SLACK_MS = 20
"""A connect this much before its pid's process start (two clock ticks, the start's
resolution) still counts as that process's."""
SAMPLED_ONLY = (
    "TCP connections are only sampled: one opened and closed between two scans is missed "
    "(unknown, not absent)"
)
"""What the network state says whenever no socket tracer runs."""
_KEEP = 65536
"""Decided 4-tuples remembered (a standing collector runs for days: the oldest are forgotten)."""

PROGRAM = r"""
BEGIN { printf("READY %llu\n", nsecs); }
tracepoint:sock:inet_sock_set_state
/args->protocol == 6 && args->oldstate == 7 && args->newstate == 2/ {
  @pid[args->skaddr] = pid; @at[args->skaddr] = nsecs; }
tracepoint:sock:inet_sock_set_state
/args->protocol == 6 && args->oldstate == 2 && @pid[args->skaddr]/ {
  if (args->newstate == 1) {
    printf("C %d %llu %d %d %d %s %s %s %s\n", @pid[args->skaddr], @at[args->skaddr],
      args->family, args->sport, args->dport, ntop(args->saddr), ntop(args->daddr),
      ntop(args->saddr_v6), ntop(args->daddr_v6));
  }
  delete(@pid[args->skaddr]); delete(@at[args->skaddr]); }
tracepoint:sock:inet_sock_set_state
/args->protocol == 6 && args->oldstate == 3 && args->newstate == 1/ {
  printf("A %d %d %d %s %s %s %s\n", args->family, args->sport, args->dport,
    ntop(args->saddr), ntop(args->daddr), ntop(args->saddr_v6), ntop(args->daddr_v6)); }
END { clear(@pid); clear(@at); }
"""

Key = tuple[str, int, str, int]
"""(local address, local port, peer address, peer port), as :mod:`.netscan` keys sockets."""
Owner = Callable[[int, int], "bool | None"]
"""``owner(tgid, connect_ns)``: True (the lineage's), False (not), None (not yet known)."""


def check_socket_tracing(bpftrace_path: str) -> str:
    """The bpftrace executable; ``OSError`` saying why the tracer cannot run here."""
    path = shutil.which(bpftrace_path)
    if path is None:
        raise OSError(f"{bpftrace_path!r} is not installed")
    if os.geteuid() != 0:
        raise OSError("needs root (CAP_BPF/CAP_PERFMON)")
    if not os.path.isdir(TRACEPOINT):
        raise OSError(f"no tracepoint {TRACEPOINT} (tracefs not mounted, or an old kernel)")
    return path


def socket_address(family: int, v4: str, v6: str) -> str:
    """The address as the socket tables write it (an IPv4-mapped IPv6 one as IPv4)."""
    if family == 2:
        return v4
    return v6[len("::ffff:") :] if v6.startswith("::ffff:") and "." in v6 else v6


@dataclass(frozen=True, slots=True)
class TracedSocket:
    """One line of the program: an initiated (``C``) or accepted (``A``) TCP connection."""

    initiated: bool
    key: Key
    tgid: int = 0
    """The connecting process (``C`` only)."""
    connect_ns: int = 0
    """CLOCK_MONOTONIC time of the ``connect()`` (``C`` only)."""


def parse_line(line: str) -> TracedSocket | None:
    """The connection a ``C`` / ``A`` line reports; None for any other line."""
    parts = line.split()
    if len(parts) == 10 and parts[0] == "C":
        family, sport, dport = int(parts[3]), int(parts[4]), int(parts[5])
        local = socket_address(family, parts[6], parts[8])
        peer = socket_address(family, parts[7], parts[9])
        return TracedSocket(True, (local, sport, peer, dport), int(parts[1]), int(parts[2]))
    if len(parts) == 8 and parts[0] == "A":
        family, sport, dport = int(parts[1]), int(parts[2]), int(parts[3])
        local = socket_address(family, parts[4], parts[6])
        peer = socket_address(family, parts[5], parts[7])
        return TracedSocket(False, (local, sport, peer, dport))
    return None


class ConnectTracer:
    """What every socket tracer shares: the rule that records the lineage's traced connects.

    A tracer feeds :meth:`handle` with each :class:`TracedSocket` in the kernel's order; the
    accepted ones tell the direction rule, the initiated ones are decided against ``owner``
    (waiting up to :data:`OWNER_WAIT_S` for a pid not known yet) and recorded once. The reader
    thread calls :meth:`decide_waiting` between reads, and with ``final`` when it stops."""

    def __init__(
        self,
        ctx: HostContext,
        scanner: SocketScanner,
        owner: Owner,
        on_state: Callable[[str], None],
    ) -> None:
        self._ctx = ctx
        self._scanner = scanner
        self._owner = owner
        self._on_state = on_state
        self._lock = threading.Lock()
        self._decided: OrderedDict[Key, bool] = OrderedDict()
        """4-tuple -> whether it was the lineage's connection."""
        self._waiting: list[tuple[float, TracedSocket]] = []
        self.attached = threading.Event()
        """Set when the tracer runs: connections from then on are traced."""
        self.attached_ns = 0
        """Wall-clock time of the attach (0 before)."""
        self.recorded = 0
        self.lost = 0

    @property
    def brief(self) -> str:
        """The network state's few words for this tracer (the run summary's line): what it
        traces, and how many reports it lost."""
        lost = f" (lost {self.lost} reports)" if self.lost else ""
        return self._brief() + lost

    def _brief(self) -> str:
        return "TCP connects traced"

    def start(self) -> None:
        """Start following the kernel's reports (never waits for them)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop, handle what is left, decide what waits. Safe twice."""
        raise NotImplementedError

    def status(self, key: Key) -> bool | None:
        """Whether the traced connection ``key`` was the lineage's; None when it was not traced
        (or not decided yet)."""
        with self._lock:
            return self._decided.get(key)

    def handle(self, traced: TracedSocket) -> None:
        """Tell the direction rule, and decide an initiated connection (now or later)."""
        rule = self._scanner.rule
        if not traced.initiated:
            rule.saw_accepted(traced.key)
            return
        rule.saw_initiated(traced.key)
        self._decide(traced, time.monotonic() + OWNER_WAIT_S)

    def _decide(self, traced: TracedSocket, deadline: float, final: bool = False) -> None:
        owned = self._owner(traced.tgid, traced.connect_ns)
        if owned is None and not final and time.monotonic() < deadline:
            self._waiting.append((deadline, traced))
            return
        owned = bool(owned)
        if owned and self._before_start(traced):
            owned = False  # an earlier process with the same pid (recycled before the follow)
            self._ctx.telemetry.count("socktrace.before_start")
        with self._lock:
            self._decided[traced.key] = owned
            while len(self._decided) > _KEEP:
                self._decided.popitem(last=False)
        if not owned:
            self._ctx.telemetry.count("socktrace.foreign")
        elif self._scanner.claim(traced.key):
            self._emit(traced)

    def _before_start(self, traced: TracedSocket) -> bool:
        """True when the connect came before the lineage process with its pid started: it was
        another process's that had the pid before (a process followed late, whose pid the
        lineage never saw exit). Unknown (no exact start) is not before."""
        info = self._ctx.events.processes.get(traced.tgid)
        if info is None or info.approximate:
            return False
        return approx_start_ms(traced.connect_ns) < info.start_ms - START_SLACK_MS

    def decide_waiting(self, *, final: bool) -> None:
        """Decide again the connects whose pid was not known yet (all of them when ``final``)."""
        waiting, self._waiting = self._waiting, []
        for deadline, traced in waiting:
            self._decide(traced, deadline, final)

    def _emit(self, traced: TracedSocket) -> None:
        ctx = self._ctx
        local, lport, peer, pport = traced.key
        attrs: dict[str, AnyValue] = ctx.events.identity_attrs(traced.tgid)
        attrs["network.transport"] = "tcp"
        attrs["network.local.address"] = local
        attrs["network.local.port"] = lport
        attrs["network.peer.address"] = peer
        attrs["network.peer.port"] = pport
        attrs["network.observed_at"] = "connect"
        record = ctx.events.record(
            "network.connect",
            monotonic_to_wall_ns(traced.connect_ns),
            attrs,
            attribution=SYSCALL,
            causal=True,
        )
        self.recorded += 1
        ctx.telemetry.count("socktrace.connections")
        ctx.emit(record)

    def _say_lost(self, count: int, detail: str) -> None:
        self.lost += count
        self._ctx.telemetry.count("socktrace.lost", count)
        self._on_state(
            f"the socket tracer lost {self.lost} kernel reports so far ({detail}): the "
            "connections it lost are recorded only when a scan saw their owner"
        )


class SocketTracer(ConnectTracer):
    """Runs the bpftrace program and records the lineage's connections (module docstring)."""

    def __init__(
        self,
        ctx: HostContext,
        scanner: SocketScanner,
        owner: Owner,
        bpftrace_path: str,
        on_state: Callable[[str], None],
        *,
        instead_of: str = "",
    ) -> None:
        self._path = check_socket_tracing(bpftrace_path)
        super().__init__(ctx, scanner, owner, on_state)
        self._instead = f" (perf tracer unavailable: {instead_of})" if instead_of else ""
        """Why the perf tracer is not used, said in every state of this one."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()
        self._buffer = b""
        self._stopping = False
        self.failed = False
        """bpftrace ended without attaching: no connect is traced."""

    def start(self) -> None:
        """Start bpftrace without waiting for it (it compiles and attaches in the background)."""
        self._proc = subprocess.Popen(
            [self._path, "-B", "line", "-e", PROGRAM],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        with contextlib.suppress(OSError):  # its output should not queue behind busy processes
            os.setpriority(os.PRIO_PROCESS, self._proc.pid, -10)
        self._thread = threading.Thread(target=self._run, name="host-socktrace", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        proc = self._proc
        assert proc is not None
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while True:
            timeout = 0.05 if self._waiting else 0.5
            ready, _, _ = select.select([fd], [], [], timeout)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self._feed(chunk)
            self.decide_waiting(final=False)
        self.decide_waiting(final=True)
        if not self.attached.is_set():
            self._failed(proc)

    def _feed(self, chunk: bytes) -> None:
        data = self._buffer + chunk
        *lines, self._buffer = data.split(b"\n")
        for raw in lines:
            self.handle_line(raw.decode("utf-8", "replace"))

    def handle_line(self, line: str) -> None:
        """Interpret one line of the program's output."""
        if line.startswith("READY "):
            self._attach(int(line.split()[1]))
            return
        if line.startswith("Lost "):
            self._lose(line)
            return
        try:
            traced = parse_line(line)
        except ValueError:
            traced = None
        if traced is None:
            if line.startswith(("C ", "A ")):
                self._ctx.telemetry.count("socktrace.unparsed")
            return
        self.handle(traced)

    def _attach(self, monotonic_ns: int) -> None:
        self.attached_ns = monotonic_to_wall_ns(monotonic_ns)
        after = time.monotonic() - self._started
        self.attached.set()
        self._on_state(
            f"TCP connects traced with their exact pid since {iso_ms(self.attached_ns // 10**6)} "
            f"(bpftrace on sock:inet_sock_set_state attached {after:.1f}s after start)"
            f"{self._instead}; "
            "connections closed between scans before then are recorded only when a scan saw "
            "their owner"
        )

    def _lose(self, line: str) -> None:
        found = re.search(r"\d+", line)
        self._say_lost(int(found[0]) if found else 1, f"bpftrace: {line.strip()}")

    def _brief(self) -> str:
        if self.failed:
            return ""  # no tracer: the scans alone
        if self.attached.is_set():
            return "TCP connects traced (bpftrace)"
        return "TCP connects traced once bpftrace attaches"

    def _failed(self, proc: subprocess.Popen[bytes]) -> None:
        err = b""
        if proc.stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                err = proc.stderr.read()
        lines = [x for x in err.decode("utf-8", "replace").splitlines() if x.strip()]
        why = lines[-1] if lines else f"bpftrace exited {proc.poll()}"
        if self._stopping:
            why = "observation stopped before the socket tracer attached"
        self.failed = True
        self._on_state(
            f"socket attribution: lineage only (no eBPF: {why}){self._instead}: {SAMPLED_ONLY}"
        )

    def stop(self) -> None:
        """Stop bpftrace (SIGINT), read the rest of its output, decide what waits. Safe twice."""
        proc = self._proc
        if proc is None:
            return
        self._stopping = True
        if proc.poll() is None:
            proc.send_signal(2)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        self._proc = None
