"""The perf ring level of the socket tracer: ``perf_event_open(2)`` on a tracepoint, one mapped
ring buffer per CPU, standard library only.

:mod:`otel_bridge.receivers.host.perftrace` decodes and pairs what these rings hold (its
docstring is the contract). This part lives outside the host receiver package so that
:mod:`otel_bridge.arming` can attach the rings before the collector is built (importing the
receiver package would cost the start-up what arming saves): :func:`arm_rings` opens them and
the tracer adopts them, with every sample the kernel wrote meanwhile.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import mmap
import os
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

TRACEFS = "/sys/kernel/tracing"
EVENT = "sock/inet_sock_set_state"
RING_PAGES = 64
"""Data pages per CPU ring (256 KiB: some 2,000 samples between two reads)."""

PERF_TYPE_TRACEPOINT = 2
PERF_SAMPLE_TID = 1 << 1
PERF_SAMPLE_TIME = 1 << 2
PERF_SAMPLE_CPU = 1 << 7
PERF_SAMPLE_RAW = 1 << 10
PERF_FORMAT_LOST = 1 << 4
PERF_EVENT_IOC_SET_FILTER = 0x40082406
"""``_IOW('$', 6, char *)``: an ftrace filter evaluated in the kernel before a sample is written."""
FD_CLOEXEC = 1 << 3
"""``PERF_FLAG_FD_CLOEXEC``."""
PERF_RECORD_LOST = 2
PERF_RECORD_SAMPLE = 9
_USE_CLOCKID = 1 << 25
_ATTR = struct.Struct("=IIQQQQQIIQQQQIi")
"""``struct perf_event_attr`` up to ``clockid`` (``PERF_ATTR_SIZE_VER3``, 96 bytes)."""
_HEADER = struct.Struct("=IHH")
_SAMPLE = struct.Struct("=IIQII I")
"""pid, tid (TID), time (TIME), cpu, reserved (CPU), raw size (RAW); then the raw record."""
_HEAD_AT, _TAIL_AT, _DATA_OFFSET_AT = 1024, 1032, 1040
"""Offsets of ``data_head``, ``data_tail``, ``data_offset`` in ``struct perf_event_mmap_page``."""
_SYSCALL = {"x86_64": 298, "aarch64": 241, "arm64": 241}
"""``__NR_perf_event_open`` per machine (asm-generic's 241 on arm64)."""

TCP_ESTABLISHED, TCP_SYN_SENT, TCP_SYN_RECV, TCP_CLOSE, IPPROTO_TCP = 1, 2, 3, 7, 6
FILTER = (
    f"protocol == {IPPROTO_TCP} && (oldstate == {TCP_SYN_SENT} "
    f"|| (oldstate == {TCP_CLOSE} && newstate == {TCP_SYN_SENT}) "
    f"|| (oldstate == {TCP_SYN_RECV} && newstate == {TCP_ESTABLISHED}))"
)
"""The transitions the pairing reads (TCP only: ``SYN_SENT -> *``, ``CLOSE -> SYN_SENT``,
``SYN_RECV -> ESTABLISHED``), kept by the kernel before a sample is written: some 3 samples per
loopback connection instead of 11. A kernel refusing the filter sends all (read the same)."""
_FIELD = re.compile(r"field:([^;]*);\s*offset:(\d+);\s*size:(\d+);\s*signed:(\d+);")


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a tracepoint record, as its ``format`` file describes it."""

    offset: int
    size: int
    signed: bool


def parse_format(text: str) -> dict[str, Field]:
    """Field name -> :class:`Field` from a tracepoint ``format`` file."""
    fields: dict[str, Field] = {}
    for found in _FIELD.finditer(text):
        decl, offset, size, signed = found.groups()
        name = decl.split()[-1].split("[")[0].lstrip("*")
        fields[name] = Field(int(offset), int(size), signed == "1")
    return fields


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> list[int]:
    """The online CPUs (``0-3,6`` form)."""
    with open(path, encoding="ascii") as f:
        text = f.read().strip()
    cpus: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def _perf_event_open() -> Callable[[bytes, int, int, int, int], int]:
    number = _SYSCALL.get(os.uname().machine)
    if number is None:
        raise OSError(f"perf_event_open's syscall number is not known here ({os.uname().machine})")
    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.syscall
    call.restype = ctypes.c_long

    def perf_event_open(attr: bytes, pid: int, cpu: int, group: int, flags: int) -> int:
        fd = int(call(number, attr, pid, cpu, group, ctypes.c_ulong(flags)))
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return fd

    return perf_event_open


class Ring:
    """One CPU's perf event and its mapped ring buffer of ``pages`` data pages (a power of 2)."""

    def __init__(self, fd: int, cpu: int, pages: int = RING_PAGES, *, counts_lost: bool) -> None:
        self.fd = fd
        self.cpu = cpu
        self.counts_lost = counts_lost
        """Whether :meth:`lost` reads the kernel's count (``PERF_FORMAT_LOST``)."""
        page = mmap.PAGESIZE
        self._map = mmap.mmap(fd, page * (1 + pages), mmap.MAP_SHARED)
        offset = struct.unpack_from("=Q", self._map, _DATA_OFFSET_AT)[0]
        self._start = offset or page  # data_offset is 0 before Linux 4.1: data follows page 0
        self._size = page * pages

    def records(self) -> Iterator[tuple[int, bytes]]:
        """(type, record) of everything written since the last call; frees the space."""
        head = struct.unpack_from("=Q", self._map, _HEAD_AT)[0]
        tail = struct.unpack_from("=Q", self._map, _TAIL_AT)[0]
        while tail + _HEADER.size <= head:
            kind, _misc, size = _HEADER.unpack(self._read(tail, _HEADER.size))
            if size < _HEADER.size:
                tail = head  # never written this way by the kernel: skip what is there
                break
            yield kind, self._read(tail, size)
            tail += size
        struct.pack_into("=Q", self._map, _TAIL_AT, tail)

    def _read(self, position: int, n: int) -> bytes:
        start = self._start + position % self._size
        end = start + n
        limit = self._start + self._size
        if end <= limit:
            return self._map[start:end]
        return self._map[start:limit] + self._map[self._start : self._start + end - limit]

    def lost(self) -> int:
        """Samples dropped so far because the ring was full (``counts_lost`` only)."""
        _value, lost = struct.unpack("=QQ", os.read(self.fd, 16))
        return int(lost)

    def close(self) -> None:
        """Unmap and close."""
        with contextlib.suppress(BufferError, ValueError):
            self._map.close()
        os.close(self.fd)


def _attr(event_id: int, read_format: int) -> bytes:
    sample = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW
    return _ATTR.pack(
        PERF_TYPE_TRACEPOINT, _ATTR.size, event_id, 1, sample, read_format, _USE_CLOCKID,
        1, 0, 0, 0, 0, 0, 0, time.CLOCK_MONOTONIC,
    )  # fmt: skip


def open_rings(event_id: int, cpus: list[int], pages: int = RING_PAGES) -> list[Ring]:
    """One enabled tracepoint event with its ring per CPU; ``OSError`` saying why not.

    Each event counts the samples its ring had no room for (``PERF_FORMAT_LOST``, Linux 6.0)
    where the kernel can; elsewhere only ``PERF_RECORD_LOST`` says it (written once there is
    room again, so a loss just before the end may go unreported there)."""
    open_event = _perf_event_open()
    read_format = PERF_FORMAT_LOST
    rings: list[Ring] = []
    try:
        for cpu in cpus:
            try:
                try:
                    fd = open_event(_attr(event_id, read_format), -1, cpu, -1, FD_CLOEXEC)
                except OSError as exc:
                    if exc.errno != errno.EINVAL or not read_format:
                        raise
                    read_format = 0  # a kernel before 6.0
                    fd = open_event(_attr(event_id, read_format), -1, cpu, -1, FD_CLOEXEC)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EPERM):
                    raise OSError(
                        exc.errno,
                        "perf_event_open refused (needs root or CAP_PERFMON; "
                        f"kernel.perf_event_paranoid={_paranoid()})",
                    ) from exc
                raise
            with contextlib.suppress(OSError):  # unfiltered, the pairing ignores the rest
                fcntl.ioctl(fd, PERF_EVENT_IOC_SET_FILTER, FILTER.encode() + b"\0")
            try:
                rings.append(Ring(fd, cpu, pages, counts_lost=bool(read_format)))
            except OSError:
                os.close(fd)
                raise
    except OSError:
        for ring in rings:
            ring.close()
        raise
    return rings


