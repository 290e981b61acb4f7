"""A real collector whose graph would grow past the memory limiter's hard limit keeps accepting:
the graph stops at its bounds, the rest is spilled and said in graph.json, the peak RSS stays
under the hard limit (issue 13, "Load": the graph's own size handled by its bounds)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from chaos_harness import post_traces
from waiting import Stderr, start_run

from otel_bridge.exporters.graph.journal import read_frames
from otel_bridge.otlp.proto_codec import encode_traces
from otel_bridge.testing import free_port, make_span

CONFIG = """
receivers:
  otlp:
    protocols:
      http: {endpoint: "127.0.0.1:${env:PORT}"}
processors:
  memory_limiter:
    limit_mib: ${env:LIMIT}
    spike_limit_mib: 8
    check_interval: 200ms
    retained_after: 2s
  normalize:
    # the other state the pipeline keeps, bounded too (docs/exporters.md, "bounds")
    span_cache_size: 5000
    pending_cache_size: 5000
exporters:
  graph:
    output: "${env:WORK}/graph.json"
    flush_interval: 0
    bounds:
      max_nodes: 2000
      spill: "${env:WORK}/graph.spill"
service:
  pipelines:
    traces: {receivers: [otlp], processors: [memory_limiter, normalize], exporters: [graph]}
"""
MIB = 1024 * 1024
BODIES = 60
"""Distinct 1,000-span bodies sent: far more graph than the 40 MiB above resting RSS holds."""


def _start(work: Path, limit: int) -> tuple[subprocess.Popen[str], int, Stderr]:
    port = free_port()
    env = {**os.environ, "PORT": str(port), "LIMIT": str(limit), "WORK": str(work)}
    (work / "collector.yaml").write_text(CONFIG)
    proc, err = start_run(work / "collector.yaml", env)
    return proc, port, err


def _body(b: int) -> bytes:
    spans = [make_span(b * 1000 + i, attributes={"pad": "x" * 200}) for i in range(1000)]
    return bytes(encode_traces(spans).SerializeToString())


def _send_until_accepted(port: int, body: bytes, refused: list[int]) -> None:
    """POST ``body`` until it is accepted, honouring 429 + Retry-After as an OTel SDK does."""
    deadline = time.monotonic() + 120
    while True:
        status, retry = post_traces(port, body)
        if status == 200:
            return
        assert status == 429, status
        refused.append(1)
        assert time.monotonic() < deadline, "refused for two minutes: the limiter never recovered"
        threading.Event().wait(float(retry or 0))  # the client's back-off, as asked


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


@pytest.mark.slow
def test_a_graph_past_the_hard_limit_is_bounded_and_the_collector_keeps_accepting(
    tmp_path: Path,
) -> None:
    """60,000 distinct spans with 200-byte attributes through a collector whose hard limit is
    its resting RSS + 40 MiB: every request is accepted (after 429s, if any, with Retry-After),
    the peak RSS stays under the hard limit, the graph holds at most 2,000 nodes and graph.json
    says how many observations were spilled, which the spill file holds, none lost."""
    probe, port, _ = _start(tmp_path, 100_000)
    try:
        assert post_traces(port, _body(10_000))[0] == 200
        resting = psutil.Process(probe.pid).memory_info().rss // MIB
    finally:
        probe.terminate()
        probe.wait(60)
    limit = resting + 40
    proc, port, err = _start(tmp_path, limit)
    refused: list[int] = []
    try:
        for b in range(BODIES):
            _send_until_accepted(port, _body(b), refused)
        peak = _peak_rss(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0, err.log()
    assert peak < limit * MIB, f"peak {peak / MIB:.1f} MiB over the hard limit {limit} MiB"
    summary = json.loads((tmp_path / "graph.json").read_text())["summary"]
    bounded = summary["bounded"]
    spilled = sum(len(f[0]) for f in read_frames(str(tmp_path / "graph.spill")))
    assert summary["nodes"] <= 2000
    assert bounded["dropped"] == 0
    assert bounded["spilled"] == spilled > 0
    assert summary["observations"] + spilled == BODIES * 1000  # every acknowledged span
    assert "reached its bounds" in err.log()
