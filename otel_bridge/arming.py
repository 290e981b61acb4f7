"""Arm the kernel sources of the ``linux`` host backend before the collector exists.

``observe`` lets its command run as soon as observation is *armed*: every kernel source the
``linux`` backend reads is attached, so nothing the command does can be missed, while the rest
of the collector (the OTLP servers and codecs, normalize, correlate, graph, exporters) is still
being imported and wired. What the kernel reports meanwhile waits in the sources' own queues:

* the netlink process connector socket (subscribed, 8 MiB receive buffer): fork, exec and exit
  events, read in order once the backend adopts it;
* the exec image helper (a ``python -S`` child at real-time priority, :data:`HELPER`): it reads
  each exec'd image and each forked child's start time the moment the kernel reports them and
  writes them to a pipe (1 MiB) keyed by the kernel event's timestamp, so a child that is gone
  by the time the backend reads the backlog keeps its exact identity and argv;
* the fanotify groups (``FAN_UNLIMITED_QUEUE``): file events with the accessing pid, both in
  ``FAN_REPORT_DFID_NAME`` mode (a directory handle and a name, no descriptor per event) where
  the kernel and filesystem allow it (:func:`open_file_group`).

This module is the standard library only (``socket``, ``ctypes``, ``subprocess``): importing it
costs a few milliseconds, which is the point. The ``linux`` backend (``receivers/host/linux.py``
and ``fanotify.py``) opens the same sources through the same functions when it is not armed.
``docs/observe.md`` ("Arm first, build later") is the contract.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from otel_bridge.errors import BackendUnavailableError
from otel_bridge.perfring import ArmedRings, arm_rings

NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
NLMSG_DONE = 3
_NLMSGHDR = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
RCVBUF = 32 * 1024 * 1024
"""The process connector socket's receive buffer: it queues every process event of the machine
(about 1 KiB each with its overhead) while an armed backlog waits to be read."""
_PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031

FAN_ACCESS = 0x01
FAN_MODIFY = 0x02
FAN_CLOSE_WRITE = 0x08
FAN_CLOSE_NOWRITE = 0x10
FAN_OPEN = 0x20
FAN_MOVED_FROM = 0x40
FAN_MOVED_TO = 0x80
FAN_CREATE = 0x100
FAN_DELETE = 0x200
FAN_Q_OVERFLOW = 0x4000
FAN_RENAME = 0x10000000
FAN_ONDIR = 0x40000000
FAN_REPORT_DIR_FID = 0x400
FAN_REPORT_NAME = 0x800
FAN_REPORT_DFID_NAME = FAN_REPORT_DIR_FID | FAN_REPORT_NAME
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
DIRENT_BITS: dict[str, int] = {"create": FAN_CREATE, "delete": FAN_DELETE, "rename": FAN_RENAME}
"""Directory-entry events, reported by the second (``FAN_REPORT_DFID_NAME``) group."""

DEFAULT_FANOTIFY_EVENTS: tuple[str, ...] = ("open", "close_write", "create", "delete", "rename")
"""The host receiver's default ``fanotify_events`` (``HostConfig``)."""
DEFAULT_FANOTIFY_PATHS: tuple[str, ...] = ("/",)
"""The host receiver's default ``fanotify_paths``."""
DEFAULT_FANOTIFY_MARK = "filesystem"

