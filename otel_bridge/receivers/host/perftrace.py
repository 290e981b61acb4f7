"""Kernel-pushed TCP connects with no compiler: ``perf_event_open(2)`` on a tracepoint.

The bpftrace tracer (:mod:`.socktrace`) needs one to several seconds (24 s once under load) to
compile its program and attach, and connections closed before then cannot be attributed. This
reader opens the same tracepoint, ``sock:inet_sock_set_state``, directly: one perf event per
online CPU (``PERF_TYPE_TRACEPOINT``, the id read from tracefs, every occurrence sampled with
``PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW`` on
``CLOCK_MONOTONIC``), each with its ring buffer mapped into this process. Opening the events is
the attach: it takes milliseconds, so the receiver is attached before it returns from
``start``, before the workload is released.

The raw sample is the tracepoint's record; every field is read at the offset and size the
tracepoint's ``format`` file gives (nothing is hard-coded but the field names). The pairing
is the bpftrace program's, done here in user space:

* ``CLOSE -> SYN_SENT`` runs inside ``connect()``, in the connecting task: the sample's pid
  (the tgid) and time are kept, keyed by the socket address ``skaddr``;
* ``SYN_SENT -> ESTABLISHED`` (softirq: its own pid means nothing) completes the 4-tuple and
  yields the connect with the kept tgid; ``SYN_SENT -> anything else`` drops the entry;
* ``SYN_RECV -> ESTABLISHED`` is an accepted socket, for the direction rule.

Each CPU has its own ring, so the two halves of one connect can sit in two rings. Every pass
reads all rings and orders the samples by time; a sample younger than :data:`HOLD_NS` waits for
the next pass, so that a sample of another CPU still being written when its ring was read
comes first (what ``perf`` itself does with its flush rounds). A full ring makes the kernel
write ``PERF_RECORD_LOST`` with the number of samples dropped: counted
(``socktrace.lost``) and said in the network collection state. What is then recorded follows
:class:`.socktrace.ConnectTracer`, shared with the bpftrace tracer.

Needs ``CAP_PERFMON`` (or root / ``kernel.perf_event_paranoid`` <= -1) and the tracepoint's
id and format from tracefs (read from a private mount of it when none is mounted:
:func:`otel_bridge.perfring.read_private_tracepoint`, needs ``CAP_SYS_ADMIN``); without them
:func:`open_rings` raises ``OSError`` saying why, and the ``linux`` backend falls back to
bpftrace, then to lineage-only attribution (``docs/host.md``).
"""

from __future__ import annotations

import contextlib
import operator
import os
import select
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from otel_bridge.identity import iso_ms
from otel_bridge.perfring import (
    HEADER as _HEADER,
)
from otel_bridge.perfring import (
    IPPROTO_TCP,
    PERF_RECORD_LOST,
    PERF_RECORD_SAMPLE,
    RING_PAGES,
    TCP_CLOSE,
    TCP_ESTABLISHED,
    TCP_SYN_RECV,
    TCP_SYN_SENT,
    TRACEFS,
    ArmedRings,
    Field,
    Ring,
    arm_rings,
    read_tracepoint,
)
from otel_bridge.perfring import SAMPLE as _SAMPLE
from otel_bridge.receivers.host.events import HostContext
from otel_bridge.receivers.host.netscan import SocketScanner
from otel_bridge.receivers.host.procfs import monotonic_to_wall_ns
from otel_bridge.receivers.host.release import release
from otel_bridge.receivers.host.socktrace import (
    ConnectTracer,
    Key,
    Owner,
    TracedSocket,
    socket_address,
)

HOLD_NS = 20_000_000
"""A sample this young waits for the next pass before it is ordered with the other CPUs'."""
BATCH_MS = 5
"""After a wakeup, the reader waits this long (or for stop) so a burst is read in one pass."""
_KEEP = 65536
"""Connecting sockets remembered (a ``SYN_SENT`` whose end was never seen is forgotten)."""

_FIELDS = ("skaddr", "oldstate", "newstate", "protocol", "family", "sport", "dport")
_ADDRS = ("saddr", "daddr", "saddr_v6", "daddr_v6")
_INTEGER = {1: "b", 2: "h", 4: "i", 8: "q"}


@dataclass(frozen=True, slots=True)
class StateChange:
    """One ``inet_sock_set_state`` record (addresses as the kernel wrote them)."""

    skaddr: int
    oldstate: int
    newstate: int
    protocol: int
    family: int
    sport: int
    dport: int
    saddr: bytes
    daddr: bytes
    saddr_v6: bytes
    daddr_v6: bytes

    @property
    def key(self) -> Key:
        """(local address, local port, peer address, peer port), as the socket tables say."""
        local = socket_address(
            self.family,
            socket.inet_ntop(socket.AF_INET, self.saddr),
            socket.inet_ntop(socket.AF_INET6, self.saddr_v6),
        )
        peer = socket_address(
            self.family,
            socket.inet_ntop(socket.AF_INET, self.daddr),
            socket.inet_ntop(socket.AF_INET6, self.daddr_v6),
        )
        return (local, self.sport, peer, self.dport)


