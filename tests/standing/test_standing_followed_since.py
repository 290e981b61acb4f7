"""The OS-plane span of a process a standing collector followed late says when it was followed.

Met as a new user with ``otel-bridge run -c configs/phoenix.yaml`` and a real Phoenix: the agent
ran ``ls`` and wrote a file, then its BatchSpanProcessor sent its spans as it exited, so the
collector followed it only then. Phoenix showed the agent's process span (``process.creation.time``
at the agent's start) with a few connection events and no child and no file, and nothing on it
said that everything before the follow was unobserved: absence of evidence read as evidence of
absence. The collector's ``lineage`` ``degraded`` record said so, but only as a log record,
which a traces-only backend never receives. The span now carries
``otel_bridge.process.observed_since_unix_nano``. A real ``otel-bridge run`` of the shipped
Phoenix config, the SDK agent as a plain subprocess, an OTLP stand-in for Phoenix.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from standing_support import REPO, Downstream, RunningCollector, run_agent

from otel_bridge.identity import iso_to_ms

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the linux backend)")


def test_the_agent_followed_from_its_first_span_says_since_when(tmp_path: Path) -> None:
    downstream = Downstream()
    try:
        env = {"PHOENIX_COLLECTOR_ENDPOINT": downstream.http_url}
        collector = RunningCollector(REPO / "configs" / "phoenix.yaml", tmp_path, env)
        agent, _, _ = run_agent(collector, tmp_path, "http/protobuf")
        spans = downstream.spans()
    finally:
        downstream.stop()
    (mine,) = [
        s
        for s in spans
        if s.resource.attributes.get("service.name") == "otel-bridge-host"
        and s.attributes.get("process.pid") == agent.pid
        and not s.attributes.get("otel_bridge.os_plane.more")
        and not s.attributes.get("otel_bridge.os_plane.late")
    ]
    since = mine.attributes.get("otel_bridge.process.observed_since_unix_nano")
    assert isinstance(since, int), mine.attributes
    created = iso_to_ms(str(mine.attributes["process.creation.time"]))
    assert created is not None
    assert since > created * 1_000_000  # followed after it started: its start-up is unknown
    assert since <= mine.start_time_unix_nano + 1_000_000_000, (since, mine.start_time_unix_nano)
