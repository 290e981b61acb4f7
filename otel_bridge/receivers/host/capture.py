"""Opt-in content capture: the size and sha256 of each file the observed lineage wrote or read.

Off by default (metadata only): ``capture: {file_hashes: true, max_bytes: N}`` on the host
receiver, or ``observe --hash-files``. The receiver never stores content, only its size and
SHA-256, in a ``file.content`` event per reading (``docs/contracts.md``), which normalize puts on
the file's ``FileFacts.content``:

* ``linux``: when a writer closes a file it had open for writing (``FAN_CLOSE_WRITE``), the
  file is read through the descriptor the kernel handed with the event (``read_at:
  close_write``): the bytes as that close left them.
* every backend: at the end of the run (after the backends stopped), each path the lineage wrote,
  created, renamed to or opened for writing (``portable``: each path its watched directories saw
  created or modified) and that was not read at a later close is read by path (``read_at:
  run_end``): the bytes the run left behind;
* every backend: at the end of the run, each path the lineage only opened or read (not a runtime
  read of the graph's folding rule, not under ``/dev``, ``/proc``, ``/sys`` or ``/run``) is read
  the same way (``read_at: run_end``): its content when the run ended, which is what was read
  unless something outside the lineage changed it meanwhile.

What a reading could not establish is stated, never guessed: ``too_large`` (above
``max_bytes``; its size only), ``changed`` (size or modification time moved while reading),
``unreadable``, ``missing`` (gone by then), ``not_regular`` (a device, pipe or directory is never
opened).
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from otel_bridge.graph.fold import runtime_read_class
from otel_bridge.model import AnyValue, LogRecord

CLOSE_WRITE = "close_write"
RUN_END = "run_end"
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_CHUNK = 1 << 20
_WRITE_ACCESS = frozenset({"write", "read_write"})
_NOT_INPUTS = ("/dev/", "/proc/", "/sys/", "/run/")
"""Paths never read as inputs (devices and kernel interfaces: reading one can block or change
state); interpreter and library reads are left out by the graph's runtime-read rule."""
_CHANGED = frozenset({"created", "modified"})
"""``file.change`` types (portable backend's watched directories) that leave content."""