HELPER = r"""
import _socket as socket, os, select, struct, sys  # not socket: its enum and selectors, 7 ms
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(2))
except (OSError, AttributeError):
    pass
sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 11)
try:
    sock.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)
except OSError:
    pass
sock.bind((0, 1))

def _be(v):  # a host-order field as the filter's big-endian word load sees it
    return int.from_bytes(struct.pack("=I", v), "big")

# Socket filter: only process forks (not threads), execs and process exits reach this loop; the
# kernel drops every other connector event of the machine (thread starts and ends, comm, uid).
_F = [
    (0x20, 0, 0, 36), (0x15, 2, 0, _be(1)), (0x15, 9, 0, _be(2)), (0x15, 4, 9, _be(0x80000000)),
    (0x20, 0, 0, 60), (0x07, 0, 0, 0), (0x20, 0, 0, 64), (0x1D, 4, 5, 0),
    (0x20, 0, 0, 52), (0x07, 0, 0, 0), (0x20, 0, 0, 56), (0x1D, 0, 1, 0),
    (0x06, 0, 0, 0xFFFFFFFF), (0x06, 0, 0, 0),
]
try:
    import ctypes
    _prog = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *i) for i in _F))
    sock.setsockopt(socket.SOL_SOCKET, 26, struct.pack("HL", len(_F), ctypes.addressof(_prog)))
except (OSError, ImportError):
    pass  # every event reaches the loop, which skips the others itself
pay = struct.pack("=I", 1)
cn = struct.pack("=IIIIHH", 1, 1, 0, 0, len(pay), 0) + pay
sock.send(struct.pack("=IHHII", 16 + len(cn), 3, 0, 0, sock.getsockname()[0]) + cn)
tracked = {int(p) for p in sys.argv[1:]}
out = sys.stdout.buffer
out.write(b"READY\n"); out.flush()

def slurp(path, size=65536):  # os-level: a buffered file costs four more system calls
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = [os.read(fd, size)]
        while parts[-1]:
            parts.append(os.read(fd, size))
        return b"".join(parts)
    finally:
        os.close(fd)

def ticks(pid):
    try:
        data = slurp(f"/proc/{pid}/stat", 4096)
        return int(data[data.rfind(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None

def image(pid, ts):
    start = ticks(pid)
    if start is None:
        return
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        cmd = slurp(f"/proc/{pid}/cmdline")
        cwd = os.readlink(f"/proc/{pid}/cwd")
        env = slurp(f"/proc/{pid}/environ")
        if not cmd or os.readlink(f"/proc/{pid}/exe") != exe or ticks(pid) != start:
            return
    except OSError:
        return
    tp = b""
    for item in env.split(b"\0"):
        if item.startswith(b"TRACEPARENT="):
            tp = item[12:]
    out.write(b"%d %d %s %s %s %s %d\n" % (
        pid, start, os.fsencode(exe).hex().encode(), cmd.hex().encode(),
        os.fsencode(cwd).hex().encode(), tp.hex().encode(), ts))
    out.flush()

U32 = struct.Struct("=I").unpack_from
HEAD = struct.Struct("=IIQ").unpack_from
PAIR = struct.Struct("=II").unpack_from
FORK = struct.Struct("=IIII").unpack_from

def handle(data):
    off = 0
    while off + 16 <= len(data):
        length = U32(data, off)[0]
        if length < 16:
            break
        body = off + 16 + 20
        if body + 16 <= off + length:
            what, _cpu, ts = HEAD(data, body)
            rest = body + 16
            if what == 1:
                _pp, ptgid, cpid, ctgid = FORK(data, rest)
                if cpid == ctgid and ptgid in tracked:
                    tracked.add(ctgid)
                    start = ticks(ctgid)
                    if start is not None:
                        out.write(b"F %d %d %d %d\n" % (ctgid, start, ptgid, ts)); out.flush()
            elif what == 2:
                pid, tgid = PAIR(data, rest)
                if tgid in tracked:
                    image(tgid, ts)
            elif what == 0x80000000:
                pid, tgid = PAIR(data, rest)
                if pid == tgid:
                    tracked.discard(tgid)
        off += (length + 3) & ~3

def receive():  # one queued datagram handled; False once the queue is empty
    try:
        handle(sock.recv(65536, socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False
    except OSError as exc:  # ENOBUFS: events were lost, the queue goes on
        return exc.errno == 105
    return True

while True:
    ready, _, _ = select.select([sock, sys.stdin], [], [])
    if sys.stdin in ready:
        chunk = os.read(sys.stdin.fileno(), 4096)
        if not chunk:
            break
        words = chunk.split()
        tracked.update(int(w) for w in words if w.isdigit())
        if b"drain" in words:  # every event queued before now is handled first
            while receive():
                pass
        if b"sync" in words or b"drain" in words:
            out.write(b"S\n"); out.flush()
    if sock in ready:
        receive()
"""
"""The exec image helper's program (see :mod:`otel_bridge.receivers.host.execreader`).

Lines: ``pid start_ticks exe cmdline cwd traceparent event_ns`` (hex fields) for each exec of a
tracked process, ``F pid start_ticks ppid event_ns`` for each tracked fork whose start time it
could read. ``event_ns`` is the kernel event's timestamp, the same in every subscriber's copy.
The word ``sync`` on its standard input is answered with the line ``S`` (every line written
before it is then readable); ``drain`` too, after the helper handled every event its socket had
queued when it read the word: once ``S`` is read, an exec event any subscriber had received
before writing ``drain`` has its image line read already, or the helper could not read it."""