def _paranoid() -> str:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def _read_event(where: str) -> tuple[int, dict[str, Field]]:
    with open(os.path.join(where, "id"), encoding="ascii") as f:
        event_id = int(f.read())
    with open(os.path.join(where, "format"), encoding="utf-8") as f:
        return event_id, parse_format(f.read())


_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_private: list[tuple[int, dict[str, Field]]] = []
"""The tracepoint as :func:`read_private_tracepoint` read it (once per process)."""


def _mount_privately() -> None:
    """In the calling thread: a mount namespace of its own, nothing propagating out of it, and
    tracefs mounted at :data:`TRACEFS` in it."""
    libc = ctypes.CDLL(None, use_errno=True)
    unshare, mount = libc.unshare, libc.mount
    mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_void_p]
    steps: list[tuple[str, Callable[[], int]]] = [
        ("unshare(CLONE_NEWNS)", lambda: int(unshare(_CLONE_NEWNS))),
        ("private /", lambda: int(mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None))),
        ("mount", lambda: int(mount(b"nodev", TRACEFS.encode(), b"tracefs", 0, None))),
    ]
    for what, step in steps:
        if step() != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"{what}: {os.strerror(code)}")


def read_private_tracepoint() -> tuple[int, dict[str, Field]]:
    """The tracepoint read from a tracefs mounted where nobody else sees it; ``OSError`` when
    refused (it needs ``CAP_SYS_ADMIN``).

    A thread of its own unshares its mount namespace (``CLONE_NEWNS`` on a thread unshares that
    thread's filesystem context only, never the process's), makes every mount in it private (so
    nothing propagates back to the host's), mounts tracefs at :data:`TRACEFS` in it, reads the
    event's ``id`` and ``format`` and ends; the namespace and its mount go with the thread. The
    machine's mount table never changes. The id is the kernel's, valid for ``perf_event_open``
    from any namespace."""
    if _private:
        return _private[0]
    result: list[tuple[int, dict[str, Field]] | OSError] = []

    def read() -> None:
        try:
            _mount_privately()
            result.append(_read_event(os.path.join(TRACEFS, "events", EVENT)))
        except OSError as exc:
            result.append(exc)

    thread = threading.Thread(target=read, name="tracefs-private", daemon=True)
    thread.start()
    thread.join()
    got = result[0] if result else OSError("the private tracefs reader did not finish")
    if isinstance(got, OSError):
        raise got
    _private.append(got)
    return got


