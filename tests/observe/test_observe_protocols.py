"""Issue 11, reproduction 4: under ``observe`` an agent is recorded whichever OTLP exporter it
uses, with nothing but ``OTEL_EXPORTER_OTLP_ENDPOINT``; a run without spans says so; the user's
own OTLP destination still receives the agent's telemetry (unless ``--no-forward``)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from observe_support import observe_in

from otel_bridge import rundir
from otel_bridge.component import CreateSettings, Host
from otel_bridge.launch import GATE_NAME
from otel_bridge.receivers.otlp import OtlpReceiver, factory
from otel_bridge.receivers.otlp.config import GrpcConfig, HttpConfig, OtlpReceiverConfig, Protocols
from otel_bridge.testing import RecordingConsumer

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the gRPC exporter")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

AGENT = textwrap.dedent(
    """
    import json, os, sys, urllib.request
    kind = sys.argv[1]
    if kind == "json":  # no JSON exporter in the Python SDK: post OTLP/JSON by hand
        span = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
                "name": "step-json", "kind": 1, "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
        body = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
        req = urllib.request.Request(
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] + "/v1/traces",
            data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        assert urllib.request.urlopen(req).status == 200
        sys.exit(0)
    if kind == "grpc":  # the most common snippet: the gRPC exporter, endpoint from the variable
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    with provider.get_tracer("t").start_as_current_span("step-" + kind):
        pass
    provider.shutdown()
    """
)


def _summary(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "run" / rundir.SUMMARY).read_text())
    return data


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["grpc", "http", "json"])
def test_any_exporter_is_recorded_with_only_the_endpoint_variable(
    tmp_path: Path, kind: str
) -> None:
    """The SDK's gRPC exporter (which ignores OTEL_EXPORTER_OTLP_PROTOCOL), its HTTP/protobuf
    exporter and an HTTP/JSON client all reach observe's one endpoint and are recorded."""
    (tmp_path / "agent.py").write_text(AGENT)
    result = observe_in(tmp_path, sys.executable, "agent.py", kind)
    assert result.returncode == 0, result.stderr
    sem = (tmp_path / "run" / rundir.SEM_STREAM).read_text()
    assert f"step-{kind}" in sem
    otlp = _summary(tmp_path)["otlp"]
    assert otlp["spans_received"] == 1
    assert otlp["warnings"] == []
    assert otlp["connections"]["grpc" if kind == "grpc" else "http"] >= 1
    assert "warning:" not in result.stderr


@pytest.mark.slow
def test_a_run_without_spans_says_so_with_the_likely_cause(tmp_path: Path) -> None:
    """A command that never exports gets a plain warning in the summary, printed and stored."""
    result = observe_in(tmp_path, "true")
    assert result.returncode == 0, result.stderr
    assert "warning: the command sent no spans: it never connected" in result.stderr
    warnings = _summary(tmp_path)["otlp"]["warnings"]
    assert len(warnings) == 1
    assert "never connected" in warnings[0]
    assert "the command sent no spans" in (tmp_path / "run" / "report.md").read_text()


def test_a_command_that_failed_before_exporting_is_said_to_have_failed(tmp_path: Path) -> None:
    """An agent that dies before its exporter connects (here: an import error, as the examples
    give without their extra) was told it "is not instrumented": the warning now names its
    exit code and the likely cause first."""
    result = observe_in(tmp_path, sys.executable, "-c", "import no_such_exporter_module")
    assert result.returncode == 1, result.stderr
    assert "ModuleNotFoundError" in result.stderr  # the command's own error, above the summary
    (warning,) = _summary(tmp_path)["otlp"]["warnings"]
    assert warning.startswith("the command sent no spans and exited 1: "), warning
    assert "failed before exporting" in warning, warning
    assert warning in " ".join(result.stderr.split())


MALFORMED_AGENT = textwrap.dedent(
    """
    import json, os, urllib.error, urllib.request
    span = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
            "name": "step", "kind": 1, "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    body = {"resourceSpans": [{"scopeSpans": [{"spans": span}]}]}  # an object, not an array
    req = urllib.request.Request(
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] + "/v1/traces",
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req)
    except urllib.error.HTTPError as exc:
        assert exc.code == 400, exc.code
    """
)


