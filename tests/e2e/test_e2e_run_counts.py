"""``run``'s last line says what each count counts.

It said ``exported 57`` beside ``downstream: delivered 0``: ``exported`` added up every record
of every kind (spans, the agent's log records, the OS plane's events, the evidence records the
pipeline derived) once per exporter that took it, so a user read it as "57 spans sent". Now it
says how many spans, log records and OS events the receivers accepted, and what each exporter
that delivers to a destination delivered (spans and log records) and failed or dropped.

A real ``otel-bridge run`` (OTLP/HTTP receiver, standing host receiver, a ``file`` exporter of
the OS plane, an ``otlphttp`` exporter to a recording OTLP server), a real OpenTelemetry SDK
agent sending three spans and two log records.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from otlp_recorder import RecordingHttpTraceServer
from waiting import start_run

from otel_bridge.testing import free_port

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

AGENT = textwrap.dedent(
    """
    import logging
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    logs = LoggerProvider()
    logs.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter()))
    log = logging.getLogger("agent")
    log.addHandler(LoggingHandler(logger_provider=logs))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent"):
        for i in range(2):
            with tracer.start_as_current_span(f"step-{i}"):
                log.warning("step %d", i)
    provider.shutdown()
    logs.shutdown()
    """
)

CONFIG = """
receivers:
  otlp:
    protocols:
      http: {endpoint: "127.0.0.1:${env:HTTP_PORT}"}
  host: {}
exporters:
  file: {path: "${env:OS_OUT}"}
  file/agent: {path: "${env:AGENT_OUT}"}
  otlphttp:
    endpoint: "http://127.0.0.1:${env:SINK_PORT}"
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlphttp]
    logs/agent:
      receivers: [otlp]
      exporters: [file/agent]
    logs/os:
      receivers: [host]
      exporters: [file]
"""


def _os_records(path: Path) -> int:
    """Log records the file exporter wrote (OTLP/JSON lines): the OS plane's events."""
    if not path.exists():
        return 0
    count = 0
    for line in path.read_text().splitlines():
        for resource in json.loads(line).get("resourceLogs", ()):
            for scope in resource.get("scopeLogs", ()):
                count += len(scope.get("logRecords", ()))
    return count


def test_last_line_counts_spans_log_records_os_events_and_deliveries(tmp_path: Path) -> None:
    sink = RecordingHttpTraceServer().start()
    port = free_port()
    config = tmp_path / "run.yaml"
    config.write_text(CONFIG)
    os_out = tmp_path / "os.jsonl"
    env = {
        "HTTP_PORT": str(port),
        "SINK_PORT": str(sink.port),
        "OS_OUT": str(os_out),
        "AGENT_OUT": str(tmp_path / "agent-logs.jsonl"),
    }
    proc, err = start_run(config, env, cwd=tmp_path)
    try:
        (tmp_path / "agent.py").write_text(AGENT)
        agent_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        agent_env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
            OTEL_EXPERIMENTAL_RESOURCE_DETECTORS="process",  # states process.pid: followed
        )
        done = subprocess.run(
            [sys.executable, "agent.py"], cwd=tmp_path, env=agent_env, timeout=60, check=False,
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert sink.wait_for(lambda r: len(list(r.spans())) == 3, 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
        sink.stop()
    log = err.log()
    assert code == 0, log
    last = [line for line in log.splitlines() if line.startswith("otel-bridge: up ")][-1]
    assert "exported" not in last, last
    counted = re.search(r"received (\d+) spans, (\d+) log records, (\d+) OS events", last)
    assert counted is not None, last
    assert counted.group(1, 2) == ("3", "2"), last
    assert int(counted.group(3)) == _os_records(os_out), last
    assert "| otlphttp: delivered 3 spans, 0 log records, failed 0, dropped 0" in last, last
