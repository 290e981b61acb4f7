"""The ``file`` exporter's component: appends JSON lines to one file, thread-safe."""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import re
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


RESEND_WINDOW_BYTES = 8 << 20
"""How much of an appended file's end is read back at start to recognise a resent record."""

_PEER = re.compile(r'"peer":\{[^{}]*\}')
"""A record's transport peer (``source.emitter.peer``: a flat object): the connection and the
moment one delivery came in, which a resend of the same record does not share."""


def line_identity(line: str) -> int:
    """What a line is compared by: its text, less the transport peer of the request that
    carried it (a resent span's observations arrive on another connection, at another time)."""
    if '"peer":' in line:
        line = _PEER.sub('"peer":{}', line)
    return hash(line)


def written_before(fd: int, limit: int = RESEND_WINDOW_BYTES) -> collections.Counter[int]:
    """The lines at the end of the open file ``fd`` (its last ``limit`` bytes, whole lines
    only), as a multiset of their hashes.

    A line is a record's whole encoding (its id, time and content), so a line written again
    (:func:`line_identity`: less its transport peer) is the same record delivered again: the
    batch a collector wrote in its last moments, whose sender was never told it arrived and
    resends it after the restart."""
    size = os.fstat(fd).st_size
    start = max(0, size - limit)
    lines = os.pread(fd, size - start, start).split(b"\n")
    lines.pop()  # after the last newline (open_private ended a torn line): nothing
    if start:
        lines = lines[1:]  # the first may be the end of a line that started before the window
    return collections.Counter(
        line_identity(line.decode("utf-8", "replace")) for line in lines if line
    )


COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("records", "lines written"),
    CounterSpec("resent_dropped", "lines not written again: copies of the file's last lines"),
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
        self._before: collections.Counter[int] = collections.Counter()
        """Hashes of the lines an appended file ended with at start, each dropped once when
        its line comes again (empty when there is nothing left to recognise)."""

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
            if self._config.append:
                try:
                    self._before = written_before(self._file.fileno())
                except OSError as exc:
                    self._file.close()
                    self._file = None
                    raise StartupError(
                        f"cannot read back {self._config.path}: {exc.strerror}"
                    ) from exc
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
        dropped = 0
        # joined outside the lock unless there is still something to recognise (``_before``
        # only ever shrinks: once seen empty it stays empty)
        text = None if self._before else "".join(line + "\n" for line in lines)
        with self._lock:
            if self._file is None:
                raise RuntimeError(f"{self._name}: not started or already shut down")
            if text is None:
                kept = self._not_written_before(lines) if self._before else lines
                dropped, lines = len(lines) - len(kept), kept
                text = "".join(line + "\n" for line in lines)
            self._file.write(text)
            if self._config.flush_interval <= 0:
                self._file.flush()
            else:
                self._dirty = True
        if lines:
            self._telemetry.count("records", len(lines))
        if dropped:
            self._telemetry.count("resent_dropped", dropped)

    def _not_written_before(self, lines: list[str]) -> list[str]:
        """``lines`` less the ones the file ended with at start (each recognised once)."""
        before, kept = self._before, []
        for line in lines:
            key = line_identity(line)
            if before[key] > 0:
                before[key] -= 1
                if not before[key]:
                    del before[key]
            else:
                kept.append(line)
        return kept

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
