"""Waiting on conditions in tests: poll a predicate until it holds or a deadline passes.

Tests never sleep to let something happen. They wait for the condition the sleep stood for
(:func:`wait_until`), or read a value until it is ready and then assert on the last reading
(:func:`poll`), so a slow machine only makes a test slower, never wrong, and a failure says
what was awaited.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float = 10.0,
    message: str = "the condition",
    *,
    interval: float = 0.01,
) -> T:
    """Call ``predicate`` until it returns a true value, and return that value.

    Raises ``AssertionError`` naming ``message`` when ``timeout`` seconds pass first (the
    predicate is always tried once more at the deadline).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {message}")
        time.sleep(interval)  # the poll interval between two checks, not synchronisation


def poll(
    read: Callable[[], T],
    ready: Callable[[T], object],
    timeout: float = 10.0,
    *,
    interval: float = 0.05,
) -> T:
    """Call ``read`` until ``ready`` holds for its result or ``timeout`` passes; the last result.

    For a test that asserts on the result afterwards, so that a timeout fails with the detail
    of what was read rather than a bare "timed out".
    """
    deadline = time.monotonic() + timeout
    result = read()
    while not ready(result) and time.monotonic() < deadline:
        time.sleep(interval)  # the poll interval between two reads, not synchronisation
        result = read()
    return result


class Stderr:
    """Collects a child process's stderr lines on a thread, so waits on them can time out."""

    def __init__(self, proc: subprocess.Popen[str], *, timeout: float = 20.0) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.timeout = timeout
        assert proc.stderr is not None
        self.stream = proc.stderr
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        with self.stream:  # closed at the child's end of output, read or not
            for line in self.stream:
                self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float | None = None) -> re.Match[str]:
        """The first unread line matching ``pattern``; fails the test on timeout."""
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"no line matching {pattern!r} in {self.seen}")

    def _drain(self) -> list[str]:
        self.thread.join(10)
        out = []
        while not self.lines.empty():
            out.append(self.lines.get())
        self.seen.extend(out)
        return out

    def rest(self) -> str:
        """The lines not read yet; call after the child exited. Closes the pipe."""
        return "".join(self._drain())

    def log(self) -> str:
        """Every line, read or not; call after the child exited. Closes the pipe."""
        self._drain()
        return "".join(self.seen)


def start_run(
    config: Path,
    env: Mapping[str, str],
    *extra: str,
    ready: bool = True,
    timeout: float = 60.0,
    cwd: Path | None = None,
    log_level: str | None = None,
) -> tuple[subprocess.Popen[str], Stderr]:
    """``python -m otel_bridge [--log-level L] run -c config *extra`` as a child, ``env`` over
    this process's environment, its stderr collected. With ``ready`` it returns once the child
    says it is running (and is killed if it does not within ``timeout``)."""
    top = ["--log-level", log_level] if log_level else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge", *top, "run", "-c", str(config), *extra],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env},
        cwd=cwd,
    )
    err = Stderr(proc, timeout=timeout)
    if ready:
        try:
            err.wait_for(r"running \(pid")
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    return proc, err