def subscribe_message(op: int, port_id: int) -> bytes:
    """The netlink message subscribing (or unsubscribing) a socket to process events."""
    payload = struct.pack("=I", op)
    cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(payload), 0) + payload
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(cn), NLMSG_DONE, 0, 0, port_id) + cn


def open_proc_connector() -> socket.socket:
    """A bound, subscribed process-connector socket; raises ``BackendUnavailableError``."""
    if not hasattr(socket, "AF_NETLINK"):
        raise BackendUnavailableError("linux: no AF_NETLINK sockets on this platform")
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_CONNECTOR)
    except OSError as exc:
        raise BackendUnavailableError(
            f"linux: cannot open a NETLINK_CONNECTOR socket ({exc.strerror}); "
            "the kernel lacks CONFIG_CONNECTOR/CONFIG_PROC_EVENTS"
        ) from exc
    try:
        try:
            sock.setsockopt(socket.SOL_SOCKET, 33, RCVBUF)  # SO_RCVBUFFORCE (root)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        sock.bind((0, CN_IDX_PROC))
        sock.send(subscribe_message(PROC_CN_MCAST_LISTEN, sock.getsockname()[0]))
    except OSError as exc:
        sock.close()
        reason = "needs root (CAP_NET_ADMIN)" if exc.errno == errno.EPERM else exc.strerror
        raise BackendUnavailableError(
            f"linux: cannot subscribe to the process connector: {reason}"
        ) from exc
    return sock


def libc() -> ctypes.CDLL:
    """The C library with the fanotify and ``open_by_handle_at`` prototypes set."""
    lib = ctypes.CDLL(None, use_errno=True)
    lib.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
    lib.fanotify_init.restype = ctypes.c_int
    lib.fanotify_mark.argtypes = [
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_uint64,
        ctypes.c_int,
        ctypes.c_char_p,
    ]
    lib.fanotify_mark.restype = ctypes.c_int
    lib.open_by_handle_at.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.open_by_handle_at.restype = ctypes.c_int
    return lib


def fanotify_open(paths: list[str], mask: int, *, mount: bool, report: int = 0) -> int:
    """An fanotify descriptor with ``mask`` marked on each path; raises ``OSError``.

    ``report`` adds ``FAN_REPORT_*`` flags to ``fanotify_init`` (``FAN_REPORT_DFID_NAME``)."""
    lib = libc()
    fd = int(
        lib.fanotify_init(
            FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE | report,
            os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC,
        )
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fanotify_init: {os.strerror(err)}")
    flags = FAN_MARK_ADD | (FAN_MARK_MOUNT if mount else FAN_MARK_FILESYSTEM)
    for path in paths:
        if lib.fanotify_mark(fd, flags, mask, AT_FDCWD, os.fsencode(path)) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"fanotify_mark {path}: {os.strerror(err)}")
    return fd


def fanotify_masks(events: set[str]) -> tuple[int, int]:
    """The masks of the two fanotify groups for ``events``: (fd-reporting, directory-entry);
    0 for a group with nothing to report."""
    mask = 0
    for name in events & EVENT_BITS.keys():
        mask |= EVENT_BITS[name]
    if "access" in events:
        mask |= FAN_CLOSE_NOWRITE  # to end a read cycle
    if "modify" in events:
        mask |= FAN_CLOSE_WRITE
    dirent = 0
    for name in events & DIRENT_BITS.keys():
        dirent |= DIRENT_BITS[name]
    return mask, (dirent | FAN_ONDIR) if dirent else 0


def open_file_group(
    opener: Callable[..., int], paths: list[str], mask: int, *, mount: bool, fid: bool
) -> tuple[int, OSError | None]:
    """The open/access/modify/close group: in ``FAN_REPORT_DFID_NAME`` mode when ``fid`` and the
    kernel (Linux 5.9) and every marked filesystem allow it, else in the classic mode (a
    descriptor per event). Returns the descriptor and why the first mode was refused (None: it
    was not). ``opener`` is :func:`fanotify_open` (a parameter so a test can refuse a mode)."""
    if not fid:
        return opener(paths, mask, mount=mount), None
    try:
        return opener(paths, mask, mount=mount, report=FAN_REPORT_DFID_NAME), None
    except OSError as exc:  # EINVAL: an older kernel; EOPNOTSUPP/EXDEV: no file handles here
        return opener(paths, mask, mount=mount), exc


