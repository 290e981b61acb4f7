"""``otel-bridge run`` says what its OS plane observes, and at the end what it could not.

A standing collector from ``configs/local.yaml`` printed one line for its host receiver, the
process plane's backend, and nothing about files, connections or the lineage it follows: a new
user could not tell from its output that connections closed between two scans may be missed,
or that what a followed agent did before its first span is unknown (both were only counts in
graph.json's summary). Its banner now has one line per plane, and its last lines name each
collection that was not fully available, with what that means.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from standing_support import REPO, RunningCollector, run_agent

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")


def test_banner_names_each_plane_and_the_end_says_what_was_not_observed(tmp_path: Path) -> None:
    env = {
        "OTEL_BRIDGE_GRAPH": str(tmp_path / "graph.json"),
        "OTEL_BRIDGE_RECORDS": str(tmp_path / "records.jsonl"),
    }
    collector = RunningCollector(REPO / "configs" / "local.yaml", tmp_path, env)
    run_agent(collector, tmp_path, "http/protobuf")
    lines = collector.output.splitlines()
    running = next(i for i, line in enumerate(lines) if "running (pid" in line)
    stopped = next(i for i, line in enumerate(lines) if "otel-bridge: stopped" in line)
    banner, tail = lines[:running], lines[running:stopped]
    for plane in ("process", "file", "network"):
        assert any(f"otel-bridge: receiver host: {plane}: " in line for line in banner), banner
    (lineage,) = [line for line in tail if "otel-bridge: receiver host: lineage: " in line]
    assert "degraded: 1 process(es) followed" in lineage, tail
    assert lineage.endswith("what it did not see is unknown, not absent"), tail
    for line in tail:
        if "otel-bridge: receiver host: " in line:
            assert ": available: " not in line, tail  # only what was not fully observed
