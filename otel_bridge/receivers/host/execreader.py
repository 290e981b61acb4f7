"""A helper process that reads each exec'd image of the lineage the moment the kernel reports it.

A 5 ms child is often gone before the collector's event reader gets to ``/proc/<pid>/cmdline``:
that thread shares the interpreter lock with fanotify, the socket scans and the pipeline. The
helper is a separate, minimal Python process (standard library only, started with ``-S``) that
subscribes to the process connector itself, follows the lineage's forks, and on each exec of a
lineage process reads ``stat``, ``exe``, ``cmdline``, ``cwd`` and ``TRACEPARENT`` with the same
consistency checks as :func:`.starts.read_image` (start time and executable unchanged across the
read). It runs at real-time priority when allowed and writes one line per exec to a pipe; the
backend uses a line only for the identity ``(pid, start time)`` it already knows, so a recycled
pid can never lend its image. Pids written to its standard input (whitespace-separated) are
tracked too; it stops when its standard input closes (the collector is gone).
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from otel_bridge.arming import HELPER, start_helper, stop_helper
from otel_bridge.identity import start_ms_from_ticks
from otel_bridge.receivers.host.release import release

__all__ = ["HELPER", "ExecReader", "Image", "parse_fork", "parse_line"]


@dataclass(frozen=True, slots=True)
class Image:
    """An exec'd image as the helper read it."""

    exe: str
    argv: list[str]
    cwd: str
    traceparent: str
    event_ns: int = 0
    """The exec event's kernel timestamp (CLOCK_MONOTONIC ns), 0 when the line had none."""


def parse_line(line: bytes) -> tuple[int, int, Image] | None:
    """``(pid, start ms, image)`` from one helper exec line, None when malformed."""
    parts = line.rstrip(b"\n").split(b" ")
    if len(parts) not in (6, 7):
        return None
    try:
        pid, ticks = int(parts[0]), int(parts[1])
        exe, cmd, cwd, tp = (bytes.fromhex(p.decode("ascii")) for p in parts[2:6])
        event_ns = int(parts[6]) if len(parts) == 7 else 0
    except ValueError:
        return None
    argv = [a.decode("utf-8", "surrogateescape") for a in cmd.rstrip(b"\0").split(b"\0")]
    image = Image(
        exe=exe.decode("utf-8", "surrogateescape"),
        argv=argv,
        cwd=cwd.decode("utf-8", "surrogateescape"),
        traceparent=tp.decode("ascii", "replace"),
        event_ns=event_ns,
    )
    return pid, start_ms_from_ticks(ticks), image


def parse_fork(line: bytes) -> tuple[int, int, int, int] | None:
    """``(pid, start ms, parent pid, fork event ns)`` from one helper fork line (``F ...``)."""
    parts = line.rstrip(b"\n").split(b" ")
    if len(parts) != 5 or parts[0] != b"F":
        return None
    try:
        pid, ticks, ppid, event_ns = (int(p) for p in parts[1:])
    except ValueError:
        return None
    return pid, start_ms_from_ticks(ticks), ppid, event_ns


SAME_START_MS = 1000
"""An approximate start (read from the fork event's time) names the process whose start read
at its exec is this close: the same pid in the lineage, within a second of its fork. A process
whose start is further than this from its fork event is another one that reuses the pid (the
child exited before its fork event was read: the ``linux`` backend's fork identity)."""

_KEEP = 4096
"""Images and fork identities kept at most (the oldest go first)."""


