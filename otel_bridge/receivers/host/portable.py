"""The ``portable`` backend: psutil sampling plus watchdog file notifications.

Works wherever psutil and watchdog do (Linux, macOS, Windows) and needs no privilege. Every
``poll_interval`` (minimum 5 ms) it lists the machine's pids, adds new processes whose parent is
in the lineage, reports the ones that disappeared, and samples each tracked process's
connections, and notices an exec when a tracked process's arguments changed between two samples
(``process.exec``). Attribution is ``sampled_process``: a process or socket whose whole lifetime
falls between two samples is missed (ExecWeave section V-C), and scheduling delay widens that
window.
Exit codes are not observable by sampling. The first sample of a process followed while it ran
(:meth:`PortableBackend.follow`) records the connections it holds as found then
(``network.observed_at=attach``, ``network.found_by=psutil``): opened before, when is unknown.

Files: watchdog under ``watch_paths`` yields ``file.change`` records, attribution
``session_observation`` and ``evidence.causal=false``: a notification does not say which process
made the change.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from otel_bridge.identity import psutil_start_ms
from otel_bridge.model import AnyValue, CollectionState
from otel_bridge.receivers.host.direction import (
    Direction,
    DirectionRule,
    undecided_brief,
    undecided_note,
)
from otel_bridge.receivers.host.events import SAMPLED, SESSION, HostContext
from otel_bridge.receivers.host.netscan import FOUND_AT_ATTACH
from otel_bridge.receivers.host.procfs import ProcessInfo

_CHANGE_TYPES = {"created": "created", "modified": "modified", "deleted": "deleted"}


class _Handler(FileSystemEventHandler):
    """Forwards every watchdog event to one callback."""

    def __init__(self, callback: Callable[[Any], None]) -> None:
        super().__init__()
        self._callback = callback

    def on_any_event(self, event: FileSystemEvent) -> None:
        """Forward ``event``."""
        self._callback(event)


def _image(proc: psutil.Process) -> tuple[str, ...]:
    """The raw argv of a process, to notice an exec between samples.

    Only the arguments are compared: psutil caches ``exe()`` per ``Process`` object, so the
    executable is re-read from a fresh object once the arguments changed.
    """
    return tuple(proc.cmdline())


class PortableBackend:
    """psutil polling + watchdog (see the module docstring)."""

    name = "portable"

    def __init__(self) -> None:
        self.why = "psutil sampling and watchdog notifications: no privilege needed"
        self._ctx: HostContext | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._observer: Any = None
        self._known: dict[int, tuple[str, ...]] = {}
        """Tracked pids with their last sampled argv, to notice an exec."""
        self._procs: dict[int, psutil.Process] = {}
        self._outside: set[int] = set()
        """pids seen outside the lineage; not examined again while they live."""
        self._conns: set[tuple[int, str, str, int, str, int, str]] = set()
        self._fresh: set[int] = set()
        """Pids followed whose connections no poll has sampled yet: what their first sample
        finds was held when they were followed (``network.observed_at=attach``)."""
        self.rule = DirectionRule()
        """Decides accepted vs initiated for sampled established sockets (:mod:`.direction`)."""
        self.undecided = 0
        self._noted = False
        """Established sockets whose direction could not be decided (no connect claimed)."""
        self.polls = 0
        self.poll_seconds = 0.0
        self._poll_lock = threading.Lock()
        """Serialises a poll with :meth:`follow` (which runs on the receiver's thread)."""

    def follow(self, pid: int) -> str:
        """Adopt ``pid`` and its running descendants into the sampled lineage; ``""``."""
        ctx = self._ctx
        if ctx is None:
            return "portable: not running"
        with self._poll_lock:
            for adopted in ctx.adopt(pid):
                self._outside.discard(adopted)
                self._fresh.add(adopted)
                try:
                    proc = psutil.Process(adopted)
                    self._known[adopted] = _image(proc)
                except (psutil.Error, OSError):
                    continue
                self._procs[adopted] = proc
        return ""

    def start(self, ctx: HostContext) -> None:
        """Take the first sample synchronously, then poll in a thread."""
        self._ctx = ctx
        cfg = ctx.config
        interval_ms = f"{cfg.poll_interval * 1000:g}ms"
        if cfg.processes:
            ctx.collection_state(
                "process",
                CollectionState.DEGRADED,
                f"psutil sampling every {interval_ms}: processes living less than one interval "
                "can be missed; exit codes unknown",
                f"sampled every {interval_ms}: short-lived processes and exit codes missed",
            )
        else:
            ctx.collection_state("process", CollectionState.NOT_REQUESTED, "processes: false")
        if cfg.network:
            ctx.collection_state(
                "network",
                CollectionState.DEGRADED,
                f"psutil connection sampling every {interval_ms}: short sockets can be missed",
                f"sampled every {interval_ms}: short-lived connections missed",
            )
        else:
            ctx.collection_state("network", CollectionState.NOT_REQUESTED, "network: false")
        self._start_watchdog(ctx)
        self._poll()
        self._thread = threading.Thread(target=self._run, name="host-portable", daemon=True)
        self._thread.start()

    def _start_watchdog(self, ctx: HostContext) -> None:
        cfg = ctx.config
        if not cfg.files:
            ctx.collection_state("file", CollectionState.NOT_REQUESTED, "files: false")
            return
        if not cfg.watch_paths:
            ctx.collection_state(
                "file",
                CollectionState.NOT_SAMPLED,
                "no watch_paths configured for watchdog",
                "no watch_paths configured",
            )
            return
        observer = Observer()
        for path in cfg.watch_paths:
            observer.schedule(_Handler(self._file_event), path, recursive=True)
        observer.start()
        self._observer = observer
        ctx.collection_state(
            "file",
            CollectionState.DEGRADED,
            f"watchdog on {', '.join(cfg.watch_paths)}: session-correlated, non-causal "
            "(the changing process is unknown)",
            "watchdog on the watch_paths: which process changed a file is unknown",
        )

    def _file_event(self, event: Any) -> None:
        ctx = self._ctx
        if ctx is None or event.is_directory:
            return
        kind = str(event.event_type)
        path = os.fsdecode(event.src_path)
        if any(path == p or path.startswith(p + os.sep) for p in ctx.exclude_paths):
            return  # the collector's own output
        attrs: dict[str, AnyValue] = {"file.path": path}
        if kind == "moved":
            attrs["file.change.type"] = "moved"
            attrs["file.new_path"] = os.fsdecode(event.dest_path)
        elif kind in _CHANGE_TYPES:
            attrs["file.change.type"] = _CHANGE_TYPES[kind]
        else:
            return  # opened/closed notifications carry no change
        ctx.emit(
            ctx.events.record(
                "file.change", time.time_ns(), attrs, attribution=SESSION, causal=False
            )
        )

    def _run(self) -> None:
        assert self._ctx is not None
        interval = self._ctx.config.poll_interval
        next_at = time.monotonic() + interval
        while not self._stop.wait(max(0.0, next_at - time.monotonic())):
            with self._poll_lock:
                self._poll()
            next_at += interval
            now = time.monotonic()
            if next_at < now:  # overran: skip, do not burst
                next_at = now + interval

    def _poll(self) -> None:
        ctx = self._ctx
        assert ctx is not None
        began = time.perf_counter()
        now = time.time_ns()
        current = set(psutil.pids())
        fresh = sorted(current - set(self._known) - self._outside)
        for pid in fresh:
            self._consider(pid, now)
        # a child listed before its (also new) parent: look again once the parent is known
        for pid in fresh:
            if pid in self._outside and pid not in self._known:
                self._outside.discard(pid)
                self._consider(pid, now)
        self._outside &= current
        for pid in sorted(set(self._known) - current):
            del self._known[pid]
            self._procs.pop(pid, None)
            ctx.lineage.discard(pid)
            if ctx.config.processes:
                ctx.emit(ctx.events.exit_event(pid, now, None, attribution=SAMPLED))
        if ctx.config.processes:
            for pid in sorted(set(self._known) - set(fresh)):
                self._check_exec(pid, now)
        if ctx.config.network:
            for pid in sorted(self._known):
                self._sample_connections(pid, now)
        self.polls += 1
        self.poll_seconds += time.perf_counter() - began

    def _consider(self, pid: int, now: int) -> None:
        ctx = self._ctx
        assert ctx is not None
        try:
            proc = psutil.Process(pid)
            ppid = proc.ppid() if pid != ctx.lineage.root else 0
            if pid != ctx.lineage.root and ppid not in ctx.lineage:
                self._outside.add(pid)
                return
            info = self._read(proc, ppid)
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return
        except psutil.AccessDenied:
            return
        ctx.lineage.add(pid)
        try:
            self._known[pid] = _image(proc)
        except (psutil.Error, OSError):
            self._known[pid] = ()
        self._procs[pid] = proc
        ctx.events.remember(info)
        if ctx.config.processes:
            ctx.emit(ctx.events.process_event("process.start", info, now, attribution=SAMPLED))

    def _check_exec(self, pid: int, now: int) -> None:
        """Report a ``process.exec`` when a tracked process's image or arguments changed."""
        ctx = self._ctx
        assert ctx is not None
        proc = self._procs.get(pid)
        if proc is None:
            return
        try:
            image = _image(proc)
            if image == self._known.get(pid) or not image:
                return
            info = self._read(psutil.Process(pid), ctx.events.processes[pid].ppid)
        except (psutil.Error, OSError, KeyError):
            return
        self._known[pid] = image
        ctx.events.remember(info)
        ctx.emit(ctx.events.process_event("process.exec", info, now, attribution=SAMPLED))

    def _read(self, proc: psutil.Process, ppid: int) -> ProcessInfo:
        ctx = self._ctx
        assert ctx is not None
        info = ProcessInfo(pid=proc.pid, start_ms=psutil_start_ms(proc.create_time()), ppid=ppid)
        with proc.oneshot():
            for attr, getter in (("exe", proc.exe), ("cwd", proc.cwd)):
                with contextlib.suppress(psutil.AccessDenied, psutil.ZombieProcess, OSError):
                    setattr(info, attr, getter())
            with contextlib.suppress(psutil.AccessDenied, psutil.ZombieProcess, OSError):
                info.argv = ctx.redactor.argv(proc.cmdline())
            try:
                env = proc.environ()
            except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
                env = {}
            info.traceparent = env.get("TRACEPARENT", "")
            if ctx.config.capture_environment:
                info.env = ctx.redactor.env(env)
        return info

    def _sample_connections(self, pid: int, now: int) -> None:
        ctx = self._ctx
        assert ctx is not None
        held = pid in self._fresh
        self._fresh.discard(pid)
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return
        for c in conns:
            if str(c.status) == psutil.CONN_LISTEN and c.laddr:
                self.rule.saw_listener("tcp", int(c.laddr[1]))
        for c in conns:
            transport = "tcp" if c.type == 1 else "udp"  # SOCK_STREAM
            laddr = c.laddr if c.laddr else ("", 0)
            raddr = c.raddr if c.raddr else ("", 0)
            status = str(c.status)
            key = (pid, "", str(laddr[0]), int(laddr[1]), str(raddr[0]), int(raddr[1]), status)
            if key in self._conns:
                continue
            self._conns.add(key)
            name = self._event_name(transport, status, laddr, raddr)
            if name is None:
                continue
            attrs: dict[str, AnyValue] = ctx.events.identity_attrs(pid)
            attrs["network.transport"] = transport
            attrs["network.local.address"] = str(laddr[0])
            attrs["network.local.port"] = int(laddr[1])
            if name != "network.listen":
                attrs["network.peer.address"] = str(raddr[0])
                attrs["network.peer.port"] = int(raddr[1])
            if name == "network.connect_attempt":
                attrs["network.connect.result"] = "pending"
                attrs["error.type"] = "EINPROGRESS"
            if held:  # opened before the follow, or between it and this sample: when is unknown
                attrs["network.observed_at"] = FOUND_AT_ATTACH
                attrs["network.found_by"] = "psutil"
            ctx.emit(ctx.events.record(name, now, attrs, attribution=SAMPLED))

    def _event_name(self, transport: str, status: str, laddr: Any, raddr: Any) -> str | None:
        """The record one sampled socket yields, None for none (accepted, undecided, idle)."""
        if status == psutil.CONN_LISTEN:
            return "network.listen"
        if not raddr[0]:
            return None
        if status == psutil.CONN_SYN_SENT:
            return "network.connect_attempt"
        if transport == "udp" and status == psutil.CONN_NONE:
            return "network.connect"
        if status != psutil.CONN_ESTABLISHED:
            return None
        args = ("tcp", str(laddr[0]), int(laddr[1]), str(raddr[0]), int(raddr[1]))
        direction = self.rule.decide(*args)
        if direction is Direction.UNKNOWN:
            self._refresh_listeners()
            direction = self.rule.decide(*args)
        if direction is Direction.INITIATED:
            return "network.connect"
        if direction is Direction.UNKNOWN:
            self.undecided += 1
            assert self._ctx is not None
            self._ctx.telemetry.count("network.direction_unknown")
        return None

    def _refresh_listeners(self) -> None:
        """Learn the machine's listening TCP ports (only when a socket's direction is open)."""
        try:
            conns = psutil.net_connections(kind="tcp")
        except (psutil.Error, OSError):  # a process vanishing mid-listing, or no permission
            return
        for c in conns:
            if str(c.status) == psutil.CONN_LISTEN and c.laddr:
                self.rule.saw_listener("tcp", int(c.laddr[1]))

    def stop(self) -> None:
        """Stop polling and watching. Safe twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._observer is not None:
            self._observer.stop()
            self._observer.join()
            self._observer = None
        if self._ctx is not None and self.undecided and not self._noted:
            self._noted = True
            note = undecided_note(self.undecided)
            brief = self._ctx.briefs.get("network", "")
            self._ctx.collection_state(
                "network",
                CollectionState.DEGRADED,
                note,
                f"{brief}; {undecided_brief(self.undecided)}".lstrip("; "),
            )