@dataclass(slots=True)
class FanotifyGroups:
    """The fanotify descriptors of one file plane: what they were opened for, and the fds."""

    events: tuple[str, ...]
    paths: tuple[str, ...]
    mark: str
    fd: int = -1
    dir_fd: int = -1
    mount_fds: list[int] = field(default_factory=list)
    dirent_error: OSError | None = None
    """Why the directory-entry group could not be set up (None: it was, or not wanted)."""
    fid: bool = True
    """Wanted: the file group in ``FAN_REPORT_DFID_NAME`` mode (:func:`open_file_group`)."""
    fid_error: OSError | None = None
    """Why that mode was refused: the file group reports a descriptor per event (None: it
    does not, or was not opened in that mode because ``fid`` is False)."""
    reader: FanotifyPreReader | None = None
    """Reads the groups while armed (:meth:`start_reading`), until the watcher takes over."""
    opened_ns: int = 0
    """The wall time (ns) just before the groups were opened: no event in them was queued
    earlier (the earliest time of the records of the events read while armed)."""

    def start_reading(self) -> None:
        """Read events as they arrive from now on (see :class:`FanotifyPreReader`)."""
        if self.reader is None:
            self.reader = FanotifyPreReader(self)

    def matches(
        self, events: Iterable[str], paths: list[str], mark: str, *, fid: bool = True
    ) -> bool:
        """Whether these groups were opened for exactly this configuration."""
        wanted = (set(events), tuple(paths), mark, fid)
        return wanted == (set(self.events), self.paths, self.mark, self.fid)

    @property
    def reports_fid(self) -> bool:
        """Whether the file group reports directory handles and names (no descriptors)."""
        return self.fd >= 0 and self.fid and self.fid_error is None

    def close(self) -> None:
        """Close every descriptor not handed over yet. Safe twice."""
        if self.reader is not None:
            self.reader.take()
            self.reader = None
        for fd in (self.fd, self.dir_fd, *self.mount_fds):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fd = self.dir_fd = -1
        self.mount_fds = []


def open_fanotify_groups(
    events: list[str], paths: list[str], mark: str, *, fid: bool = True
) -> FanotifyGroups:
    """Both groups for this configuration; raises ``OSError`` when the main one fails. The
    directory-entry group failing is kept in ``dirent_error``, the file group's fallback to a
    descriptor per event in ``fid_error`` (the backend reports both)."""
    groups = FanotifyGroups(
        events=tuple(events), paths=tuple(paths), mark=mark, fid=fid, opened_ns=time.time_ns()
    )
    mask, dirent = fanotify_masks(set(events))
    mount = mark == "mount"
    if mask:
        groups.fd, groups.fid_error = open_file_group(
            fanotify_open, list(paths), mask, mount=mount, fid=fid
        )
    if dirent:
        try:
            groups.dir_fd = fanotify_open(
                list(paths), dirent, mount=mount, report=FAN_REPORT_DFID_NAME
            )
        except OSError as exc:
            groups.dirent_error = exc
            if groups.dir_fd >= 0:
                os.close(groups.dir_fd)
                groups.dir_fd = -1
    try:
        if groups.dir_fd >= 0 or groups.reports_fid:  # handles to resolve against these
            groups.mount_fds = [os.open(path, os.O_RDONLY | os.O_CLOEXEC) for path in paths]
    except OSError:
        groups.close()
        raise
    return groups


def start_helper(pids: list[int], *, timeout: float = 5.0) -> subprocess.Popen[bytes]:
    """The exec image helper following ``pids``, subscribed and ready; raises ``OSError``."""
    return wait_helper(spawn_helper(pids), timeout=timeout)


