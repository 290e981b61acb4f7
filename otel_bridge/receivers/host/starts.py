"""A forked child's ``process.start`` carries only what that process itself ran, or nothing.

At fork time ``/proc/<child>`` shows the *parent's* image (executable and argv) until the child
calls ``exec``; under load a reader can see it there, and a record built from it labels a ``cp``
child ``python3.11`` with the parent's argv (issue 12). So the event-driven backends hold each
forked child's ``process.start`` in a :class:`StartGate`:

* when the child execs, the start is emitted with the identity only (pid, start time, parent)
  and the ``process.exec`` record that follows carries the new image;
* when the child has not exec'd for a moment (``read_after``), its image is read (see
  :func:`read_image`) and kept; the start is emitted with it when the child exits without
  exec'ing, after ``emit_after``, or when observation stops. An exec that arrives first drops the
  kept image, so a kept image is always one the process ran itself;
* a child that exits before its image could be read gets an identity-only start.

An exec whose new image cannot be read (the process exited first, or its pid already belongs
to another process) yields a ``process.exec`` *without* ``process.command_args`` and counts
``argv_unknown`` (counter ``receiver.<id>.argv_unknown``; the per-run total is noted on the
process collection when observation stops).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field

from otel_bridge.identity import start_ms_from_ticks
from otel_bridge.model import CollectionState, LogRecord
from otel_bridge.receivers.host.events import HostContext
from otel_bridge.receivers.host.execreader import SAME_START_MS, ExecReader, Image
from otel_bridge.receivers.host.procfs import ProcessInfo, read_process, read_stat

READ_AFTER_S = 0.02
EMIT_AFTER_S = 1.0
HELPER_WAIT_S = 10.0
"""How long an exec the backend could not read itself waits at most for the helper's answer
(:meth:`ExecReader.drain`): only a helper that neither answers nor ends takes that long."""


def read_image(ctx: HostContext, pid: int, start_ms: int) -> ProcessInfo | None:
    """``pid``'s current image, only when it provably belongs to identity ``(pid, start_ms)``.

    The start time is checked before and after (a recycled pid is another process) and the
    executable link is read before and after the argv (an exec in between would pair one image's
    executable with another's argv). None when any check fails or the process is gone.
    """
    if _start_ms(pid) != start_ms:
        return None
    try:
        exe_before = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    info = read_process(pid, ctx.redactor, capture_environment=ctx.config.capture_environment)
    if info is None or info.start_ms != start_ms or not info.argv:
        return None
    exe_after = ""
    with contextlib.suppress(OSError):
        exe_after = os.readlink(f"/proc/{pid}/exe")
    if exe_after != exe_before or info.exe != exe_before or _start_ms(pid) != start_ms:
        return None
    return info


def _start_ms(pid: int) -> int | None:
    stat = read_stat(pid)
    return None if stat is None else start_ms_from_ticks(stat[1])


def _same_start(known: ProcessInfo, start_ms: int) -> bool:
    """Whether a start read at the exec is ``known``'s (an approximate one: close to it)."""
    slack = SAME_START_MS if known.approximate else 0
    return abs(known.start_ms - start_ms) <= slack


def identity_only(info: ProcessInfo) -> ProcessInfo:
    """``info`` without any image (executable, argv, cwd, environment)."""
    return ProcessInfo(
        pid=info.pid, start_ms=info.start_ms, ppid=info.ppid, approximate=info.approximate
    )


@dataclass(slots=True)
class _Late:
    known: ProcessInfo
    time_ns: int
    since: float
    held: list[LogRecord]
    """The child's held start and any record of it that came meanwhile (its exit)."""
    event_ns: int
    """The exec event's kernel timestamp (0 when unknown)."""
    answer: int
    """The helper's answer (:meth:`ExecReader.drain`) after which its image of this exec, if it
    read one, is in hand."""


@dataclass(slots=True)
class _Pending:
    info: ProcessInfo
    time_ns: int
    since: float
    image: ProcessInfo | None = None
    tried: bool = False
    held: list[LogRecord] = field(default_factory=list)
    """Records about the child that arrived while its start was held (file events)."""


class StartGate:
    """Holds forked children's starts until their own image is known (module docstring)."""

    def __init__(
        self,
        ctx: HostContext,
        *,
        attribution: str,
        read_after: float = READ_AFTER_S,
        emit_after: float = EMIT_AFTER_S,
    ) -> None:
        self.ctx = ctx
        self._attribution = attribution
        self._read_after = read_after
        self._emit_after = emit_after
        self._pending: dict[int, _Pending] = {}
        self.images: ExecReader | None = None
        """The exec image helper (:mod:`.execreader`), when the backend runs one."""
        self._late_lock = threading.Lock()
        self._late: dict[int, _Late] = {}
        """Execs waiting for the helper's image, with the records held behind them."""
        self.argv_unknown = 0
        """Execs whose argv could not be read (their records omit ``process.command_args``)."""
        self.image_unknown = 0
        """Forked children that exited before exec with no image read (identity-only start)."""

    def __bool__(self) -> bool:
        return bool(self._pending or self._late)

    def forked(self, info: ProcessInfo, time_ns: int) -> None:
        """A new child ``info`` (identity and parent only) forked at ``time_ns``."""
        self.ctx.events.remember(info)
        with self._late_lock:
            self._pending[info.pid] = _Pending(identity_only(info), time_ns, time.monotonic())

    def _pop(self, pid: int) -> _Pending | None:
        with self._late_lock:
            return self._pending.pop(pid, None)

    def execed(self, pid: int) -> None:
        """``pid`` exec'd: its start goes out now, with the identity only."""
        pending = self._pop(pid)
        if pending is not None:
            self._emit(pending.info, pending.time_ns)
            self._release(pending.held)

    def exited(self, pid: int) -> None:
        """``pid`` exited: its start goes out with the image it ran, if one was read."""
        pending = self._pop(pid)
        if pending is None:
            return
        if pending.image is None:
            self.image_unknown += 1
            self.ctx.telemetry.count("image_unknown")
        self._emit(pending.image or pending.info, pending.time_ns)
        self._release(pending.held)

    def _release(self, records: list[LogRecord]) -> None:
        for record in records:
            self.ctx.emit(record)

    def exec_event(
        self, pid: int, known: ProcessInfo | None, time_ns: int, *, event_ns: int = 0
    ) -> None:
        """``pid`` exec'd at ``time_ns``: emit its held start, then its ``process.exec``.

        The helper's image of this very exec event (kernel timestamp ``event_ns``) is used when
        it has one (read at the exec, so exact even when this event is read late); else the
        image is read here; when the process is already gone the helper's image for the
        same identity is used, now or from :meth:`due` once the helper has handled every event
        it had queued (:meth:`ExecReader.drain`: queue order, not a timeout); when the helper
        read none, the record omits the argv and ``argv_unknown`` is counted.
        """
        taken = self.images.take_event(pid, event_ns) if self.images and event_ns else None
        if taken is not None and (known is None or _same_start(known, taken[0])):
            base = known or ProcessInfo(pid=pid, start_ms=taken[0])
            self._emit_exec(self._from_image(base, taken[1]), time_ns)
            self.execed(pid)
            return
        start_ms = known.start_ms if known is not None else _start_ms(pid)
        info = read_image(self.ctx, pid, start_ms) if start_ms is not None else None
        if info is None and self.images is not None and known is not None:
            image = self.images.take_exec(
                pid, known.start_ms, event_ns, approximate=known.approximate
            )
            if image is None:
                pending = self._pending.pop(pid, None)
                held = (
                    [] if pending is None else [self._start_record(pending.info, pending.time_ns)]
                )
                answer = self.images.drain()
                self._late[pid] = _Late(known, time_ns, time.monotonic(), held, event_ns, answer)
                return
            info = self._from_image(known, image)
        if info is None:
            info = self.exec_image(pid, known)  # counts the unknown argv
        elif known is not None:
            info.ppid = known.ppid or info.ppid
            info.approximate = known.approximate
        self._emit_exec(info, time_ns)
        self.execed(pid)  # after the exec: a node is named by its first record that names it

    def emit_for(self, pid: int, record: LogRecord) -> None:
        """Emit ``record`` about ``pid``, or hold it behind the records that name the process.

        While ``pid``'s start is held (its image is not known yet) or its exec waits for the
        helper's image, its other records wait too, so the first record of the process that a
        consumer sees is the one naming its image.
        """
        with self._late_lock:
            held = self._late.get(pid) or self._pending.get(pid)
            if held is not None:
                held.held.append(record)
                return
        self.ctx.emit(record)

    def _from_image(self, known: ProcessInfo, image: Image) -> ProcessInfo:
        return ProcessInfo(
            pid=known.pid,
            start_ms=known.start_ms,
            ppid=known.ppid,
            approximate=known.approximate,
            exe=image.exe,
            argv=self.ctx.redactor.argv(image.argv),
            cwd=image.cwd,
            traceparent=image.traceparent,
        )

    def _resolve_late(self, wait: float) -> None:
        images = self.images
        deadline = time.monotonic() + wait
        for pid, late in list(self._late.items()):
            known = late.known
            image, answered = None, True
            if images is not None:  # the answer first: an image line comes before it
                answered = images.drained(late.answer, max(0.0, deadline - time.monotonic()))
                image = images.take_exec(
                    pid, known.start_ms, late.event_ns, approximate=known.approximate
                )
            if image is not None:
                info = self._from_image(known, image)
            elif answered or time.monotonic() - late.since >= HELPER_WAIT_S:
                self.unknown_argv()
                info = identity_only(known)
            else:
                continue
            self._emit_exec(info, late.time_ns)
            with self._late_lock:
                del self._late[pid]
                held = late.held
            for record in held:
                self.ctx.emit(record)

    def _emit_exec(self, info: ProcessInfo, time_ns: int) -> None:
        ctx = self.ctx
        ctx.events.remember(info)
        if ctx.config.processes:
            ctx.emit(
                ctx.events.process_event(
                    "process.exec", info, time_ns, attribution=self._attribution
                )
            )

    def due(self) -> None:
        """Read the images of children that have not exec'd; emit the long-pending starts."""
        if self._late:
            self._resolve_late(0.0)
        if not self._pending:
            return
        now = time.monotonic()
        for pid, pending in list(self._pending.items()):
            age = now - pending.since
            if age >= self._read_after and not pending.tried:
                pending.tried = True
                pending.image = read_image(self.ctx, pid, pending.info.start_ms)
                if pending.image is not None:
                    pending.image.ppid = pending.info.ppid
                    pending.image.approximate = pending.info.approximate
            if age >= self._emit_after:
                self.exited(pid)

    def flush(self) -> None:
        """Emit every held start (observation stops); reads the images not read yet."""
        for pending in self._pending.values():
            pending.tried = pending.tried and pending.image is not None
            pending.since = 0.0
        self._resolve_late(HELPER_WAIT_S)
        self.due()
        if self.argv_unknown:
            self.ctx.telemetry.note("host.argv_unknown", str(self.argv_unknown))
            state, reason = self.ctx.states.get("process", ("", ""))
            note = (
                f"{self.argv_unknown} exec(s) whose argv could not be read (the process exited "
                "first): their records omit process.command_args"
            )
            if state in (CollectionState.AVAILABLE, CollectionState.DEGRADED):
                brief = self.ctx.briefs.get("process", "")
                short = f"{self.argv_unknown} exec(s) without argv (exited first)"
                self.ctx.collection_state(
                    "process",
                    CollectionState.DEGRADED,
                    f"{reason}; {note}" if reason else note,
                    f"{brief}; {short}" if brief else short,
                )

    def exec_image(self, pid: int, known: ProcessInfo | None) -> ProcessInfo:
        """The image ``pid`` exec'd, read now; identity-only (argv unknown, counted) if gone."""
        start_ms = known.start_ms if known is not None else _start_ms(pid)
        info = read_image(self.ctx, pid, start_ms) if start_ms is not None else None
        if info is not None:
            if known is not None:
                info.ppid = known.ppid or info.ppid
                info.approximate = known.approximate
            return info
        self.unknown_argv()
        if known is not None:
            return identity_only(known)
        return ProcessInfo(pid=pid, start_ms=start_ms or 0, approximate=True)

    def unknown_argv(self) -> None:
        """Count one exec whose argv is unknown."""
        self.argv_unknown += 1
        self.ctx.telemetry.count("argv_unknown")

    def _start_record(self, info: ProcessInfo, time_ns: int) -> LogRecord:
        return self.ctx.events.process_event(
            "process.start", info, time_ns, attribution=self._attribution
        )

    def _emit(self, info: ProcessInfo, time_ns: int) -> None:
        ctx = self.ctx
        ctx.events.remember(info)
        if ctx.config.processes:
            ctx.emit(self._start_record(info, time_ns))
