"""kill -9 a collector whose backend is down: every span it acknowledged still arrives.

Real processes: an OTel SDK client sends spans over OTLP/gRPC to collector A (``otel-bridge
run``), whose ``otlp`` exporter has a persistent sending queue and targets collector B, which is
not running. A is killed with SIGKILL part-way through, restarted, then B is started (writing the
spans it receives to a file). Every span A acknowledged must arrive at B; the promise is
at-least-once, and in this scenario (nothing was ever delivered before the kill) exactly once
is what arrives.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from exporters_support import stop
from waiting import poll, start_run

from otel_bridge.exporters.file import read_batch
from otel_bridge.testing import free_port

COLLECTOR_A = """
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:${env:A_PORT}
exporters:
  otlp/b:
    endpoint: 127.0.0.1:${env:B_PORT}
    retry_on_failure: {initial_interval: 0.1, max_interval: 0.5, max_elapsed_time: 0}
    sending_queue: {storage: "${env:QUEUE}", num_consumers: 2}
    shutdown_timeout: 10
    signals: [traces]
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp/b]
"""

COLLECTOR_B = """
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:${env:B_PORT}
exporters:
  file:
    path: ${env:OUT}
    signals: [spans]
    flush_interval: 0
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
"""

SPANS = 30
KILL_AFTER = 20


def send_spans(port: int, names: list[str]) -> list[str]:
    """Send each span in its own export; the names the collector acknowledged (200/OK)."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

    acked: list[str] = []

    class Recording(OTLPSpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            result = super().export(spans)
            if result is SpanExportResult.SUCCESS:
                acked.extend(s.name for s in spans)
            return result

    provider = TracerProvider(resource=Resource.create({"service.name": "wal-test"}))
    exporter = Recording(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=2)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("wal")
    for name in names:
        with tracer.start_as_current_span(name):
            pass
    provider.shutdown()
    return acked


def wait_for_names(path: Path, names: set[str], timeout: float = 60.0) -> list[str]:
    """The span names written to ``path`` once they include ``names`` (fails on timeout)."""
    seen = poll(
        lambda: [s.name for s in read_batch(path).spans] if path.exists() else [],
        lambda names_seen: names <= set(names_seen),
        timeout,
        interval=0.1,
    )
    assert names <= set(seen), f"missing after {timeout}s: {sorted(names - set(seen))}"
    return seen


@pytest.mark.slow
def test_acknowledged_spans_survive_kill_9_and_arrive_once_downstream(tmp_path: Path) -> None:
    """SIGKILL with the backend down loses nothing acknowledged; the restart replays it."""
    env = {
        "A_PORT": str(free_port()),
        "B_PORT": str(free_port()),
        "QUEUE": str(tmp_path / "queue"),
        "OUT": str(tmp_path / "b" / "spans.jsonl"),
    }
    (tmp_path / "a.yaml").write_text(COLLECTOR_A)
    (tmp_path / "b.yaml").write_text(COLLECTOR_B)
    port = int(env["A_PORT"])

    a, a_err = start_run(tmp_path / "a.yaml", env, ready=False, timeout=30)
    a_err.wait_for(r"running \(pid")
    acked = send_spans(port, [f"op-{i}" for i in range(KILL_AFTER)])
    assert len(acked) == KILL_AFTER
    assert stop(a, signal.SIGKILL) == -signal.SIGKILL
    a_err.rest()
    assert send_spans(port, [f"late-{i}" for i in range(2)]) == []  # nobody acknowledges these

    a, a_err = start_run(tmp_path / "a.yaml", env, ready=False, timeout=30)
    replayed = int(a_err.wait_for(r"replaying (\d+) batches").group(1))
    a_err.wait_for(r"running \(pid")
    acked += send_spans(port, [f"op-{i}" for i in range(KILL_AFTER, SPANS)])
    assert len(acked) == SPANS

    b, b_err = start_run(tmp_path / "b.yaml", env, ready=False, timeout=30)
    try:
        arrived = wait_for_names(Path(env["OUT"]), set(acked))
        assert stop(a) == 0
    finally:
        stop(a)
        stop(b)
    a_log, b_log = a_err.log(), b_err.log()
    assert replayed == KILL_AFTER
    assert sorted(arrived) == sorted(acked), "each acknowledged span exactly once, nothing else"
    assert "exporter errors 0" in a_log
    assert "exporter errors 0" in b_log
    assert "torn" not in a_log
