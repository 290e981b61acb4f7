"""What a standing collector follows: processes that report telemetry, and selector matches.

With no ``root_pid`` the host receiver starts with an empty lineage. A :class:`Follower` thread
then adds roots to it, each with its running descendants, from two sources:

* **telemetry** (``follow_telemetry``): the pipeline publishes the ``process.pid`` of each span
  resource it receives through :class:`~otel_bridge.component.ProcessInterests` (``host.id``
  and ``process.creation.time`` with it when the resource states them). A process is followed
  only if it runs on this host (a stated ``host.id`` must be ours) and is still the process that
  reported: with ``process.creation.time`` stated, the live pid's start time must agree within
  :data:`START_TOLERANCE_MS` (else the pid was recycled and nothing is followed). A resource
  that states no ``process.pid`` (the SDKs' default) is published with the transport peer of
  its request: for a loopback peer the process holding the sender's end of that connection
  (this network namespace's socket tables and each process's ``/proc/<pid>/fd``, read once
  when the interest arrives) is followed, being the process that *sent* the span (a local
  relay, such as an OpenTelemetry Collector, would be the one followed).
* **selectors** (``cgroup``, ``executable``, ``command``, ``user``, :mod:`.selectors`), matched
  against ``/proc`` every ``selector_interval``.

A process followed this way was running, unobserved, before: what it did earlier (its start,
files, connections, children that already exited) is unknown. Each follow therefore emits a
``collection.state`` record for the collection ``lineage`` with state ``degraded``, the
process's identity and the moment observation began, which normalize turns into a coverage
record (``collection.lineage.degraded``). A process that reported telemetry but was gone before
it could be followed gets a ``lineage`` ``unavailable`` record: its OS activity is unknown,
not absent; so does a sender whose resource states no ``process.pid`` and whose connection no
process of this host holds (a remote sender, or one closed before it was looked for) or only a
process of another user, which this collector may not inspect, once per ``service.instance.id``
(else ``service.name``), with a warning that says why and how to state the pid.
The collector's own processes are never followed.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence

from otel_bridge.component import Endpoint, ProcessInterest, Telemetry
from otel_bridge.identity import canonical_ip, host_id, is_loopback, iso_ms, start_ms_from_ticks
from otel_bridge.model import AnyValue, CollectionState
from otel_bridge.receivers.host.events import HostContext
from otel_bridge.receivers.host.netscan import decode_address, read_tables, socket_inodes
from otel_bridge.receivers.host.procfs import read_stat
from otel_bridge.receivers.host.selectors import Selectors

_STATE_PID = (
    "state it with OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process,host (Python SDK) or on the "
    "resource"
)
"""The advice for a sender the collector could follow had its resource named its pid."""

START_TOLERANCE_MS = 50
"""How far a live pid's start time may be from a stated ``process.creation.time`` (clock-tick
rounding and the SDK's own reading), far below any pid recycling interval."""

_NAMED = 20
"""Unfollowed senders named in the status (the rest are counted)."""
_SERVICES_KEPT = 1024
"""Services remembered for the processes followed by their environment (oldest go first)."""

Peer = tuple[str, int, int]
"""A sender's end of a connection and the receiver's port (``ProcessInterest.peer``)."""

FollowFn = Callable[[int], str]
"""A backend's ``follow(pid)``: ``""`` when it follows ``pid`` now, else why not."""