@dataclass(slots=True)
class CaptureConfig:
    """``receivers.host.capture``: what the receiver may read of file content (off by default)."""

    file_hashes: bool = False
    """Record the size and SHA-256 of each file the lineage wrote (``docs/host.md``)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """Files larger than this are not read: their size is recorded, state ``too_large``."""

    def problems(self) -> list[str]:
        """Problems with these settings, each as ``capture.key: message``."""
        return [] if self.max_bytes >= 0 else ["capture.max_bytes: must be >= 0"]


def read_fd(fd: int, max_bytes: int) -> dict[str, AnyValue]:
    """The ``file.content`` attributes of the regular file open as ``fd`` (read from offset 0)."""
    before = os.fstat(fd)
    if not stat.S_ISREG(before.st_mode):
        return {"file.content.state": "not_regular"}
    if before.st_size > max_bytes:
        return {"file.content.state": "too_large", "file.size": before.st_size}
    digest = hashlib.sha256()
    size = 0
    while size <= max_bytes:
        chunk = os.pread(fd, _CHUNK, size)
        if not chunk:
            break
        digest.update(chunk)
        size += len(chunk)
    after = os.fstat(fd)
    if size > max_bytes:
        return {"file.content.state": "too_large", "file.size": after.st_size}
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns) or (
        size != after.st_size
    ):
        return {
            "file.content.state": "changed",
            "file.content.detail": f"size {before.st_size} -> {after.st_size} while read",
        }
    return {
        "file.content.state": "hashed",
        "file.size": size,
        "file.hash.sha256": digest.hexdigest(),
    }


def read_path(path: str, max_bytes: int) -> dict[str, AnyValue]:
    """The ``file.content`` attributes of the file at ``path`` (a non-regular one is not opened)."""
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return {"file.content.state": "missing"}
    except OSError as exc:
        return {"file.content.state": "unreadable", "file.content.detail": exc.strerror or str(exc)}
    if not stat.S_ISREG(found.st_mode):
        return {"file.content.state": "not_regular"}
    if found.st_size > max_bytes:
        return {"file.content.state": "too_large", "file.size": found.st_size}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except FileNotFoundError:
        return {"file.content.state": "missing"}
    except OSError as exc:
        return {"file.content.state": "unreadable", "file.content.detail": exc.strerror or str(exc)}
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
            return {"file.content.state": "changed", "file.content.detail": "replaced while read"}
        return read_fd(fd, max_bytes)
    except OSError as exc:
        return {"file.content.state": "unreadable", "file.content.detail": exc.strerror or str(exc)}
    finally:
        os.close(fd)


Record = Callable[[str, int, dict[str, AnyValue]], LogRecord]
"""Builds one record: event name, time, attributes (``EventFactory.record`` without pid)."""


class ContentCapture:
    """Tracks the paths the lineage wrote (from the records the receiver emits) and reads them.

    :meth:`note` sees every record on its way out; :meth:`at_close` reads through a kernel
    descriptor (``linux``); :meth:`finish` reads what is left by path at the end of the run.
    """

    def __init__(
        self,
        config: CaptureConfig,
        record: Record,
        emit: Callable[[LogRecord], None],
        exclude: tuple[str, ...] = (),
    ) -> None:
        self.max_bytes = config.max_bytes
        self._record = record
        self._emit = emit
        self._exclude = tuple(p.rstrip("/") + "/" for p in exclude)
        self._dirty: dict[str, None] = {}
        """Paths written and not read since (insertion order: the order of first write)."""
        self._inputs: dict[str, None] = {}
        """Paths the lineage only read (runtime reads excluded), read at the end of the run."""
        self._lock = threading.Lock()
        self.read = 0

    def note(self, record: LogRecord) -> None:
        """Track the path a file event wrote (or drop one deleted or renamed away)."""
        name = record.event_name
        if not name.startswith("file."):
            return
        a = record.attributes
        path = a.get("file.path")
        if not isinstance(path, str) or path.startswith(self._exclude):
            return
        with self._lock:
            if (
                name in ("file.write", "file.create")
                or (name == "file.open" and a.get("file.access") in _WRITE_ACCESS)
                or (name == "file.change" and a.get("file.change.type") in _CHANGED)
            ):
                self._dirty[path] = None
            elif name == "file.rename":
                self._dirty.pop(path, None)
                new = a.get("file.new_path")
                if isinstance(new, str) and not new.startswith(self._exclude):
                    self._dirty[new] = None
            elif name in ("file.delete", "file.content"):
                self._dirty.pop(path, None)
                self._inputs.pop(path, None)
            elif (
                name in ("file.open", "file.read")
                and path not in self._inputs
                and not path.startswith(_NOT_INPUTS)
                and runtime_read_class(path) is None
            ):
                self._inputs[path] = None

    def at_close(self, fd: int, path: str) -> None:
        """Read ``path`` through ``fd`` (a close-write event's descriptor) and record it."""
        if path.startswith(self._exclude):
            return
        try:
            attrs = read_fd(fd, self.max_bytes)
        except OSError as exc:
            attrs = {"file.content.state": "unreadable", "file.content.detail": str(exc)}
        self._send(path, CLOSE_WRITE, attrs)

    def finish(self) -> None:
        """Read every path written and not read since (the end of the run)."""
        with self._lock:
            paths, self._dirty = list(self._dirty), {}
            inputs = [p for p in self._inputs if p not in paths]
            self._inputs = {}
        for path in (*paths, *inputs):
            self._send(path, RUN_END, read_path(path, self.max_bytes))

    def _send(self, path: str, when: str, attrs: dict[str, AnyValue]) -> None:
        full: dict[str, AnyValue] = {"file.path": path, "file.content.read_at": when, **attrs}
        self.read += 1
        self._emit(self._record("file.content", time.time_ns(), full))  # noted on its way out
