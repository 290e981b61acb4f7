"""Helpers of the exporter tests: a real OTLP receiver (gRPC and HTTP) on free ports."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from otel_bridge.component import CreateSettings, Host
from otel_bridge.receivers.otlp import OtlpReceiver, factory
from otel_bridge.receivers.otlp.config import GrpcConfig, HttpConfig, OtlpReceiverConfig, Protocols
from otel_bridge.testing import RecordingConsumer


@contextmanager
def downstream() -> Iterator[tuple[OtlpReceiver, RecordingConsumer]]:
    """Our OTLP receiver on port 0 (both protocols) feeding a recorder, stopped on exit."""
    config = OtlpReceiverConfig(
        protocols=Protocols(
            grpc=GrpcConfig(endpoint="127.0.0.1:0"), http=HttpConfig(endpoint="127.0.0.1:0")
        )
    )
    sink = RecordingConsumer()
    receiver = factory.create(CreateSettings(id="otlp"), config, sink)
    assert isinstance(receiver, OtlpReceiver)
    receiver.start(Host())
    try:
        yield receiver, sink
    finally:
        receiver.shutdown()


class Stderr:
    """Collects a child process's stderr lines on a thread, so waits can time out."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        assert proc.stderr is not None
        self.stream = proc.stderr
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        for line in self.stream:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """The first unread line matching ``pattern``; fails the test on timeout."""
        deadline = time.monotonic() + timeout
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

    def rest(self) -> str:
        """Everything seen, once the child exited (closes the pipe)."""
        self.thread.join(10)
        self.stream.close()
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return "".join(self.seen)


def start_run(config: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], Stderr]:
    """``python -m otel_bridge run -c config`` with stderr collected."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge", "run", "-c", str(config)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env},
    )
    return proc, Stderr(proc)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> int:
    """Signal ``proc`` and wait for it (killing it if it does not exit in time)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
