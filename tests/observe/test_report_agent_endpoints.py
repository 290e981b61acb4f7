"""report.md names the endpoints the agent's own process reached, never observe's own port.

Met as a new user: an SDK agent that connected to a service of its own (here a loopback server)
inside its tool call got ``endpoints reached: none observed`` on its call's row (right: no child
process ran), and where the agent's process had a line of its own, observe's own OTLP port was
listed as an endpoint it reached (or, on the "Agent process" line, nothing it reached at all).
Every process line now says what it reached, less the run's own collector (``summary.json``
``collector_endpoints``). A real ``observe`` of a real SDK agent.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from observe_support import observe_in

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

AGENT = """
import socket, sys, time
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "reaching-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "fetch"}
with provider.get_tracer("t").start_as_current_span("execute_tool fetch", attributes=attrs):
    with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as conn:
        conn.sendall(b"hi")
        time.sleep(0.3)
provider.shutdown()
"""


def test_the_agents_own_connection_is_reported_and_observes_port_is_not(
    tmp_path: Path,
) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        result = observe_in(tmp_path, sys.executable, "agent.py", str(port))
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "run" / "report.md").read_text()
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    # the agent's process: its line (no span named its pid, so it is said as a process no
    # tool call is linked to) says what it reached
    (agent_line,) = [line for line in report.splitlines() if "pid " in line and "agent.py" in line]
    assert f"reached 127.0.0.1:{port}" in agent_line, report
    own = {e["port"] for e in summary["collector_endpoints"]}
    assert own, summary["collector_endpoints"]
    for p in own:
        assert f":{p}" not in report, (p, report)
