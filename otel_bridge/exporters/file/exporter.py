"""The ``file`` exporter's component: appends JSON lines to one file, thread-safe."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import tempfile
import threading
from typing import IO

from otel_bridge.component import (
    EXPORTER,
    STANDARD_COUNTERS,
    CounterScope,
    CounterSpec,
    Host,
    Telemetry,
)
from otel_bridge.errors import StartupError
from otel_bridge.model import Batch
from otel_bridge.rundir import make_private_dirs

from .codec import LineEncoder
from .config import Config

_log = logging.getLogger("otel_bridge.exporters.file")


def _earlier_size(path: str) -> int:
    """The size of a regular file already at ``path`` (0 when there is none; links not
    followed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def open_private(path: str, *, append: bool) -> IO[str]:
    """Open ``path`` for writing text; a file it creates gets mode 0600.

    No symbolic link is followed: appending opens with ``O_NOFOLLOW`` (a link at ``path`` is
    refused) and requires a regular file (a FIFO is refused, never waited on); replacing
    creates a new file exclusively and renames it over ``path`` (a link there is replaced, its
    target never touched).
    """
    make_private_dirs(os.path.dirname(os.path.abspath(path)))
    if append:
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OSError(errno.ELOOP, "is a symbolic link (never followed)") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
        os.set_blocking(fd, True)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            # a line torn by a crash mid-write: end it, so the next record starts its own line
            # (the torn one stays unreadable; its batch was never acknowledged, and is resent)
            os.write(fd, b"\n")
        return os.fdopen(fd, "a", encoding="utf-8")
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        os.replace(tmp, path)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return os.fdopen(fd, "w", encoding="utf-8")


COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("records", "lines written"),
    CounterSpec("flush_errors", "periodic flushes that failed", "{errors}"),
)
"""The counters of the ``file`` exporter."""


class FileExporter:
    """Writes the configured parts of every batch as JSON lines to ``config.path``."""

    def __init__(self, config: Config, *, name: str, telemetry: Telemetry) -> None:
        self._config = config
        self._name = name
        self._telemetry = telemetry if telemetry.scope else telemetry.scoped(_scope(name))
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._dirty = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._encoder = LineEncoder(config.signals)

    @property
    def path(self) -> str:
        """The file written."""
        return self._config.path

    def start(self, host: Host) -> None:
        """Open the file (mode 0600, parents 0700) and start the periodic flush."""
        del host
        with self._lock:
            if self._file is not None or self._closed:
                return
            replaced = 0 if self._config.append else _earlier_size(self._config.path)
            try:
                self._file = open_private(self._config.path, append=self._config.append)
            except OSError as exc:
                raise StartupError(f"cannot open {self._config.path}: {exc.strerror}") from exc
        if replaced:
            _log.warning(
                "%s: replaced %d bytes of earlier records in %s (append: true keeps them "
                "across restarts)",
                self._name,
                replaced,
                self._config.path,
            )
        if self._config.flush_interval > 0:
            self._thread = threading.Thread(
                target=self._run, name=f"otel-bridge-{self._name}", daemon=True
            )
            self._thread.start()

    def consume(self, batch: Batch) -> None:
        """Append the batch's lines; flush at once when ``flush_interval`` is 0."""
        lines = self._encoder.encode(batch)
        if not lines:
            return
        text = "".join(line + "\n" for line in lines)
        with self._lock:
            if self._file is None:
                raise RuntimeError(f"{self._name}: not started or already shut down")
            self._file.write(text)
            if self._config.flush_interval <= 0:
                self._file.flush()
            else:
                self._dirty = True
        self._telemetry.count("records", len(lines))

    def flush(self) -> None:
        """Write buffered lines to the operating system."""
        with self._lock:
            if self._file is not None and self._dirty:
                self._file.flush()
                self._dirty = False

    def _run(self) -> None:
        while not self._stop.wait(self._config.flush_interval):
            try:
                self.flush()
            except OSError as exc:
                self._telemetry.count("flush_errors")
                self._telemetry.report_once(
                    f"exporter.{self._name}.flush", f"{self._name}: flush failed: {exc}"
                )

    def shutdown(self) -> None:
        """Flush and close the file. Safe before start and twice."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._lock:
            self._closed = True
            f, self._file = self._file, None
        if f is not None:
            f.flush()
            os.fsync(f.fileno())
            f.close()


def _scope(name: str) -> CounterScope:
    return CounterScope.of(EXPORTER, name, (*COUNTERS, *STANDARD_COUNTERS[EXPORTER]))
