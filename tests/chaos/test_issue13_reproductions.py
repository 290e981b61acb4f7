"""Issue 13's reproductions that had no test of their own (``tests/REPRODUCTIONS.md`` maps all).

* a lone surrogate in a span name, sent to a real collector whose one pipeline has only a
  ``file`` exporter and whose other has ``batch`` in front of the ``graph`` exporter: before,
  the graph's flush thread died (graph.json never updated again), the file-only pipeline
  answered 503 (a poison request retried forever) and ``batch`` lost the good spans of other
  requests already acknowledged;
* an OTLP/protobuf ``AnyValue`` nested 1,000 deep (a RecursionError, answered 500, before);
* secrets in a run directory: ``curl -u user:pass``, ``mysql -pPW``, ``sshpass -p PW`` run by
  the workload, and passwords in span attributes (``db.statement``, ``process.command_line``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from chaos_harness import post_traces
from waiting import start_run, wait_until

from otel_bridge.testing import free_port

CONFIG = """
receivers:
  otlp:
    protocols:
      http: {endpoint: "127.0.0.1:${env:PORT}"}
processors:
  batch: {timeout: 200ms}
  normalize:
exporters:
  file: {path: "${env:WORK}/spans.jsonl", signals: [spans], flush_interval: 0}
  graph: {output: "${env:WORK}/graph.json", flush_interval: 100ms}
service:
  pipelines:
    traces/file: {receivers: [otlp], exporters: [file]}
    traces/graph: {receivers: [otlp], processors: [batch, normalize], exporters: [graph]}
"""


def _span(name_json: str, n: int) -> bytes:
    span = (
        f'{{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"{n + 1:016x}",'
        f'"name":{name_json},"startTimeUnixNano":"1700000000000000000",'
        '"endTimeUnixNano":"1700000000000001000"}'
    )
    return ('{"resourceSpans":[{"scopeSpans":[{"spans":[' + span + "]}]}]}").encode()


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _deep_protobuf(depth: int) -> bytes:
    """An ExportTraceServiceRequest whose one span has an AnyValue nested ``depth`` deep, written
    by hand (the protobuf runtime refuses to build one)."""
    value = _field(1, b"leaf")  # AnyValue.string_value
    for _ in range(depth):
        value = _field(5, _field(1, value))  # AnyValue.array_value -> ArrayValue.values
    span = (
        _field(1, bytes(range(1, 17)))  # trace_id
        + _field(2, bytes(range(1, 9)))  # span_id
        + _field(5, b"deep")  # name
        + _field(9, _field(1, b"deep") + _field(2, value))  # attributes: KeyValue
    )
    return _field(1, _field(2, _field(2, span)))  # resource_spans.scope_spans.spans


def _post(port: int, body: bytes, content_type: str = "application/json") -> tuple[int, str | None]:
    return post_traces(port, body, content_type, timeout=30)


def test_poison_requests_are_400_and_lose_nothing_around_them(tmp_path: Path) -> None:
    """A lone surrogate in a span name and a protobuf AnyValue nested 1,000 deep each get 400
    without Retry-After (not 200, 500 or 503); the good spans before and after them are in the
    file, and graph.json keeps being rewritten with both
    (the flush thread lives, ``batch`` lost nothing), before and after shutdown."""
    port = free_port()
    (tmp_path / "c.yaml").write_text(CONFIG)
    env = {**os.environ, "PORT": str(port), "WORK": str(tmp_path)}
    proc, err = start_run(tmp_path / "c.yaml", env)
    try:
        assert _post(port, _span('"good-before"', 0)) == (200, None)
        assert _post(port, _span('"bad \\ud800 name"', 1)) == (400, None)
        assert _post(port, _deep_protobuf(1000), "application/x-protobuf") == (400, None)
        assert _post(port, _span('"good-after"', 2)) == (200, None)
        graph = tmp_path / "graph.json"

        def both_in_graph() -> bool:
            text = graph.read_text() if graph.exists() else ""
            return "good-before" in text and "good-after" in text

        wait_until(both_in_graph, 30, "a periodic graph.json write with both good spans")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0, err.log()
    assert both_in_graph()
    lines = (tmp_path / "spans.jsonl").read_text()
    assert "good-before" in lines
    assert "good-after" in lines
    assert "bad" not in lines


WORKLOAD = textwrap.dedent(
    """
    import os, subprocess, sys
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    bin_dir = sys.argv[1]
    for argv in (
        ["curl", "-u", "alice:CurlS3cretPW", "https://api.example"],
        ["mysql", "-u", "root", "-pMysqlS3cretPW", "shop"],
        ["sshpass", "-p", "SshpassS3cretPW", "ssh", "deploy@host"],
    ):
        subprocess.run([os.path.join(bin_dir, argv[0]), *argv[1:]], check=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "secrets"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    with provider.get_tracer("t").start_as_current_span("db.query") as span:
        span.set_attribute("db.statement", "CREATE USER app WITH PASSWORD 'DbS3cretPW'")
        span.set_attribute("process.command_line", "mysql -u root -pCmdS3cretPW shop")
    provider.shutdown()
    """
)
SECRETS = ("CurlS3cretPW", "MysqlS3cretPW", "SshpassS3cretPW", "DbS3cretPW", "CmdS3cretPW")


@pytest.mark.slow
def test_no_secret_of_the_workload_reaches_the_run_directory(tmp_path: Path) -> None:
    """``observe`` of a workload that runs curl, mysql and sshpass with passwords in their
    arguments and sends a span with passwords in ``db.statement`` and
    ``process.command_line``: none of the five passwords is in any file of the run directory,
    while the commands and the span are recorded there."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the SDK")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("curl", "mysql", "sshpass"):
        (bin_dir / tool).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "workload.py").write_text(WORKLOAD)
    run = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_bridge",
            "observe",
            "-o",
            str(run),
            "--no-progress",
            "--",
            sys.executable,
            str(tmp_path / "workload.py"),
            str(bin_dir),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    everything = b"".join(p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file())
    for secret in SECRETS:
        assert secret.encode() not in everything, secret
    assert b"db.query" in everything  # the span arrived
    assert b"sshpass" in everything  # and the commands were seen
