"""Issue 11: under ``observe`` the user's own ``OTEL_EXPORTER_OTLP_*`` destination still receives
the agent's telemetry, metrics included, in the protocol that destination expects.

The agent is a real OpenTelemetry SDK program (trace and metric exporters, gRPC or HTTP); the
destination is a real gRPC and HTTP server on loopback (``otlp_sink``) that keeps each request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from observe_support import observe_argv
from otlp_sink import Sink, sink

from otel_bridge import rundir
from otel_bridge.exporters.otlp.relay import FOLLOWED, convert, forward_from_env

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the gRPC exporter")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

AGENT = textwrap.dedent(
    """
    import logging, sys
    if sys.argv[1] == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=60_000)
    meters = MeterProvider(metric_readers=[reader])
    meters.get_meter("m").create_counter("agent.steps").add(3)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    with provider.get_tracer("t").start_as_current_span("step-" + sys.argv[1]):
        pass
    logs = LoggerProvider()
    logs.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    logging.getLogger("agent").addHandler(LoggingHandler(logger_provider=logs))
    logging.getLogger("agent").warning("agent-log-" + sys.argv[1])
    provider.shutdown()
    meters.shutdown()
    logs.shutdown()
    """
)
"""An agent exporting one span, one counter (value 3) and one log record with the SDK's
exporters."""


@pytest.fixture(name="destination")
def _destination() -> Iterator[Sink]:
    yield from sink()


def _observe(tmp_path: Path, kind: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "agent.py").write_text(AGENT)
    full = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_EXPORTER_OTLP_")}
    full.update(env)
    return subprocess.run(
        observe_argv(tmp_path, sys.executable, "agent.py", kind),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=full,
    )


def _summary(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "run" / rundir.SUMMARY).read_text())
    return data


def _span_names(bodies: list[bytes]) -> set[str]:
    return {
        span.name
        for body in bodies
        for rs in ExportTraceServiceRequest.FromString(body).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    }


def _log_bodies(bodies: list[bytes]) -> list[str]:
    return [
        record.body.string_value
        for body in bodies
        for rl in ExportLogsServiceRequest.FromString(body).resource_logs
        for sl in rl.scope_logs
        for record in sl.log_records
    ]


def _metric_sums(bodies: list[bytes]) -> dict[str, int]:
    return {
        m.name: sum(p.as_int for p in m.sum.data_points)
        for body in bodies
        for rm in ExportMetricsServiceRequest.FromString(body).resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["grpc", "http"])
def test_traces_and_metrics_reach_the_destination_in_the_agents_protocol(
    tmp_path: Path, destination: Sink, kind: str
) -> None:
    """No protocol variable, a port that is not 4317: the agent's gRPC (or HTTP/protobuf)
    requests reach the destination over gRPC (or HTTP/protobuf), metrics included; observe
    records the span, does not record the metrics, and says both."""
    port = destination.grpc_port if kind == "grpc" else destination.http_port
    result = _observe(tmp_path, kind, {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert result.returncode == 0, result.stderr
    protocol = "grpc" if kind == "grpc" else "http/protobuf"
    assert {r.protocol for r in destination.received} == {protocol}
    if kind == "http":
        paths = {r.path for r in destination.received}
        assert paths == {"/v1/traces", "/v1/metrics", "/v1/logs"}
    traces = [r.body for r in destination.of("traces")]
    assert _span_names(traces) == {f"step-{kind}", "otel-bridge observe"}
    assert _metric_sums([r.body for r in destination.of("metrics")]) == {"agent.steps": 3}
    assert _log_bodies([r.body for r in destination.of("logs")]) == [f"agent-log-{kind}"]
    summary = _summary(tmp_path)
    forward = summary["forward"]
    assert forward["signals"]["traces"]["protocols"] == [protocol]
    assert forward["signals"]["metrics"]["protocols"] == [protocol]
    assert forward["signals"]["metrics"]["protocol_source"] == FOLLOWED
    assert forward["spans_sent"] == 2
    assert forward["log_records_sent"] == 1
    assert forward["signals"]["logs"]["protocols"] == [protocol]
    assert forward["metrics_requests_sent"] == len(destination.of("metrics")) >= 1
    assert forward["spans_not_sent"] == forward["metrics_requests_not_sent"] == 0
    assert summary["otlp"]["metrics_requests_refused"] == 0
    assert summary["otlp"]["warnings"] == []
    counters = summary["counters"]
    assert counters["receiver.otlp.metrics_requests_forwarded"] >= 1
    assert "step-" + kind in (tmp_path / "run" / rundir.SEM_STREAM).read_text()
    assert "agent.steps" not in (tmp_path / "run" / rundir.SEM_STREAM).read_text()
    assert "otel-bridge does not record metrics" in result.stderr
    assert "warning:" not in result.stderr


@pytest.mark.slow
def test_protocol_variables_win_per_signal(tmp_path: Path, destination: Sink) -> None:
    """``OTEL_EXPORTER_OTLP_PROTOCOL=http/json`` for everything, and metrics to their own
    endpoint with ``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL=grpc``: the SDK's HTTP/protobuf
    requests are sent as OTLP/JSON (the same spans) and its metrics over gRPC."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{destination.http_port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:{destination.grpc_port}",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=a%20b",
    }
    result = _observe(tmp_path, "http", env)
    assert result.returncode == 0, result.stderr
    traces = destination.of("traces")
    assert {(r.protocol, r.path) for r in traces} == {("http/json", "/v1/traces")}
    assert all(r.headers["x-tenant"] == "a b" for r in destination.received)
    as_proto = [convert("traces", r.body, "http/json", "http/protobuf") for r in traces]
    assert _span_names(as_proto) == {"step-http", "otel-bridge observe"}
    recorded = (tmp_path / "run" / rundir.SEM_STREAM).read_text()
    trace_ids = {s["traceId"] for r in traces for s in _json_spans(r.body)}
    assert trace_ids
    assert all(t in recorded for t in trace_ids)
    metrics = destination.of("metrics")
    assert {r.protocol for r in metrics} == {"grpc"}
    assert _metric_sums([r.body for r in metrics]) == {"agent.steps": 3}
    signals = _summary(tmp_path)["forward"]["signals"]
    assert signals["traces"]["protocol_source"] == "OTEL_EXPORTER_OTLP_PROTOCOL"
    assert signals["metrics"]["protocol_source"] == "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
    assert signals["metrics"]["destination"] == f"http://127.0.0.1:{destination.grpc_port}"