def read_tracepoint(tracefs: str = TRACEFS) -> tuple[int, dict[str, Field]]:
    """The tracepoint's id and its fields; ``OSError`` saying why they cannot be read.

    When tracefs is not mounted at :data:`TRACEFS`, they are read from a private mount of it
    (:func:`read_private_tracepoint`, root only)."""
    where = os.path.join(tracefs, "events", EVENT)
    try:
        return _read_event(where)
    except OSError as exc:
        unmounted = f"cannot read {where} ({exc.strerror}; tracefs not mounted?)"
        if tracefs != TRACEFS or exc.errno != errno.ENOENT:
            raise OSError(unmounted) from exc
        try:
            return read_private_tracepoint()
        except OSError as private:
            why = private.strerror or str(private)
            raise OSError(f"{unmounted}; a private tracefs mount was refused ({why})") from exc


@dataclass(slots=True)
class ArmedRings:
    """Rings opened before their reader exists (:func:`arm_rings`); the reader adopts them."""

    rings: list[Ring]
    attach_s: float
    """How long opening and mapping took (seconds)."""
    attached_monotonic_ns: int

    def close(self) -> None:
        """Release the rings (when nobody adopted them). Safe twice."""
        for ring in self.rings:
            ring.close()
        self.rings = []


def arm_rings(tracefs: str = TRACEFS, pages: int = RING_PAGES) -> ArmedRings:
    """Open and enable the tracepoint's rings now; ``OSError`` saying why not."""
    event_id, _fields = read_tracepoint(tracefs)
    began = time.monotonic_ns()
    rings = open_rings(event_id, online_cpus(), pages)
    attached = time.monotonic_ns()
    return ArmedRings(rings, (attached - began) / 1e9, attached)


HEADER = _HEADER
SAMPLE = _SAMPLE