class ExecReader:
    """Runs the helper and keeps its recent images by identity (see the module docstring).

    ``process``: a helper already started (:func:`otel_bridge.arming.start_helper`, armed before
    the collector was built); its lines written meanwhile wait in the pipe and are read now."""

    def __init__(
        self,
        pids: list[int],
        *,
        startup_timeout: float = 5.0,
        process: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self._proc = process or start_helper(pids, timeout=startup_timeout)
        self._images: dict[tuple[int, int], Image] = {}
        self._by_event: dict[tuple[int, int], tuple[int, Image]] = {}
        """``(pid, exec event ns)`` -> ``(start ms, image)``: the image's key in ``_images``."""
        self._forks: dict[tuple[int, int], tuple[int, int]] = {}
        self._syncs = 0
        """``S`` lines read (answers to ``sync``/``drain``, in the order they were asked)."""
        self._asked = 0
        """``sync``/``drain`` words written."""
        self._ended = False
        """The helper's output ended: no line will come any more."""
        self._closed = False
        self._ask = threading.Lock()
        """Orders ``drain`` words (not the lock the line reader takes: a write may block)."""
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._run, name="host-exec-images", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        for line in stdout:
            if line == b"S\n":
                with self._cond:
                    self._syncs += 1
                    self._cond.notify_all()
                continue
            fork = parse_fork(line) if line.startswith(b"F ") else None
            parsed = None if fork is not None else parse_line(line)
            with self._cond:
                if fork is not None:
                    pid, start_ms, ppid, event_ns = fork
                    _put(self._forks, (pid, event_ns), (start_ms, ppid))
                elif parsed is not None:
                    pid, start_ms, image = parsed
                    _put(self._images, (pid, start_ms), image)
                    if image.event_ns:
                        _put(self._by_event, (pid, image.event_ns), (start_ms, image))
                else:
                    continue
                self._cond.notify_all()
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def sync(self, timeout: float) -> bool:
        """Wait until every line the helper wrote before now is read (at most ``timeout``):
        used before reading an armed backlog, whose images and forks the helper wrote long
        ago. False when the helper did not answer in time (or is gone)."""
        return self.drained(self.drain(), timeout)

    def drain(self) -> int:
        """Ask the helper to handle every event its socket holds now, then answer: returns the
        answer to wait for (:meth:`drained`). Asked after an exec event was received, the
        answer comes after that event's image line, or the helper could not read the image."""
        with self._ask:  # the answers come in asking order
            self._asked += 1
            self.follow_words(["drain"])
            return self._asked

    def drained(self, target: int, timeout: float = 0.0) -> bool:
        """Whether answer ``target`` (or the end of the helper's output) was read, waiting up
        to ``timeout`` for it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._syncs < target and not self._ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def take_event(self, pid: int, event_ns: int) -> tuple[int, Image] | None:
        """``(start ms, image)`` ``pid`` exec'd in the exec event of timestamp ``event_ns``,
        if the helper read it."""
        with self._cond:
            found = self._by_event.pop((pid, event_ns), None)
            if found is None:
                return None  # not read, or already taken by its identity
            if self._images.get((pid, found[0])) is found[1]:  # else a later exec of the same
                del self._images[(pid, found[0])]  # identity holds that slot: it stays
            return found

    def fork_identity(self, pid: int, event_ns: int) -> tuple[int, int] | None:
        """``(start ms, parent pid)`` of the child of the fork event ``(pid, event_ns)``, if the
        helper read it (at the fork, so it is the child's own even if the pid was reused since)."""
        with self._cond:
            return self._forks.pop((pid, event_ns), None)

    def take_exec(
        self, pid: int, start_ms: int, event_ns: int, *, approximate: bool = False
    ) -> Image | None:
        """The image of exec event ``(pid, event_ns)`` when the helper read it for identity
        ``(pid, start_ms)`` (an ``approximate`` start: within :data:`SAME_START_MS` of it), else
        the image of that identity, unless the helper read that one at another exec event (a
        process that exec'd twice: one exec's image is never lent to the other)."""
        slack = SAME_START_MS if approximate else 0
        with self._cond:
            found = self._by_event.get((pid, event_ns)) if event_ns else None
            if found is not None and abs(found[0] - start_ms) <= slack:
                held, image = found
                del self._by_event[(pid, event_ns)]
                if self._images.get((pid, held)) is image:
                    del self._images[(pid, held)]
                return image
            other = self._images.get((pid, start_ms))
            if event_ns and other is not None and other.event_ns not in (0, event_ns):
                return None
        return self.take(pid, start_ms)

    def take(self, pid: int, start_ms: int, timeout: float = 0.0) -> Image | None:
        """The image of identity ``(pid, start_ms)``, waiting up to ``timeout`` for it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                image = self._images.pop((pid, start_ms), None)
                if image is not None:
                    self._by_event.pop((pid, image.event_ns), None)
                left = deadline - time.monotonic()
                if image is not None or left <= 0:
                    return image
                self._cond.wait(left)

    def take_matching(self, match: Callable[[Image], bool], timeout: float = 0.0) -> Image | None:
        """The first held image ``match`` accepts (any identity), waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for key, image in self._images.items():
                    if match(image):
                        del self._images[key]
                        self._by_event.pop((key[0], image.event_ns), None)
                        return image
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def follow(self, pids: list[int]) -> None:
        """Track ``pids`` too (processes the receiver learned to follow after start)."""
        self.follow_words([str(p) for p in pids])

    def follow_words(self, words: list[str]) -> None:
        """Write ``words`` to the helper's standard input (pids to track, or ``sync``)."""
        stdin = self._proc.stdin
        if stdin is None or stdin.closed or not words:
            return
        try:
            stdin.write(" ".join(words).encode() + b"\n")
            stdin.flush()
        except OSError:
            pass  # the helper is gone: the backend reads images itself

    def close(self) -> None:
        """Stop the helper, in the background (:mod:`.release`): nothing it still writes is
        needed, and its exit (it runs at a real-time priority) need not hold up the caller.
        Safe twice."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        release(self._finish)

    def _finish(self) -> None:
        """Kill and reap the helper, let the reader reach the end of its output, close that."""
        proc = self._proc
        stop_helper(proc)
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()


def _put(table: dict[tuple[int, int], Any], key: tuple[int, int], value: Any) -> None:
    if len(table) >= _KEEP:
        table.pop(next(iter(table)))
    table[key] = value
