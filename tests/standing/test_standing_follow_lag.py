"""A standing collector that lagged while an agent started still gives it only what it did after.

The CI flake of ``test_backend_config_records_the_os_plane_of_a_separately_started_agent``:
on a busy machine the collector read the agent's start-up file events (hundreds: imports,
``/etc/passwd``, ``ld.so.cache``) only around the moment it followed the agent from its first
span, held them for the then unknown pid and attributed them to it. They filled the enrich
processor's 128 events of the agent's process span, and the connection the agent made next was
dropped. Here the lag is made exact: the collector is stopped (SIGSTOP) before the agent
starts and continued once the agent's first export has timed out, so its whole start-up is
still queued when the collector learns its pid from that export.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from standing_support import REPO, Agent, Downstream, RunningCollector

from otel_bridge.testing import LoopbackServer

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the linux backend)")


@pytest.mark.slow  # ~20 s: the agent's export timeout, then enrich's hold
def test_an_agent_started_while_the_collector_lagged_keeps_its_connection(tmp_path: Path) -> None:
    """The agent's OS-plane span holds the file and the connection it made once followed, and
    none of its start-up: the events read before the follow are counted, not attributed."""
    downstream = Downstream()
    try:
        env = {"PHOENIX_COLLECTOR_ENDPOINT": downstream.http_url}
        collector = RunningCollector(REPO / "configs" / "phoenix.yaml", tmp_path, env)
        out = tmp_path / "agent-output.txt"
        server = LoopbackServer()
        os.kill(collector.proc.pid, signal.SIGSTOP)  # its readers read nothing from now
        try:
            url = f"http://127.0.0.1:{collector.http_port}"
            # returns once its first export gave up waiting (the SDK's 10 s timeout): its
            # request stays queued on the collector's socket, its start-up on fanotify's
            agent = Agent(out, server.port, url, "http/protobuf")
        finally:
            os.kill(collector.proc.pid, signal.SIGCONT)
        try:
            collector.stderr.wait_for(rf"following pid {agent.pid} from now")
            agent.go()
        finally:
            agent.kill()
            server.close()
            assert collector.stop() == 0, collector.output
        spans = downstream.spans()
    finally:
        downstream.stop()
    mine = [
        s
        for s in spans
        if s.resource.attributes.get("service.name") == "otel-bridge-host"
        and s.attributes.get("process.pid") == agent.pid
    ]
    events = [e for s in mine for e in s.events]
    targets = {str(e.attributes.get("otel_bridge.target")) for e in events}
    assert sum(s.dropped_events_count for s in mine) == 0, len(events)
    assert not any("ld.so.cache" in t or t.endswith("/etc/passwd") for t in targets), targets
    assert any(str(out) in t for t in targets), targets
    assert any(t.endswith(f":{server.port}") for t in targets), targets