def record_layout(fields: dict[str, Field]) -> tuple[struct.Struct, list[int]]:
    """One native-endian ``struct`` reading :data:`_FIELDS` and :data:`_ADDRS` at the offsets
    ``fields`` gives (in offset order, padding skipped), and where each of them (in that order,
    :class:`StateChange`'s) is among its values. ``OSError`` when the format lacks one or has a
    size a field of that kind cannot have."""
    names = (*_FIELDS, *_ADDRS)
    missing = [n for n in names if n not in fields]
    if missing:
        raise OSError(f"the tracepoint's format lacks {', '.join(missing)}")
    codes: list[tuple[int, int, str]] = []
    for index, name in enumerate(names):
        f = fields[name]
        if name in _ADDRS:
            if f.size != (4 if name in ("saddr", "daddr") else 16):
                raise OSError(f"the tracepoint's {name} has {f.size} bytes")
            code = f"{f.size}s"
        elif f.size in _INTEGER:
            code = _INTEGER[f.size] if f.signed else _INTEGER[f.size].upper()
        else:
            raise OSError(f"the tracepoint's {name} has {f.size} bytes")
        codes.append((f.offset, index, code))
    fmt, at = "=", 0
    for offset, _index, code in sorted(codes):
        if offset < at:
            raise OSError("the tracepoint's fields overlap")
        fmt += (f"{offset - at}x" if offset > at else "") + code
        at = offset + struct.calcsize("=" + code)
    order = [index for _offset, index, _code in sorted(codes)]
    return struct.Struct(fmt), [order.index(i) for i in range(len(order))]


class SetStateDecoder:
    """Reads ``inet_sock_set_state`` raw records with the offsets of the running kernel."""

    def __init__(self, fields: dict[str, Field]) -> None:
        self._layout, self._back = record_layout(fields)
        self.size = self._layout.size

    def decode(self, raw: bytes) -> StateChange | None:
        """The record, or None when it is shorter than the format says."""
        if len(raw) < self.size:
            return None
        values = self._layout.unpack_from(raw)
        return StateChange(*(values[i] for i in self._back))


class ConnectPairing:
    """The bpftrace program's logic: a connect's tgid from ``CLOSE -> SYN_SENT``, its 4-tuple
    from ``SYN_SENT -> ESTABLISHED``; accepted sockets from ``SYN_RECV -> ESTABLISHED``. Feed
    the samples in time order."""

    def __init__(self) -> None:
        self._connecting: OrderedDict[int, tuple[int, int]] = OrderedDict()
        """skaddr -> (tgid, CLOCK_MONOTONIC ns) of the ``connect()``."""

    def feed(self, tgid: int, time_ns: int, change: StateChange) -> TracedSocket | None:
        """The initiated or accepted connection this sample completes, if any."""
        if change.protocol != IPPROTO_TCP:
            return None
        old, new = change.oldstate, change.newstate
        if old == TCP_CLOSE and new == TCP_SYN_SENT:
            self._connecting[change.skaddr] = (tgid, time_ns)
            while len(self._connecting) > _KEEP:
                self._connecting.popitem(last=False)
            return None
        if old == TCP_SYN_SENT:
            began = self._connecting.pop(change.skaddr, None)
            if new == TCP_ESTABLISHED and began is not None:
                return TracedSocket(True, change.key, began[0], began[1])
            return None
        if old == TCP_SYN_RECV and new == TCP_ESTABLISHED:
            return TracedSocket(False, change.key)
        return None


def tracepoint(tracefs: str = TRACEFS) -> tuple[int, SetStateDecoder]:
    """The tracepoint's id and decoder; ``OSError`` saying why it cannot be read."""
    event_id, fields = read_tracepoint(tracefs)
    return event_id, SetStateDecoder(fields)


@dataclass(frozen=True, slots=True)
class Sample:
    """One decoded sample, ordered by time across CPUs."""

    time_ns: int
    cpu: int
    seq: int
    tgid: int
    change: StateChange


_WHEN = operator.attrgetter("time_ns", "seq")


def in_time_order(
    samples: list[Sample], cutoff_ns: int | None
) -> tuple[list[Sample], list[Sample]]:
    """The samples up to ``cutoff_ns`` (all for None) in time order, and the younger ones that
    wait for the next pass (a sample of another CPU may still come before them)."""
    samples = sorted(samples, key=_WHEN)
    ready = len(samples)
    if cutoff_ns is not None:
        ready = next((i for i, s in enumerate(samples) if s.time_ns > cutoff_ns), ready)
    return samples[:ready], samples[ready:]


