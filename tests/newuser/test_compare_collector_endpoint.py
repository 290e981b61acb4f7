"""``compare`` leaves the collector's own endpoint out of the agent's endpoints, and says so.

Met as a new user: two ``observe`` runs of one agent compared with ``endpoints 2`` each, and
the joined graph held two different endpoints: the agent's connection to the OTLP endpoint
``observe`` gave it (``OTEL_EXPORTER_OTLP_ENDPOINT``, a new port each run) counted as an endpoint
the agent reached, as if it had chosen it. The run directory records that endpoint
(``summary.json``: ``collector_endpoints``, ``otlp.endpoint``); ``compare`` now leaves it out of
every endpoint count and list, names it in the run's metrics, in ``compare.md`` and on its
output, and keeps every endpoint the agent did choose. Real ``observe`` runs of a real
OpenTelemetry SDK agent that also connects to a server of its own choosing, the real command
line.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import observed_run, run_cli

from otel_bridge.compare.report import LEFT_OUT

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

AGENT = """
import socket, sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "fetch-agent"}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")
with tracer.start_as_current_span("invoke_agent fetch") as agent:
    agent.set_attribute("gen_ai.operation.name", "invoke_agent")
    with tracer.start_as_current_span("execute_tool fetch") as call:
        call.set_attribute("gen_ai.operation.name", "execute_tool")
        call.set_attribute("gen_ai.tool.name", "fetch")
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10).close()
provider.shutdown()
"""


def _endpoint_ports(run: Path) -> set[int]:
    graph: dict[str, Any] = json.loads((run / "graph.json").read_text())
    return {n["facts"]["port"] for n in graph["nodes"] if n["kind"] == "endpoint"}


def _observe_port(run: Path) -> int:
    url = json.loads((run / "summary.json").read_text())["otlp"]["endpoint"]
    return int(url.rsplit(":", 1)[1])


def test_compare_leaves_observes_endpoint_out_and_says_so(tmp_path: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    chosen = server.getsockname()[1]
    runs = []
    try:
        for name in ("a", "b"):
            cwd = tmp_path / name
            cwd.mkdir()
            (cwd / "agent.py").write_text(AGENT)
            runs.append(observed_run(cwd, sys.executable, "agent.py", str(chosen)))
    finally:
        server.close()
    own = [_observe_port(run) for run in runs]
    assert own[0] != own[1]  # observe listens on a new port each run
    for run, port in zip(runs, own, strict=True):
        seen = _endpoint_ports(run)
        if port not in seen or chosen not in seen:
            pytest.skip(f"the network plane did not see the agent's connections here: {seen}")
    out = tmp_path / "cmp"
    done = run_cli("compare", *map(str, runs), "-o", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "compare.json").read_text())
    for entry, port in zip(doc["runs"], own, strict=True):
        metrics = entry["metrics"]
        assert metrics["collector_endpoints_left_out"] == [f"127.0.0.1:{port}"], metrics
        assert metrics["endpoints"] == 1, metrics  # the server the agent chose, and only it
    for prov in doc["provenance"].values():
        ports = {e["id"] for e in prov["entities"] if e["type"] == "endpoint"}
        assert not any(f":{port}" in p for p in ports for port in own), ports
    md = (out / "compare.md").read_text()
    assert LEFT_OUT in md, md
    for run, port in zip(doc["runs"], own, strict=True):
        assert f"- {run['id']}: 127.0.0.1:{port}" in md, md
    assert LEFT_OUT in done.stdout, done.stdout