def _json_spans(body: bytes) -> list[dict[str, Any]]:
    doc = json.loads(body)
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def test_forward_from_env_reads_the_spec_variables() -> None:
    """Per-signal variables win; a per-signal endpoint is used as-is, the base one gets
    ``/v1/<signal>`` for HTTP; no protocol variable means following the agent's requests."""
    forward = forward_from_env(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "https://logs.example/ingest",
            "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/json",
            "OTEL_EXPORTER_OTLP_HEADERS": "a=1",
            "OTEL_EXPORTER_OTLP_LOGS_HEADERS": "a=2,b=3",
        }
    )
    assert forward is not None
    traces, logs = forward.destinations["traces"], forward.destinations["logs"]
    assert (traces.protocol, traces.protocol_source) == ("", FOLLOWED)
    assert traces.target("http/protobuf") == "http://collector:4318/v1/traces"
    assert forward.destinations["metrics"].target("grpc") == "http://collector:4318/"
    assert (logs.protocol, logs.target("http/json")) == ("http/json", "https://logs.example/ingest")
    assert (traces.headers, logs.headers) == ({"a": "1"}, {"a": "2", "b": "3"})
    assert forward_from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) is None
    only = forward_from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x"})
    assert only is not None
    assert only.signals == ["traces"]


def test_convert_between_protobuf_and_json_keeps_the_message() -> None:
    """Protobuf to OTLP/JSON (hex ids, integer enums) and back gives the same message."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = bytes(range(16)), b"\x01" * 8, "s"
    span.kind = span.SPAN_KIND_CLIENT  # 3
    body = request.SerializeToString()
    as_json = convert("traces", body, "grpc", "http/json")
    (decoded,) = _json_spans(as_json)
    assert decoded["traceId"] == bytes(range(16)).hex()
    assert decoded["kind"] == 3
    assert convert("traces", as_json, "http/json", "http/protobuf") == body
    assert convert("traces", body, "grpc", "http/protobuf") is body
    with pytest.raises(ValueError, match="cannot convert the traces request"):
        convert("traces", b"{not json", "http/json", "grpc")


@pytest.mark.slow
def test_an_unreachable_destination_is_counted_and_said_without_holding_the_run(
    tmp_path: Path,
) -> None:
    """Nothing listens at the destination: the run ends (short retries), the summary counts
    what was not sent and says why, once."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = _observe(tmp_path, "http", {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert result.returncode == 0, result.stderr
    forward = _summary(tmp_path)["forward"]
    assert forward["spans_sent"] == forward["metrics_requests_sent"] == 0
    assert forward["spans_not_sent"] == 2
    assert forward["metrics_requests_not_sent"] >= 1
    assert result.stderr.count("could not forward traces to") == 1
    assert "step-http" in (tmp_path / "run" / rundir.SEM_STREAM).read_text()  # still recorded


METRICS_ONLY = textwrap.dedent(
    """
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=60_000)
    meters = MeterProvider(metric_readers=[reader])
    meters.get_meter("m").create_counter("agent.steps").add(1)
    meters.shutdown()
    """
)


@pytest.mark.slow
def test_the_root_span_is_not_sent_in_a_guessed_protocol(tmp_path: Path, destination: Sink) -> None:
    """An agent that sends metrics only, no protocol variable: the traces protocol is unknown,
    so the run's root span is not sent (no guess), and the summary says why."""
    (tmp_path / "metrics_only.py").write_text(METRICS_ONLY)
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{destination.http_port}")
    env.pop("OTEL_EXPORTER_OTLP_PROTOCOL", None)
    result = subprocess.run(
        observe_argv(tmp_path, sys.executable, "metrics_only.py"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert [r.signal for r in destination.received] == ["metrics"]
    forward = _summary(tmp_path)["forward"]
    assert forward["root_span"].startswith("not sent: the agent sent no traces")
    assert forward["spans_sent"] == forward["spans_not_sent"] == 0
