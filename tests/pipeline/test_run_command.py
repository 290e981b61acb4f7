"""``otel-bridge run`` and ``otel-bridge validate`` as a user runs them: real processes.

The drain test is the contract of ``run``: a real OTel SDK exporter sends spans over OTLP/gRPC,
every span the collector acknowledged is in the output file after SIGTERM, and the exit code is 0.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import pytest
from cli_support import run_cli
from waiting import start_run

from otel_bridge.cli import main
from otel_bridge.commands.run import embedded_config_text, load_run_config
from otel_bridge.config import load_yaml, parse_config
from otel_bridge.exporters.file import read_batch

DRAIN_CONFIG = """
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:0
      http:
        endpoint: 127.0.0.1:0
processors:
  memory_limiter:
    check_interval: 100ms
  batch:
    send_batch_size: 100000
    timeout: 1h
exporters:
  file:
    path: ${env:OUT}
    flush_interval: 1h
  file/logs:
    path: ${env:OUT}.logs
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [memory_limiter, batch]
      exporters: [file]
    logs:
      receivers: [otlp]
      exporters: [file/logs]
"""


@pytest.mark.slow
def test_run_drains_every_acknowledged_span_on_sigterm(tmp_path: Path) -> None:
    """Spans acknowledged over OTLP/gRPC are all written after SIGTERM; the exit code is 0."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult

    config = tmp_path / "drain.yaml"
    config.write_text(DRAIN_CONFIG)
    out = tmp_path / "out" / "spans.jsonl"
    proc, err = start_run(
        config,
        {"OUT": str(out)},
        "--progress",
        "--progress-interval",
        "0.2",
        ready=False,
        timeout=20,
    )
    try:
        port = int(err.wait_for(r"OTLP/grpc on 127\.0\.0\.1:(\d+)").group(1))
        err.wait_for(r"running \(pid")

        results: list[SpanExportResult] = []

        class Counting(OTLPSpanExporter):
            def export(self, spans):  # type: ignore[no-untyped-def]
                result = super().export(spans)
                results.append(result)
                return result

        provider = TracerProvider(resource=Resource.create({"service.name": "drain-test"}))
        provider.add_span_processor(
            SimpleSpanProcessor(Counting(endpoint=f"127.0.0.1:{port}", insecure=True))
        )
        tracer = provider.get_tracer("drain")
        for i in range(60):
            with tracer.start_as_current_span(f"op-{i}"):
                pass
        provider.shutdown()
        assert len(results) == 60
        assert all(r is SpanExportResult.SUCCESS for r in results)
        err.wait_for(r"received 60 spans")
        assert not out.exists() or out.read_text() == ""
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        tail = err.rest()
    assert "drained" in tail
    written = read_batch(out)
    assert sorted(s.name for s in written.spans) == sorted(f"op-{i}" for i in range(60))
    assert {s.resource.attributes["service.name"] for s in written.spans} == {"drain-test"}
    assert oct(out.stat().st_mode & 0o777) == "0o600"


def test_run_startup_failure_exits_nonzero(tmp_path: Path) -> None:
    """A component that cannot start makes run exit 2 with a one-line reason."""
    config = tmp_path / "bad.yaml"
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    config.write_text(
        DRAIN_CONFIG.replace("${env:OUT}.logs", str(blocker / "x.jsonl")).replace(
            "${env:OUT}", str(tmp_path / "ok.jsonl")
        )
    )
    proc, err = start_run(config, {}, ready=False)
    assert proc.wait(timeout=30) == 2
    assert "exporter file/logs: cannot open" in err.log()


def test_run_with_a_receiver_port_in_use_creates_no_file(tmp_path: Path) -> None:
    """``run`` with the bundled configuration and its OTLP/HTTP port taken: exit 2 naming the
    port, and none of the files its exporters keep (graph, journal, records) is created: the
    receivers' ports are checked before any exporter starts."""
    work = tmp_path / "work"
    work.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env["OTEL_BRIDGE_OTLP_HTTP_ENDPOINT"] = f"127.0.0.1:{port}"
        env["OTEL_BRIDGE_OTLP_GRPC_ENDPOINT"] = "127.0.0.1:0"
        done = run_cli("run", cwd=work, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"receiver otlp: cannot listen for HTTP on 127.0.0.1:{port}: port {port} is already" in (
        done.stderr
    )
    assert list(work.iterdir()) == []


def test_validate_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """validate prints a short summary of a good file and exits 0 without starting anything."""
    monkeypatch.setenv("OUT", str(tmp_path / "never" / "out.jsonl"))
    config = tmp_path / "good.yaml"
    config.write_text(DRAIN_CONFIG.replace("127.0.0.1:0", "127.0.0.1:1"))
    assert main(["validate", str(config)]) == 0
    out = capsys.readouterr()
    assert f"{config}: OK (2 pipelines, 5 components)" in out.out
    assert "traces: receivers: otlp; processors: memory_limiter, batch; exporters: file" in out.out
    assert not (tmp_path / "never").exists()


def test_validate_lists_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """validate exits 2 and prints each problem with its key path."""
    monkeypatch.delenv("OUT", raising=False)
    config = tmp_path / "bad.yaml"
    config.write_text(
        DRAIN_CONFIG.replace("check_interval: 100ms", "check_intervl: 100ms").replace(
            "127.0.0.1:0\n      http", "nowhere\n      http"
        )
    )
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert "invalid configuration" in err
    assert (
        "processors.memory_limiter.check_intervl: unknown key (did you mean 'check_interval'?)"
        in err
    )
    assert "receivers.otlp.protocols.grpc.endpoint:" in err
    assert "exporters.file.path: environment variable OUT is not set" in err


def test_validate_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file is a one-line problem and exit 2."""
    assert main(["validate", "/nonexistent/x.yaml"]) == 2
    assert "/nonexistent/x.yaml: cannot read" in capsys.readouterr().err


def test_embedded_local_config_validates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded local.yaml loads with the shipped components and writes nothing remote."""
    monkeypatch.chdir(tmp_path)
    config = load_run_config(None)
    assert set(config.pipelines) == {"evidence"}
    evidence = config.pipelines["evidence"]
    # A standing host receiver: it follows the processes that send spans (docs/host.md).
    assert evidence.receivers == ("otlp", "host")
    assert evidence.processors == ("normalize", "correlate", "grade")
    assert set(evidence.exporters) == {"graph", "file"}
    otlp = config.receivers["otlp"].config
    assert otlp.protocols.grpc.endpoint == "127.0.0.1:4317"
    assert otlp.protocols.http.endpoint == "127.0.0.1:4318"
    assert config.exporters["graph"].config.output == "./otel-bridge-graph.json"
    assert config.warnings == ()


def test_embedded_config_env_overrides() -> None:
    """${env:...} defaults in local.yaml can be overridden from the environment."""
    doc = load_yaml(embedded_config_text(), "local.yaml")
    config = parse_config(doc, env={"OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": "127.0.0.1:14317"})
    assert config.receivers["otlp"].config.protocols.grpc.endpoint == "127.0.0.1:14317"
