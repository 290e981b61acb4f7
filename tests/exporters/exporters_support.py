"""Helpers of the exporter tests: a real OTLP receiver (gRPC and HTTP) on free ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from waiting import Stderr

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


def start_run(config: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], Stderr]:
    """``python -m otel_bridge run -c config`` with stderr collected."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge", "run", "-c", str(config)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env},
    )
    return proc, Stderr(proc, timeout=30.0)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> int:
    """Signal ``proc`` and wait for it (killing it if it does not exit in time)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
