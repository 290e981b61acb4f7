"""What a gateway already accepted: record keys remembered in memory and, optionally, on disk.

Keys are 64-bit BLAKE2b digests of a record's identity (see ``logs_to_evidence``). Memory holds
two generations of at most ``window // 2`` keys each: when the current one fills, the previous one
is dropped, so the last ``window // 2`` keys are always remembered exactly (a resend older than
that is accepted again, which can only add, never lose). Two different records share a digest
with probability about n^2 / 2^65 (under 3e-8 for a million remembered keys).

With a path, every key is appended (8 bytes, ``O_APPEND``) **after** the records it names were
handed on successfully, and the file is read back at start, so a restarted gateway still knows
what it accepted before a kill -9. Appending after the hand-on means a crash between the two can
at worst accept that batch once more; appending before could lose it, which is worse. The file is
created ``0600`` in ``0700`` directories, opened with ``O_NOFOLLOW``, held with ``flock`` (one
gateway process per file) and rewritten (temporary file, ``fsync``, ``rename``) with only the
remembered keys once it holds more than ``window`` keys.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
from collections.abc import Iterable

from otel_bridge.errors import StartupError
from otel_bridge.rundir import make_private_dirs

KEY_BYTES = 8


def digest(*parts: str) -> int:
    """The 64-bit key of a record identity made of ``parts``."""
    h = hashlib.blake2b("\x00".join(parts).encode("utf-8", "surrogatepass"), digest_size=8)
    return int.from_bytes(h.digest(), "little")


class SeenKeys:
    """A bounded set of accepted keys with reservations (see the module docstring)."""

    def __init__(self, window: int, path: str = "") -> None:
        self._half = max(1, window // 2)
        self._current: set[int] = set()
        self._previous: set[int] = set()
        self._pending: set[int] = set()
        self._lock = threading.Lock()
        self._path = path
        self._fd = -1
        self._written = 0
        self.loaded = 0

    # ----------------------------------------------------------------- lifecycle

    def open(self) -> None:
        """Open (and read back) the key file, if configured. Raises :class:`StartupError`."""
        if not self._path or self._fd >= 0:
            return
        try:
            make_private_dirs(os.path.dirname(os.path.abspath(self._path)))
            fd = os.open(
                self._path,
                os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                0o600,
            )
        except OSError as exc:
            raise StartupError(f"dedupe.path: cannot open {self._path!r}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StartupError(
                f"dedupe.path: {self._path!r} is held by another collector"
            ) from None
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0)
        usable = len(data) - len(data) % KEY_BYTES  # a key torn by a kill is dropped
        keys = [
            int.from_bytes(data[i : i + KEY_BYTES], "little") for i in range(0, usable, KEY_BYTES)
        ]
        self._fd = fd
        for key in keys[-2 * self._half :]:
            self._add(key)
        self.loaded = len(keys)
        self._written = len(keys)
        if usable != size or self._written > 2 * self._half:
            self._compact()

    def close(self) -> None:
        """Close the key file. Safe twice."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # ----------------------------------------------------------------- keys

    def reserve(self, keys: Iterable[int]) -> list[bool]:
        """For each key: True when it is new (and now reserved), False when already accepted or
        reserved by a batch in flight."""
        out: list[bool] = []
        with self._lock:
            for key in keys:
                if key in self._current or key in self._previous or key in self._pending:
                    out.append(False)
                else:
                    self._pending.add(key)
                    out.append(True)
        return out

    def release(self, keys: Iterable[int]) -> None:
        """Forget reservations whose batch was not accepted downstream."""
        with self._lock:
            self._pending.difference_update(keys)

    def commit(self, keys: list[int]) -> None:
        """Remember reserved keys as accepted (and append them to the file)."""
        if not keys:
            return
        with self._lock:
            self._pending.difference_update(keys)
            for key in keys:
                self._add(key)
            if self._fd >= 0:
                os.write(self._fd, b"".join(k.to_bytes(KEY_BYTES, "little") for k in keys))
                self._written += len(keys)
                if self._written > 4 * self._half:
                    self._compact()

    def _add(self, key: int) -> None:
        if len(self._current) >= self._half:
            self._previous = self._current
            self._current = set()
        self._current.add(key)

    def _compact(self) -> None:
        keys = [*self._previous, *self._current]
        tmp = f"{self._path}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            os.write(fd, b"".join(k.to_bytes(KEY_BYTES, "little") for k in keys))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, self._path)
        new = os.open(self._path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
        fcntl.flock(new, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(self._fd)
        self._fd = new
        self._written = len(keys)