@pytest.mark.slow
def test_a_request_that_could_not_be_decoded_is_said_with_why(tmp_path: Path) -> None:
    """A request the receiver could not decode (here a span list that is an object: its spans
    cannot even be counted) is refused whole: the summary says why, with the decoder's path,
    rather than guessing that the exporter used another protocol, and does not ask whether the
    spans were ended."""
    (tmp_path / "agent.py").write_text(MALFORMED_AGENT)
    result = observe_in(tmp_path, sys.executable, "agent.py")
    assert result.returncode == 0, result.stderr
    otlp = _summary(tmp_path)["otlp"]
    why = "resourceSpans[0].scopeSpans[0].spans: expected an array, got an object"
    assert (otlp["requests_malformed"], otlp["requests_malformed_why"]) == (1, [why])
    assert otlp["warnings"] == [
        "the command sent no spans that could be recorded: its requests to the OTLP endpoint "
        "could not be decoded (below)",
        f"1 OTLP requests could not be decoded and were refused with everything in them ({why})",
    ]


PARTLY_BAD_AGENT = textwrap.dedent(
    """
    import json, os, urllib.request
    good = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
            "name": "step", "kind": 1, "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    bad = dict(good, traceId="bad", spanId="b7ad6b7169203332")
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [good, bad]}]}]}
    req = urllib.request.Request(
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] + "/v1/traces",
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    answer = json.loads(urllib.request.urlopen(req).read())
    assert answer["partialSuccess"]["rejectedSpans"] == "1", answer
    """
)


@pytest.mark.slow
def test_a_span_rejected_alone_is_said_with_why(tmp_path: Path) -> None:
    """A request holding one good span and one with a bad trace id: the good one is recorded,
    the other rejected alone (partial success), and the summary says which field was wrong."""
    (tmp_path / "agent.py").write_text(PARTLY_BAD_AGENT)
    result = observe_in(tmp_path, sys.executable, "agent.py")
    assert result.returncode == 0, result.stderr
    otlp = _summary(tmp_path)["otlp"]
    why = (
        "rejected 1 invalid spans: resourceSpans[0].scopeSpans[0].spans[1].traceId: expected "
        "32 hex characters, got 3"
    )
    assert (otlp["spans_received"], otlp["spans_rejected"]) == (1, 1)
    assert otlp["spans_rejected_why"] == [why]
    assert otlp["warnings"] == [
        f"1 spans were rejected for good and not recorded (the receiver answered: {why})"
    ]


