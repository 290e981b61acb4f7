"""fanotify file events for the ``linux`` backend, kernel-attributed to the accessing process.

``fanotify_init`` / ``fanotify_mark`` through ctypes, in the classic fd-reporting mode
(``FAN_CLASS_NOTIF``): each event carries the accessing pid and an open file descriptor whose
``/proc/self/fd`` link names the file. A filesystem mark (``FAN_MARK_FILESYSTEM``, default) or a
mount mark covers every file below each configured path; events of processes outside the lineage
are dropped here.

Honest limits of this mode:

* fanotify does not report the *open flags* the process used, so ``file.open`` carries no
  ``file.open.flags``/``file.access``. Writes show up as ``file.write``: by default when a file
  that was open for writing is closed (``FAN_CLOSE_WRITE``: the process had write access; a
  writable open closed without writing is reported too), or, with ``modify`` configured, at the
  first ``FAN_MODIFY`` of each open/close cycle (exact, but one kernel event per ``write()``).
  Reads show up as ``file.read`` (``FAN_ACCESS``, when configured).
* create, delete and rename need ``FAN_REPORT_FID``/``FAN_REPORT_DFID_NAME``, whose events carry
  file handles instead of descriptors; this backend does not use that mode, so those changes are
  not reported (``strace``/``ebpf`` see the syscalls).
* Pseudo filesystems (``/proc``, ``/sys``) and filesystems not marked are not seen. Events can
  be lost when the kernel queue overflows (``FAN_Q_OVERFLOW``): the file collection becomes
  ``degraded``.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import threading
import time

from otel_bridge.model import AnyValue, CollectionState
from otel_bridge.receivers.host.events import SYSCALL, HostContext

FAN_ACCESS = 0x01
FAN_MODIFY = 0x02
FAN_CLOSE_WRITE = 0x08
FAN_CLOSE_NOWRITE = 0x10
FAN_OPEN = 0x20
FAN_Q_OVERFLOW = 0x4000
FAN_CLOEXEC = 0x01
FAN_NONBLOCK = 0x02
FAN_CLASS_NOTIF = 0x00
FAN_UNLIMITED_QUEUE = 0x10
FAN_MARK_ADD = 0x01
FAN_MARK_MOUNT = 0x10
FAN_MARK_FILESYSTEM = 0x100
AT_FDCWD = -100
FAN_NOFD = -1

EVENT_BITS: dict[str, int] = {
    "open": FAN_OPEN,
    "modify": FAN_MODIFY,
    "close_write": FAN_CLOSE_WRITE,
    "access": FAN_ACCESS,
}

_METADATA = struct.Struct("=IBBHQii")


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
    libc.fanotify_init.restype = ctypes.c_int
    libc.fanotify_mark.argtypes = [
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_uint64,
        ctypes.c_int,
        ctypes.c_char_p,
    ]
    libc.fanotify_mark.restype = ctypes.c_int
    return libc


def fanotify_open(paths: list[str], mask: int, *, mount: bool) -> int:
    """An fanotify descriptor with ``mask`` marked on each path; raises ``OSError``."""
    libc = _libc()
    fd = int(
        libc.fanotify_init(
            FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE,
            os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC,
        )
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fanotify_init: {os.strerror(err)}")
    flags = FAN_MARK_ADD | (FAN_MARK_MOUNT if mount else FAN_MARK_FILESYSTEM)
    for path in paths:
        if libc.fanotify_mark(fd, flags, mask, AT_FDCWD, os.fsencode(path)) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"fanotify_mark {path}: {os.strerror(err)}")
    return fd


class FanotifyWatcher:
    """Reads fanotify events and emits lineage file events (see the module docstring)."""

    def __init__(self, ctx: HostContext) -> None:
        cfg = ctx.config
        self._ctx = ctx
        self._wanted = set(cfg.fanotify_events)
        mask = 0
        for name in self._wanted:
            mask |= EVENT_BITS[name]
        if "access" in self._wanted:
            mask |= FAN_CLOSE_NOWRITE  # to end a read cycle
        if "modify" in self._wanted:
            mask |= FAN_CLOSE_WRITE
        self._fd = fanotify_open(list(cfg.fanotify_paths), mask, mount=cfg.fanotify_mark == "mount")
        self._stop_r, self._stop_w = os.pipe()
        self._thread: threading.Thread | None = None
        self._cycle: set[tuple[int, str, str]] = set()
        """(pid, path, kind) already reported in the current open/close cycle."""
        self.overflows = 0
        events = ", ".join(sorted(self._wanted))
        ctx.collection_state(
            "file",
            CollectionState.AVAILABLE,
            f"fanotify {cfg.fanotify_mark} marks on {', '.join(cfg.fanotify_paths)} ({events}); "
            "no open flags and no create/delete/rename in fd mode (FAN_REPORT_FID not used)",
        )

    def start(self) -> None:
        """Start the reader thread."""
        self._thread = threading.Thread(target=self._run, name="host-fanotify", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            ready, _, _ = select.select([self._fd, self._stop_r], [], [], 0.5)
            if self._fd in ready:
                self._read()
            if self._stop_r in ready:
                self._read()
                return

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return
            except OSError:
                return
            if not data:
                return
            offset = 0
            while offset + _METADATA.size <= len(data):
                length, _vers, _res, _mlen, mask, fd, pid = _METADATA.unpack_from(data, offset)
                if length < _METADATA.size:
                    return
                self._event(mask, fd, pid)
                offset += length

    def _event(self, mask: int, fd: int, pid: int) -> None:
        ctx = self._ctx
        try:
            if mask & FAN_Q_OVERFLOW:
                self.overflows += 1
                ctx.collection_state(
                    "file", CollectionState.DEGRADED, "fanotify queue overflow: events lost"
                )
                return
            if pid not in ctx.lineage or fd == FAN_NOFD:
                return
            try:
                path = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return
        finally:
            if fd >= 0:
                os.close(fd)
        now = time.time_ns()
        if mask & FAN_OPEN and "open" in self._wanted:
            self._cycle = {c for c in self._cycle if c[:2] != (pid, path)}
            self._emit("file.open", pid, path, now)
        if mask & FAN_ACCESS and "access" in self._wanted:
            self._once("file.read", pid, path, now)
        if mask & FAN_MODIFY and "modify" in self._wanted:
            self._once("file.write", pid, path, now)
        if mask & FAN_CLOSE_WRITE:
            if "modify" not in self._wanted and "close_write" in self._wanted:
                self._emit("file.write", pid, path, now)
            self._cycle = {c for c in self._cycle if c[:2] != (pid, path)}
        if mask & FAN_CLOSE_NOWRITE:
            self._cycle.discard((pid, path, "file.read"))

    def _once(self, name: str, pid: int, path: str, now: int) -> None:
        key = (pid, path, name)
        if key not in self._cycle:
            self._cycle.add(key)
            self._emit(name, pid, path, now)

    def _emit(self, name: str, pid: int, path: str, now: int) -> None:
        ctx = self._ctx
        attrs: dict[str, AnyValue] = ctx.events.identity_attrs(pid)
        attrs["file.path"] = path
        ctx.emit(ctx.events.record(name, now, attrs, attribution=SYSCALL, causal=True))

    def stop(self) -> None:
        """Stop reading and close the descriptor. Safe twice."""
        if self._thread is not None:
            os.write(self._stop_w, b"x")
            self._thread.join()
            self._thread = None
        for fd in (self._fd, self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._fd = self._stop_r = self._stop_w = -1
