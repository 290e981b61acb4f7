"""Suite-wide settings, and the OTLP tests' fixtures (a real receiver on free ports feeding a
recording consumer).

Hypothesis: no per-example deadline and no "input generation is slow" health check. Both measure
wall time, which a shared, loaded machine stretches without anything being wrong; the properties
themselves and their example counts are unchanged.

Warm server: every test's `observe` looks for a warm server under `$XDG_RUNTIME_DIR` (else
`/tmp/otel-bridge-<uid>`). The suite points that variable at a directory of its own, so a warm
server a developer left running (started from other code) never serves the suite's commands; the
warm tests start their own servers under their own runtime directories.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings
from otlp_fixtures import Running, StartReceiver

from otel_bridge.component import CreateSettings, Host
from otel_bridge.receivers.otlp import OtlpReceiver, factory
from otel_bridge.receivers.otlp.config import (
    GrpcConfig,
    HttpConfig,
    OtlpReceiverConfig,
    Protocols,
)
from otel_bridge.testing import RecordingConsumer, free_port

_RUNTIME = tempfile.mkdtemp(prefix="otel-bridge-tests-runtime-")
os.environ["XDG_RUNTIME_DIR"] = _RUNTIME
atexit.register(shutil.rmtree, _RUNTIME, ignore_errors=True)


@pytest.fixture
def start_receiver() -> Iterator[StartReceiver]:
    """Start receivers on port 0 (both protocols unless told); shut them down afterwards."""
    started: list[OtlpReceiver] = []

    def start(
        *,
        grpc: bool = True,
        http: bool = True,
        max_recv_msg_size_mib: int = 4,
        max_request_body_size: int = 20 * 1024 * 1024,
        sink: RecordingConsumer | None = None,
        retry_after: float = 1.0,
    ) -> Running:
        config = OtlpReceiverConfig(
            protocols=Protocols(
                grpc=GrpcConfig(endpoint="127.0.0.1:0", max_recv_msg_size_mib=max_recv_msg_size_mib)
                if grpc
                else None,
                http=HttpConfig(endpoint="127.0.0.1:0", max_request_body_size=max_request_body_size)
                if http
                else None,
            ),
            retry_after=retry_after,
        )
        sink = sink or RecordingConsumer()
        receiver = factory.create(CreateSettings(id="otlp"), config, sink)
        assert isinstance(receiver, OtlpReceiver)
        host = Host()
        receiver.start(host)
        started.append(receiver)
        return Running(receiver, sink, host)

    yield start
    for receiver in started:
        receiver.shutdown()


@pytest.fixture
def unused_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on (bound, then released)."""
    return free_port()


@pytest.fixture
def start_config() -> Iterator[Callable[..., Running]]:
    """Start a receiver from a full config (``sink`` optional); shut it down afterwards."""
    started: list[OtlpReceiver] = []

    def start(config: OtlpReceiverConfig, sink: RecordingConsumer | None = None) -> Running:
        sink = sink or RecordingConsumer()
        receiver = factory.create(CreateSettings(id="otlp"), config, sink)
        assert isinstance(receiver, OtlpReceiver)
        host = Host()
        receiver.start(host)
        started.append(receiver)
        return Running(receiver, sink, host)

    yield start
    for receiver in started:
        receiver.shutdown()


# A suite started in the background by a non-interactive shell (`make check &`) inherits SIGINT
# ignored, and every child inherits that too: a collector, `view` or a shell trap the tests stop
# with SIGINT would then never see it. A handler (unlike "ignored") is reset to the default in
# an exec'd child, so restoring Python's own handler here gives children the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

settings.register_profile(
    "otel-bridge",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("otel-bridge")