class Follower:
    """Queues interests, scans selectors, and has every backend adopt each new root."""

    def __init__(
        self,
        ctx: HostContext,
        follow: Sequence[tuple[str, FollowFn]],
        *,
        selectors: Selectors,
        telemetry: Telemetry,
        interval: float,
        logger: logging.Logger,
        settled: Callable[[], None] | None = None,
        listening: Callable[[], tuple[Endpoint, ...]] | None = None,
    ) -> None:
        self._ctx = ctx
        self._listening = listening
        """Where the collector's receivers listen (``Host.listening``), for ``follow_exporters``."""
        self._settled = settled
        """Called once per interest handled (see :meth:`_settle`)."""
        self._log = logger
        self._follow = list(follow)
        self._selectors = selectors
        self._telemetry = telemetry
        self._interval = interval
        self._queue: queue.Queue[ProcessInterest | None] = queue.Queue()
        self._host = host_id()
        self._own = os.getpid()
        self._thread: threading.Thread | None = None
        self._declined: dict[int, int] = {}
        """Selector scan: pid -> start ticks of processes that matched nothing (not re-read)."""
        self.followed = 0
        """Processes followed after start (telemetry or selectors)."""
        self.unnamed = 0
        """Telemetry senders on this host that stated no ``process.pid`` (not followed)."""
        self.unnamed_why: list[str] = []
        """Who each of the first :data:`_NAMED` of them is and why it was not followed."""
        self._by_environment: dict[str, list[int]] = {}
        """``service.name`` -> pids followed because their environment sends here
        (``follow_exporters``), the service their environment names (see :meth:`_unnamed`)."""

    def offer(self, interest: ProcessInterest) -> None:
        """Queue ``interest`` (called on the publisher's thread; returns at once)."""
        self._queue.put(interest)

    def start(self) -> None:
        """Match the selectors once now, then follow in a thread."""
        if self._selectors:
            self.scan()
        self._thread = threading.Thread(target=self._run, name="host-follow", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Handle what is queued, then stop. Safe twice."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        next_scan = time.monotonic() + self._interval
        while True:
            timeout = max(0.0, next_scan - time.monotonic()) if self._selectors else None
            try:
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                pass
            else:
                if item is None:
                    return
                try:
                    self.interest(item)
                finally:
                    self._settle()
            if self._selectors and time.monotonic() >= next_scan:
                self.scan()
                next_scan = time.monotonic() + self._interval

    def _settle(self) -> None:
        """An interest is handled: say so (the receiver sends on what it led to, then tells
        ``ProcessInterests.settle``). A ``strace`` attach has read the held sockets by now; the
        ``linux`` and ``portable`` scans it asked for follow within their interval."""
        if self._settled is not None:
            self._settled()

    def interest(self, interest: ProcessInterest) -> None:
        """Follow the process ``interest`` names if it is this host's and still the same."""
        pid = interest.pid
        if interest.host_id and interest.host_id != self._host:
            self._skip("other_host")
            return
        if pid == 0:
            self._by_peer(interest)
            return
        if pid in self._ctx.lineage or self._is_own(pid):
            return
        stat = read_stat(pid)
        if stat is None:
            self._skip("gone")
            self._record(
                pid,
                interest.start_time_ms,
                CollectionState.UNAVAILABLE,
                f"pid {pid} reported telemetry ({interest.source}) but had exited before it "
                "could be followed: its process, file and network activity is unknown",
            )
            return
        start_ms = start_ms_from_ticks(stat[1])
        expected = interest.start_time_ms
        if expected is not None and abs(start_ms - expected) > START_TOLERANCE_MS:
            self._skip("start_mismatch")
            return
        self._adopt(pid, start_ms, f"it reported its first span ({interest.source})", "telemetry")

    def _by_peer(self, interest: ProcessInterest) -> None:
        """A sender that stated no ``process.pid``: follow the process holding the sender's end
        of the loopback connection its spans came over (the socket tables, now), else record
        its OS activity as unknown."""
        peer = interest.peer
        holders = [] if peer is None else [p for p in socket_holders(*peer) if not self._is_own(p)]
        if not holders:
            self._unnamed(interest)
            return
        who = _who(interest)
        for pid in holders:
            stat = read_stat(pid)
            if pid in self._ctx.lineage or stat is None:
                continue
            why = (
                f"it held the connection over which {who} sent its first span "
                f"({interest.source}; the span's resource named no process.pid)"
            )
            self._adopt(pid, start_ms_from_ticks(stat[1]), why, "sender", peer)

    def _unnamed(self, interest: ProcessInterest) -> None:
        """A sender that stated no ``process.pid`` and whose connection no process holds (not
        loopback, or closed already): nothing to follow, so its OS activity is recorded as
        unknown (``lineage`` ``unavailable``), never left to look absent.

        Unless processes whose environment names the same ``service.name`` were followed from
        their start (``follow_exporters``): one of them most likely sent it (an SDK that sends
        at exit has closed its connection by now), so it is not said to be unfollowed; which
        process sent it is for the correlator to find (the connection its records hold)."""
        who = _who(interest)
        env_followed = self._by_environment.get(interest.service) if interest.service else None
        if env_followed:
            self._skip("by_environment")
            self._log.info(
                "%s sent spans without process.pid over a connection no process holds any "
                "more; pid(s) %s, whose environment names this service and sends here, were "
                "followed from their start",
                who,
                ", ".join(str(p) for p in env_followed),
            )
            return
        self.unnamed += 1
        self._skip("no_pid")
        peer = interest.peer
        owner = None if peer is None else socket_owner(*peer)
        if peer is None:
            why = "no transport peer was recorded"
            advice = _STATE_PID
        elif not is_loopback(canonical_ip(peer[0]) or ""):
            why = f"it came from another host ({peer[0]})"
            advice = "observe it with a collector on its own host"
        elif owner is not None and owner != os.geteuid():
            why = (
                f"the connection it came over is held by another user's process (uid {owner}), "
                f"whose descriptors this collector (uid {os.geteuid()}) may not read: run the "
                "collector as that user or as root"
            )
            advice = ""
        else:
            why = "no process of this host held the connection it came over any more"
            advice = (
                "it most likely exited after sending (an SDK's batch span processor sends at "
                "exit), too late to follow: follow it from its start with a host receiver "
                "selector (command, executable, cgroup or user; unless one already does) or run "
                "it under `otel-bridge observe`"
            )
        if len(self.unnamed_why) < _NAMED:
            self.unnamed_why.append(f"{who}: {why}")
        # once per sender (the pipeline publishes each sender's interest once)
        self._log.warning(
            "%s sent spans without process.pid (and %s): its process is not followed%s",
            who,
            why,
            f"; {advice}" if advice else "",
        )
        self._record(
            None,
            None,
            CollectionState.UNAVAILABLE,
            f"{who} reported telemetry ({interest.source}) without process.pid on its resource, "
            f"and {why}: the process that sent it could not be followed, so its process, file "
            "and network activity is unknown",
            peer,
        )

    def scan(self) -> None:
        """Follow every running process a selector matches (outside the lineage)."""
        live: dict[int, int] = {}
        listening: list[tuple[str, int]] = []
        if self._selectors.exporters and self._listening is not None:
            listening = [(e.host, e.port) for e in self._listening()]
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid in self._ctx.lineage:
                continue
            stat = read_stat(pid)
            if stat is None:
                continue
            live[pid] = stat[1]
            if self._declined.get(pid) == stat[1] and not self._selectors.rescan:
                continue  # uid/cgroup/exe seldom change; a command line changes on exec
            how, service = self._selectors.match(pid, listening)
            if not how:
                self._declined[pid] = stat[1]
                continue
            if stat[0] in self._ctx.lineage or self._is_own(pid):
                continue  # its parent is followed (the backends add it), or it is ours
            followed = self._adopt(
                pid, start_ms_from_ticks(stat[1]), f"it matched {how}", "selector"
            )
            if followed and service:
                self._note_service(service, pid)
        self._declined = {p: t for p, t in self._declined.items() if live.get(p) == t}

    def _is_own(self, pid: int) -> bool:
        """The collector or one of its helpers: a child running strace or the exec image reader
        (``python -S -c``). Other children of the collector's process (a test's) are not."""
        if pid == self._own:
            return True
        stat = read_stat(pid)
        if stat is None or stat[0] != self._own:
            return False
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            return False
        return os.path.basename(argv[0]) == b"strace" or argv[1:3] == [b"-S", b"-c"]

    def _note_service(self, service: str, pid: int) -> None:
        """Remember that ``pid``, followed for its environment, names ``service`` there."""
        pids = self._by_environment.setdefault(service, [])
        pids.append(pid)
        del pids[:-_NAMED]
        while len(self._by_environment) > _SERVICES_KEPT:
            del self._by_environment[next(iter(self._by_environment))]

    def _adopt(self, pid: int, start_ms: int, why: str, how: str, peer: Peer | None = None) -> bool:
        """Have every backend follow ``pid``; whether they all do."""
        reasons = [f"{name}: {r}" for name, fn in self._follow if (r := fn(pid))]
        if reasons:
            self._skip("backend")
            self._log.warning("pid %d (%s) not followed: %s", pid, why, "; ".join(reasons))
            self._record(
                pid,
                start_ms,
                CollectionState.UNAVAILABLE,
                f"pid {pid} ({why}) could not be followed: {'; '.join(reasons)}",
                peer,
            )
            return False
        self.followed += 1
        self._telemetry.count("follow.followed", label=how)
        self._log.info("following pid %d from now: %s", pid, why)
        self._record(
            pid,
            start_ms,
            CollectionState.DEGRADED,
            f"pid {pid} followed from {iso_ms(time.time_ns() // 1_000_000)}, when {why}: its "
            "earlier process, file and network activity (and that of children that exited "
            "before) was not observed",
            peer,
        )
        return True

    def _skip(self, reason: str) -> None:
        self._telemetry.count("follow.skipped", label=reason)

    def _record(
        self,
        pid: int | None,
        start_ms: int | None,
        state: CollectionState,
        reason: str,
        peer: Peer | None = None,
    ) -> None:
        """Emit the ``lineage`` record of one follow (or failure to follow). ``peer``: the
        sender's end of the connection the interest's spans came over, when the follow was
        by it (the resource stated no ``process.pid``), as ``network.peer.address`` and
        ``network.peer.port``: what ties a pidless sender's spans to this record."""
        attrs: dict[str, AnyValue] = {
            "collection.name": "lineage",
            "collection.state": str(state),
            "collection.reason": reason,
        }
        if pid is not None:
            attrs["process.pid"] = pid
        if start_ms is not None:
            attrs["process.creation.time"] = iso_ms(start_ms)
        if peer is not None:
            attrs["network.peer.address"] = peer[0]
            attrs["network.peer.port"] = peer[1]
        ctx = self._ctx
        ctx.emit(ctx.events.record("collection.state", time.time_ns(), attrs, attribution=None))


def _who(interest: ProcessInterest) -> str:
    who = f"service {interest.service or '(unnamed)'}"
    if interest.instance_id:
        who += f" (service.instance.id {interest.instance_id})"
    return who


def socket_owner(address: str, port: int, remote_port: int) -> int | None:
    """The uid owning the live TCP socket whose local end is ``address``:``port`` and whose
    remote end is a loopback address at ``remote_port`` (this network namespace's
    ``/proc/net/tcp{,6}``; the socket :func:`socket_holders` looks for), None when there is
    none: tells a sender this user may not inspect from one that is gone."""
    ip = canonical_ip(address)
    if ip is None or not is_loopback(ip):
        return None
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/self/net/{name}", encoding="ascii") as f:
                rows = [line.split() for line in f.read().splitlines()[1:]]
        except OSError:
            continue
        for parts in rows:
            if len(parts) < 10 or parts[9] == "0":
                continue
            laddr, lport = decode_address(parts[1])
            if (
                lport == port
                and canonical_ip(laddr) == ip
                and decode_address(parts[2])[1] == remote_port
                and is_loopback(canonical_ip(decode_address(parts[2])[0]) or "")
                and parts[7].isdigit()
            ):
                return int(parts[7])
    return None


def socket_holders(address: str, port: int, remote_port: int) -> list[int]:
    """The processes holding the TCP socket whose local end is ``address``:``port`` and whose
    remote end is a loopback address at ``remote_port`` (this network namespace's tables, each
    process's ``/proc/<pid>/fd``); none for a peer that is not loopback or a socket gone. Several
    when a fork shares it. Only processes this user may read are seen."""
    ip = canonical_ip(address)
    if ip is None or not is_loopback(ip):
        return []
    inodes = {
        inode
        for inode, (transport, laddr, lport, raddr, rport, _) in read_tables(os.getpid()).items()
        if transport == "tcp"
        and lport == port
        and rport == remote_port
        and canonical_ip(laddr) == ip
        and is_loopback(canonical_ip(raddr) or "")
    }
    inodes.discard(0)  # a socket in TIME_WAIT is held by no process
    if not inodes:
        return []
    return sorted(
        int(name)
        for name in os.listdir("/proc")
        if name.isdigit() and inodes.intersection(socket_inodes(int(name)))
    )
