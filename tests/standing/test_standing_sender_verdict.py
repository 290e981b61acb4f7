"""A standing collector says within seconds that a pidless sender could not be linked.

``otel-bridge run -c configs/local.yaml`` runs as a plain user (``nobody``); an agent using the
OpenTelemetry SDK's default resource (no ``process.pid``) runs as another user (root), keeps
its exporter connection open and stays running. The collector may not read the agent's
descriptors, so no process is seen holding that connection. It used to say
``correlate.sender: no_connection`` (its stderr warning and its last lines' note) only at
shutdown or after ``retention`` (600 s); it now says it once ``sender_grace`` (5 s) has passed
since the spans arrived and the host receiver settled the follow it was asked for, while both
still run, and says it once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from standing_support import (
    IS_ROOT,
    REPO,
    RunningCollector,
    end_process,
    subprocess_env,
    unprivileged_prefix,
)
from test_standing_strace_attach import _pidless_report

from otel_bridge.processors.correlate import DEFAULT_SENDER_GRACE_S

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")

SENTENCE = r"WARNING otel_bridge\.correlate: agent scout \(service standing-agent\) could not be"
BOUND_S = DEFAULT_SENDER_GRACE_S + 1.0 + 1.0
"""The grace, the second the host receiver must have been settled for, one tick of the clock."""
SLACK_S = 5.0
"""This shared machine's scheduling (a loaded two-core box)."""


@pytest.mark.slow  # ~10 s: a collector, an agent, the grace
def test_an_unlinkable_sender_is_said_while_the_collector_runs(tmp_path: Path) -> None:
    if not IS_ROOT:
        pytest.skip("an agent of another user needs root to start")
    prefix = unprivileged_prefix()
    os.chmod(tmp_path, 0o777)  # the plain user writes its graph here
    collector = RunningCollector(
        REPO / "configs" / "local.yaml",
        tmp_path,
        {
            "OTEL_BRIDGE_GRAPH": str(tmp_path / "graph.json"),
            "OTEL_BRIDGE_RECORDS": str(tmp_path / "records.jsonl"),
        },
        prefix,
    )
    agent = subprocess.Popen(
        [sys.executable, "-c", _pidless_report(collector.http_port)],
        env=subprocess_env(OTEL_SERVICE_NAME="standing-agent"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert agent.stdout is not None
        assert agent.stdin is not None
        assert agent.stdout.readline().strip() == "reported"
        reported = time.monotonic()
        line = collector.stderr.wait_for(SENTENCE + ".*", timeout=BOUND_S + SLACK_S)[0]
        took = time.monotonic() - reported
        print(f"no_connection said {took:.2f} s after the agent reported")
        # said while both still run: the collector was not stopped, the agent still holds its
        # connection (it waits on its stdin)
        assert collector.proc.poll() is None
        assert agent.poll() is None
        assert "no followed process was seen holding the connection" in line, line
        assert took <= BOUND_S + SLACK_S, took
        agent.stdin.close()
        assert agent.wait(timeout=60) == 0
    finally:
        end_process(agent)
        code = collector.stop()
    assert code == 0, collector.output
    out = collector.output
    assert out.count("could not be linked to its process") == 2, out  # stderr, then last lines
    last = out[out.rindex("otel-bridge: up ") :]
    assert "agent scout (service standing-agent) could not be linked" in last, last
    assert "correction:" not in out, out
    graph: dict[str, Any] = json.loads((tmp_path / "graph.json").read_text())
    [agent_node] = [n for n in graph["nodes"] if n["id"] == "agent:standing-agent:scout"]
    assert agent_node["attrs"]["correlate.sender"] == "no_connection", agent_node