class PerfSocketTracer(ConnectTracer):
    """The perf tracepoint reader (module docstring); attached once constructed."""

    def __init__(
        self,
        ctx: HostContext,
        scanner: SocketScanner,
        owner: Owner,
        on_state: Callable[[str], None],
        *,
        tracefs: str = TRACEFS,
        ring_pages: int = RING_PAGES,
        armed: ArmedRings | None = None,
    ) -> None:
        super().__init__(ctx, scanner, owner, on_state)
        _event_id, self._decoder = tracepoint(tracefs)
        if armed is None:
            armed = arm_rings(tracefs, ring_pages)
        self._rings, armed.rings = armed.rings, []  # adopted, samples written meanwhile included
        self.attach_s = armed.attach_s
        """How long opening and mapping the events took (seconds)."""
        self.attached_ns = monotonic_to_wall_ns(armed.attached_monotonic_ns)
        self.attached.set()
        self._pairing = ConnectPairing()
        self._pending: list[Sample] = []
        self._seq = 0
        self._counted_lost = 0
        self._stop_r, self._stop_w = os.pipe()
        self._thread: threading.Thread | None = None

    def _brief(self) -> str:
        return "TCP connects traced (perf)"

    @property
    def note(self) -> str:
        """The network state's words for this tracer."""
        return (
            f"TCP connects traced with their exact pid since {iso_ms(self.attached_ns // 10**6)} "
            f"(perf_event_open on sock:inet_sock_set_state, {len(self._rings)} CPUs, attached "
            f"in {self.attach_s * 1000:.1f}ms, no compiler)"
        )

    def start(self) -> None:
        """Start reading the rings (the events are enabled since the constructor)."""
        self._thread = threading.Thread(target=self._run, name="host-perftrace", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        poller = select.poll()
        for ring in self._rings:
            poller.register(ring.fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        stop = select.poll()
        stop.register(self._stop_r, select.POLLIN)
        while True:
            waiting = self._pending or self._waiting
            ready = poller.poll(HOLD_NS // 10**6 if waiting else 500)
            if any(fd == self._stop_r for fd, _ in ready):
                break
            if ready and stop.poll(BATCH_MS):  # let a burst gather: one pass, not one a sample
                break
            self.read_pass(final=False)
            self.decide_waiting(final=False)
        self.read_pass(final=True)
        self.decide_waiting(final=True)

    def read_pass(self, *, final: bool) -> None:
        """Read every ring, then handle in time order the samples old enough (all when
        ``final``)."""
        reported = 0
        for ring in self._rings:
            for kind, record in ring.records():
                if kind == PERF_RECORD_SAMPLE:
                    self._sample(record)
                elif kind == PERF_RECORD_LOST and not ring.counts_lost:
                    reported += struct.unpack_from("=QQ", record, _HEADER.size)[1]
        counted = sum(ring.lost() for ring in self._rings if ring.counts_lost)
        lost = reported + counted - self._counted_lost
        self._counted_lost = counted
        if lost:
            self._say_lost(lost, "a perf ring was full")
        cutoff = None if final else time.monotonic_ns() - HOLD_NS
        now, self._pending = in_time_order(self._pending, cutoff)
        for sample in now:
            traced = self._pairing.feed(sample.tgid, sample.time_ns, sample.change)
            if traced is not None:
                self.handle(traced)

    def _sample(self, record: bytes) -> None:
        at = _HEADER.size
        if len(record) < at + _SAMPLE.size:
            self._ctx.telemetry.count("socktrace.unparsed")
            return
        pid, _tid, time_ns, cpu, _res, raw_size = _SAMPLE.unpack_from(record, at)
        raw = record[at + _SAMPLE.size : at + _SAMPLE.size + raw_size]
        change = self._decoder.decode(raw)
        if change is None:
            self._ctx.telemetry.count("socktrace.unparsed")
            return
        self._seq += 1
        self._pending.append(Sample(time_ns, cpu, self._seq, pid, change))

    def stop(self) -> None:
        """Read what is left, decide what waits, close the events. Safe twice."""
        if self._stop_w < 0:
            return
        os.write(self._stop_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        else:
            self.read_pass(final=True)
            self.decide_waiting(final=True)
        rings, self._rings = self._rings, []
        release(lambda: _close_rings(rings))  # the kernel's grace period
        os.close(self._stop_r)
        os.close(self._stop_w)
        self._stop_r = self._stop_w = -1


def _close_rings(rings: list[Ring]) -> None:
    """Close ``rings`` (the last one unregisters the tracepoint: a kernel grace period)."""
    for ring in rings:
        with contextlib.suppress(OSError):
            ring.close()