def spawn_helper(pids: list[int]) -> subprocess.Popen[bytes]:
    """The exec image helper following ``pids``, started (not waited for: :func:`wait_helper`)."""
    proc = subprocess.Popen(
        [sys.executable, "-S", "-c", HELPER, *map(str, pids)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    with contextlib.suppress(OSError):  # a bigger pipe: the backend may read it late
        fcntl.fcntl(proc.stdout.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)
    return proc


def wait_helper(proc: subprocess.Popen[bytes], *, timeout: float = 5.0) -> subprocess.Popen[bytes]:
    """``proc`` once it is subscribed and ready; stops it and raises ``OSError`` when it does
    not become ready within ``timeout`` seconds."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready or proc.stdout.readline().strip() != b"READY":
        stop_helper(proc)
        raise OSError("the exec image helper did not start")
    return proc


def track_helper(
    proc: subprocess.Popen[bytes], pids: list[int], *, timeout: float = 5.0
) -> subprocess.Popen[bytes]:
    """``proc``, a helper started (and ready) before ``pids`` existed, now following them: the
    pids are written to its standard input with ``sync``, and its ``S`` answer is awaited, so
    the helper follows them before this returns. Stops it and raises ``OSError`` when it does
    not answer within ``timeout`` seconds (the warm server keeps one such helper ready,
    ``otel_bridge.warm``)."""
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        proc.stdin.write(" ".join([*map(str, pids), "sync"]).encode() + b"\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready or proc.stdout.readline().strip() != b"S":
            raise OSError("the exec image helper did not answer")
    except OSError:
        stop_helper(proc)
        raise
    return proc


def stop_helper(proc: subprocess.Popen[bytes]) -> None:
    """Stop the helper at once (it holds nothing: every line it wrote stays readable in the
    pipe; its standard input is closed too, which alone would stop it). Safe twice."""
    if proc.stdin is not None and not proc.stdin.closed:
        proc.stdin.close()
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    proc.wait()


@dataclass(slots=True)
class ArmedHost:
    """The ``linux`` backend's kernel sources, attached to the lineage of ``root_pid``.

    The backend adopts each source it uses (setting the field to None / -1); :meth:`close`
    releases whatever was not adopted."""

    root_pid: int
    proc_socket: socket.socket | None
    helper: subprocess.Popen[bytes] | None
    fanotify: FanotifyGroups | None
    armed_ns: int = 0
    """Wall-clock ns when every source was attached (the root was still gated)."""
    root_start_ticks: int | None = None
    """The gated root's start time (``/proc/<pid>/stat`` ticks), read while it waited."""
    root_ppid: int = 0
    """The gated root's parent, read with its start time (0: not read)."""
    gate_opened_ns: int = 0
    """When the root's gate was open (CLOCK_MONOTONIC ns, :func:`otel_bridge.launch.open_gate`),
    0 while it is shut: an exec event of the root stamped earlier is the gate's own ``sh``,
    which the kernel may report after the sources were attached (it sends the exec event after
    it let ``posix_spawn``'s caller go on)."""
    perf: ArmedRings | None = None
    """The socket tracer's perf rings (None: perf refused here; the backend then says why)."""

    def close(self) -> None:
        """Release every source not adopted. Safe twice."""
        if self.proc_socket is not None:
            self.proc_socket.close()
            self.proc_socket = None
        if self.helper is not None:
            stop_helper(self.helper)
            if self.helper.stdout is not None:
                self.helper.stdout.close()
            self.helper = None
        if self.fanotify is not None:
            self.fanotify.close()
            self.fanotify = None
        if self.perf is not None:
            self.perf.close()
            self.perf = None


def arm_linux(
    root_pid: int,
    *,
    waiting: Callable[[], None] | None = None,
    helper: subprocess.Popen[bytes] | None = None,
) -> ArmedHost:
    """Attach the ``linux`` backend's sources for its default configuration to ``root_pid``'s
    lineage; raises ``BackendUnavailableError`` or ``OSError`` when one cannot be attached (the
    caller then builds the collector first, as without arming).

    The exec image helper is spawned first, so its interpreter starts while the other sources
    are attached; ``waiting`` is called once they are, just before waiting for the helper to
    be ready (``observe`` starts importing the collector there, in another thread).
    ``helper``: an exec image helper already started and ready, following no pid yet (the warm
    server's, :func:`track_helper`), used instead of spawning one."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise BackendUnavailableError("linux: needs root (netlink process connector and fanotify)")
    armed = ArmedHost(root_pid=root_pid, proc_socket=None, helper=None, fanotify=None)
    try:
        armed.helper = spawn_helper([root_pid]) if helper is None else helper
        armed.proc_socket = open_proc_connector()
        armed.fanotify = open_fanotify_groups(
            list(DEFAULT_FANOTIFY_EVENTS), list(DEFAULT_FANOTIFY_PATHS), DEFAULT_FANOTIFY_MARK
        )
        armed.fanotify.start_reading()
        if waiting is not None:
            waiting()
        if helper is None:
            wait_helper(armed.helper)
        else:
            track_helper(armed.helper, [root_pid])
        with contextlib.suppress(OSError):  # refused: the backend tries again and says why
            armed.perf = arm_rings()
        armed.root_ppid, armed.root_start_ticks = _parent_and_start(root_pid)
        armed.armed_ns = time.time_ns()
    except BaseException:
        armed.close()
        raise
    return armed


def _parent_and_start(pid: int) -> tuple[int, int | None]:
    """``pid``'s parent and start time (``/proc/<pid>/stat`` ticks); ``(0, None)`` if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rfind(b")") + 2 :].split()
        return int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return 0, None


@runtime_checkable
class Armable(Protocol):
    """A host receiver that can adopt sources armed before it was built."""

    def set_armed(self, armed: ArmedHost) -> None:
        """Use ``armed`` (before start) instead of opening the same sources itself."""


_METADATA = struct.Struct("=IBBHQii")
_FD_READ_BYTES = 8 * 1024
"""One read of the descriptor-reporting group (the kernel opens a descriptor per event)."""

_FID_READ_BYTES = 64 * 1024
"""One read of a group that reports handles and names (no descriptor is opened)."""
_READS_PER_WAKE = 64
PreRead = tuple[int, int, int, str, int]
"""``(time ns, mask, pid, path, earliest ns)`` of one descriptor-group event read while armed;
``path`` is ``""`` for an event without a descriptor (a queue overflow); ``earliest``: the
earliest it can have been queued (:attr:`FanotifyPreReader.since_ns` when it was read)."""
RawReads = list[tuple[int, bytes, int]]
"""``(time ns, bytes, earliest ns)`` of each read of a handle-and-name group while armed, kept
as read."""


class FanotifyPreReader:
    """Reads the armed fanotify groups as events arrive, until the watcher takes over.

    fanotify events carry no timestamp: a record's time is when it was read. Left in the kernel
    queue while the collector is built, an event would be stamped up to that long after it
    happened (after its process's exit, outside its tool call's window), so this thread reads
    them at once, as the watcher would: a descriptor group's paths are resolved and their
    descriptors closed; what a handle-and-name group (``FAN_REPORT_DFID_NAME``: the
    directory-entry group, and the file group unless it fell back) read is kept raw with its
    read time. :meth:`take` stops it and hands over what it read, in order.
    """

    def __init__(self, groups: FanotifyGroups) -> None:
        self._groups = groups
        self._fid = groups.reports_fid
        self.events: list[PreRead] = []
        self.dirents: RawReads = []
        self.files: RawReads = []
        """The file group's reads, raw (when it reports handles and names)."""
        self.since_ns = groups.opened_ns
        """The wall time (ns) from which every event not read yet was queued: the groups'
        opening, then the time taken after each wake that read every group until it was
        empty."""
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="armed-fanotify", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fds = [fd for fd in (self._groups.fd, self._groups.dir_fd) if fd >= 0]
        while True:
            ready, _, _ = select.select([*fds, self._stop_r], [], [])
            mark = time.time_ns()  # every group is read from here until it is empty
            drained = [self._drain(fd) for fd in fds]
            if all(drained):
                self.since_ns = mark
            if self._stop_r in ready:
                return

    def _drain(self, fanotify_fd: int) -> bool:
        """Read what is queued, at most ``_READS_PER_WAKE`` reads (then the loop checks for
        :meth:`take`: a steady stream of the machine's events cannot keep it here); True when
        the group was read until it was empty."""
        dirents = fanotify_fd == self._groups.dir_fd
        raw = self.dirents if dirents else self.files if self._fid else None
        since = self.since_ns
        for _ in range(_READS_PER_WAKE):
            try:
                data = os.read(fanotify_fd, _FD_READ_BYTES if raw is None else _FID_READ_BYTES)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return True
            now = time.time_ns()
            if raw is not None:
                raw.append((now, data, since))
                continue
            offset = 0
            while offset + _METADATA.size <= len(data):
                length, _v, _r, _m, mask, fd, pid = _METADATA.unpack_from(data, offset)
                if length < _METADATA.size:
                    break
                offset += length
                path = ""
                if fd >= 0:
                    try:
                        path = os.readlink(f"/proc/self/fd/{fd}")
                    except OSError:
                        continue
                    finally:
                        os.close(fd)
                self.events.append((now, mask, pid, path, since))
        return False

    def take(self) -> tuple[list[PreRead], RawReads, RawReads]:
        """Stop reading (after a last drain); what was read, in order: the descriptor group's
        events, the directory-entry group's reads, the file group's raw reads. Safe twice."""
        if self._stop_w >= 0:
            os.write(self._stop_w, b"x")
            self._thread.join()
            for fd in (self._stop_r, self._stop_w):
                os.close(fd)
            self._stop_r = self._stop_w = -1
        events, dirents, files = self.events, self.dirents, self.files
        self.events, self.dirents, self.files = [], [], []
        return events, dirents, files
