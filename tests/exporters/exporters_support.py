"""Helpers of the exporter tests: a real OTLP receiver (gRPC and HTTP) on free ports."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

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


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> int:
    """Signal ``proc`` and wait for it (killing it if it does not exit in time)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
