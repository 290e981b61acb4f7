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

import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from otel_bridge.identity import start_ms_from_ticks

HELPER = r"""
import os, select, socket, struct, sys
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

def ticks(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rfind(b")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None

def image(pid):
    start = ticks(pid)
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        cwd = os.readlink(f"/proc/{pid}/cwd")
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read()
        if not cmd or os.readlink(f"/proc/{pid}/exe") != exe or ticks(pid) != start:
            return
    except OSError:
        return
    tp = b""
    for item in env.split(b"\0"):
        if item.startswith(b"TRACEPARENT="):
            tp = item[12:]
    out.write(b"%d %d %s %s %s %s\n" % (
        pid, start, os.fsencode(exe).hex().encode(), cmd.hex().encode(),
        os.fsencode(cwd).hex().encode(), tp.hex().encode()))
    out.flush()

U32 = struct.Struct("=I").unpack_from
PAIR = struct.Struct("=II").unpack_from
FORK = struct.Struct("=IIII").unpack_from

while True:
    ready, _, _ = select.select([sock, sys.stdin], [], [])
    if sys.stdin in ready:
        chunk = os.read(sys.stdin.fileno(), 4096)
        if not chunk:
            break
        tracked.update(int(w) for w in chunk.split() if w.isdigit())
    if sock not in ready:
        continue
    try:
        data = sock.recv(65536)
    except OSError:
        continue
    off = 0
    while off + 16 <= len(data):
        length = U32(data, off)[0]
        if length < 16:
            break
        body = off + 36
        if body + 16 <= off + length:
            what = U32(data, body)[0]
            if what == 1:
                _pp, ptgid, cpid, ctgid = FORK(data, body + 16)
                if cpid == ctgid and ptgid in tracked:
                    tracked.add(ctgid)
            elif what == 2:
                pid, tgid = PAIR(data, body + 16)
                if tgid in tracked:
                    image(tgid)
            elif what == 0x80000000:
                pid, tgid = PAIR(data, body + 16)
                if pid == tgid:
                    tracked.discard(tgid)
        off += (length + 3) & ~3
"""


@dataclass(frozen=True, slots=True)
class Image:
    """An exec'd image as the helper read it."""

    exe: str
    argv: list[str]
    cwd: str
    traceparent: str


def parse_line(line: bytes) -> tuple[int, int, Image] | None:
    """``(pid, start ms, image)`` from one helper line, None when malformed."""
    parts = line.rstrip(b"\n").split(b" ")
    if len(parts) != 6:
        return None
    try:
        pid, ticks = int(parts[0]), int(parts[1])
        exe, cmd, cwd, tp = (bytes.fromhex(p.decode("ascii")) for p in parts[2:])
    except ValueError:
        return None
    argv = [a.decode("utf-8", "surrogateescape") for a in cmd.rstrip(b"\0").split(b"\0")]
    image = Image(
        exe=exe.decode("utf-8", "surrogateescape"),
        argv=argv,
        cwd=cwd.decode("utf-8", "surrogateescape"),
        traceparent=tp.decode("ascii", "replace"),
    )
    return pid, start_ms_from_ticks(ticks), image


class ExecReader:
    """Runs the helper and keeps its recent images by identity (see the module docstring)."""

    def __init__(self, pids: list[int], *, startup_timeout: float = 5.0) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-S", "-c", HELPER, *map(str, pids)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], startup_timeout)
        if not ready or self._proc.stdout.readline().strip() != b"READY":
            self.close()
            raise OSError("the exec image helper did not start")
        self._images: dict[tuple[int, int], Image] = {}
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._run, name="host-exec-images", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        for line in stdout:
            parsed = parse_line(line)
            if parsed is None:
                continue
            pid, start_ms, image = parsed
            with self._cond:
                if len(self._images) > 4096:
                    self._images.pop(next(iter(self._images)))
                self._images[(pid, start_ms)] = image
                self._cond.notify_all()

    def take(self, pid: int, start_ms: int, timeout: float = 0.0) -> Image | None:
        """The image of identity ``(pid, start_ms)``, waiting up to ``timeout`` for it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                image = self._images.pop((pid, start_ms), None)
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
                        return image
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def follow(self, pids: list[int]) -> None:
        """Track ``pids`` too (processes the receiver learned to follow after start)."""
        stdin = self._proc.stdin
        if stdin is None or stdin.closed or not pids:
            return
        try:
            stdin.write(" ".join(map(str, pids)).encode() + b"\n")
            stdin.flush()
        except OSError:
            pass  # the helper is gone: the backend reads images itself

    def close(self) -> None:
        """Stop the helper. Safe twice."""
        proc = self._proc
        if proc.stdin is not None and not proc.stdin.closed:
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        thread = getattr(self, "_thread", None)
        if thread is not None:
            thread.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