METRICS_AGENT = textwrap.dedent(
    """
    import sys
    if sys.argv[1] == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(), export_interval_millis=60_000)
    meters = MeterProvider(metric_readers=[reader])
    meters.get_meter("m").create_counter("tool_calls").add(1)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    with provider.get_tracer("t").start_as_current_span("step"):
        pass
    provider.shutdown()
    meters.shutdown()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["grpc", "http"])
def test_an_agents_metrics_are_refused_and_said_while_its_spans_are_recorded(
    tmp_path: Path, kind: str
) -> None:
    """The SDK's metrics exporter (gRPC or HTTP) next to its span exporter: metrics are not
    recorded, and the refusal is counted and said in the summary instead of only in the
    agent's own log."""
    (tmp_path / "agent.py").write_text(METRICS_AGENT)
    result = observe_in(tmp_path, sys.executable, "agent.py", kind)
    assert result.returncode == 0, result.stderr
    otlp = _summary(tmp_path)["otlp"]
    assert otlp["spans_received"] == 1
    assert otlp["metrics_requests_refused"] >= 1
    (warning,) = otlp["warnings"]
    assert "metrics export requests" in warning
    assert "OTEL_METRICS_EXPORTER=none" in warning
    assert "metrics export requests" in (tmp_path / "run" / "report.md").read_text()


@pytest.mark.slow
def test_a_command_that_could_not_be_run_is_said_to_have_never_run(tmp_path: Path) -> None:
    """A missing command exits 127 through observe's gate: the warning says it most likely
    never ran, not that it is uninstrumented."""
    result = observe_in(tmp_path, str(tmp_path / "no-such-command"))
    assert result.returncode == 127, result.stderr
    warnings = _summary(tmp_path)["otlp"]["warnings"]
    assert len(warnings) == 1, warnings
    assert "exited 127, the shell's code for a command not found" in warnings[0]
    assert "never connected" not in result.stderr
    assert "most likely never ran" in (tmp_path / "run" / "report.md").read_text()
    # said in observe's name, not by its internal gate (a new user saw "otel-bridge-gate: 1:
    # exec: ...: not found")
    assert f"otel-bridge: {tmp_path / 'no-such-command'}: command not found" in result.stderr
    assert GATE_NAME not in result.stderr


@pytest.mark.slow
def test_a_program_not_on_the_path_is_said_in_observes_name(tmp_path: Path) -> None:
    result = observe_in(tmp_path, "no-such-command-on-the-path")
    assert result.returncode == 127, result.stderr
    assert "otel-bridge: no-such-command-on-the-path: command not found" in result.stderr
    assert GATE_NAME not in result.stderr


@pytest.fixture
def destination() -> Iterator[tuple[OtlpReceiver, RecordingConsumer]]:
    """The user's own OTLP destination: a second, real receiver (gRPC and HTTP)."""
    config = OtlpReceiverConfig(
        protocols=Protocols(
            grpc=GrpcConfig(endpoint="127.0.0.1:0"), http=HttpConfig(endpoint="127.0.0.1:0")
        )
    )
    sink = RecordingConsumer()
    receiver = factory.create(CreateSettings(id="otlp"), config, sink)
    assert isinstance(receiver, OtlpReceiver)
    receiver.start(Host())
    yield receiver, sink
    receiver.shutdown()


def _names(sink: RecordingConsumer) -> set[str]:
    return {s.name for b in sink.batches for s in b.spans}


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_users_destination_still_receives_the_agents_spans(
    tmp_path: Path, destination: tuple[OtlpReceiver, RecordingConsumer], protocol: str
) -> None:
    """With OTEL_EXPORTER_OTLP_ENDPOINT/PROTOCOL already set, the agent's span (and the run's
    root span) reach that destination during observe, and the summary says so."""
    receiver, sink = destination
    port = receiver.grpc_port if protocol == "grpc" else receiver.http_port
    env = dict(
        os.environ,
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
    )
    (tmp_path / "agent.py").write_text(AGENT)
    result = observe_in(tmp_path, sys.executable, "agent.py", "http", env=env)
    assert result.returncode == 0, result.stderr
    assert {"step-http", "otel-bridge observe"} <= _names(sink)
    assert "step-http" in (tmp_path / "run" / rundir.SEM_STREAM).read_text()  # recorded too
    forward = _summary(tmp_path)["forward"]
    assert forward["destination"] == f"http://127.0.0.1:{port}"
    assert forward["signals"]["traces"]["protocols"] == [protocol]
    assert forward["signals"]["traces"]["protocol_source"] == "OTEL_EXPORTER_OTLP_PROTOCOL"
    assert forward["spans_sent"] == 2
    assert forward["spans_not_sent"] == 0
    assert f"Forwarded to http://127.0.0.1:{port}" in result.stderr


@pytest.mark.slow
def test_no_forward_opts_out(
    tmp_path: Path, destination: tuple[OtlpReceiver, RecordingConsumer]
) -> None:
    """``--no-forward``: the destination receives nothing; the run still records the span."""
    receiver, sink = destination
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.http_port}")
    (tmp_path / "agent.py").write_text(AGENT)
    result = observe_in(
        tmp_path, sys.executable, "agent.py", "http", extra=("--no-forward",), env=env
    )
    assert result.returncode == 0, result.stderr
    assert _names(sink) == set()
    assert "step-http" in (tmp_path / "run" / rundir.SEM_STREAM).read_text()
    assert _summary(tmp_path)["forward"] is None
