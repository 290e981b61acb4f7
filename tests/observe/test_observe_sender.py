"""An agent whose spans state no ``process.pid`` is linked to the process that sent them.

The OpenTelemetry Python SDK's default resource (``Resource.create({...})``, what the official
instrumentations' examples use) names no process. Under ``observe`` the receiver records the
transport peer of each request, the host plane records the sender's end of that loopback
connection with its process, and ``correlate`` joins the two (method ``transport_peer``): the
agent is linked to the process that sent its spans, its model calls to that process's
connections. Real SDK clients over gRPC and HTTP, real processes, the real ``observe``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import observed_run

AGENT = """
import os, socket, sys
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

name, protocol = sys.argv[1], sys.argv[2]
if protocol == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
provider = TracerProvider(resource=Resource.create({"service.name": "svc-" + name}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("sender-test")
with open(name + ".pid", "w") as f:
    f.write(str(os.getpid()))
model = socket.create_server(("127.0.0.1", 0))  # stands for the model's endpoint
port = model.getsockname()[1]
agent_attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
with tracer.start_as_current_span("invoke_agent " + name, attributes=agent_attrs):
    call = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "m-1",
        "server.address": "127.0.0.1",
        "server.port": port,
    }
    with tracer.start_as_current_span("chat m-1", attributes=call):
        with socket.create_connection(("127.0.0.1", port)) as conn:
            served, _ = model.accept()
            conn.sendall(b"q")
            served.recv(1)
            served.close()
provider.shutdown()
"""

LAUNCHER = """
import subprocess, sys
children = [
    subprocess.Popen([sys.executable, "agent.py", name, sys.argv[1]]) for name in ("alpha", "beta")
]
sys.exit(max(c.wait() for c in children))
"""


def _graph(run: Path) -> dict[str, Any]:
    return json.loads((run / "graph.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _links(graph: dict[str, Any], method: str) -> dict[str, dict[str, Any]]:
    """Agent node id -> its ``correlated_with_process`` edge of ``method``."""
    return {
        e["source"]: e
        for e in graph["edges"]
        if e["relation"] == "correlated_with_process" and e["method"] == method
    }


def _pid_of(graph: dict[str, Any], node_id: str) -> int:
    [node] = [n for n in graph["nodes"] if n["id"] == node_id]
    return int(node["facts"]["pid"])


def _correlation(run: Path) -> dict[str, int]:
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    return dict(summary.get("correlation") or {})


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_pidless_agent_is_linked_to_the_process_that_sent_its_spans(
    tmp_path: Path, protocol: str
) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    run = observed_run(tmp_path, sys.executable, "agent.py", "solo", protocol)
    pid = int((tmp_path / "solo.pid").read_text())
    graph = _graph(run)
    [(agent, link)] = _links(graph, "transport_peer").items()
    assert agent == "agent:svc-solo:solo"
    assert _pid_of(graph, link["target"]) == pid
    assert (link["grade"], link["identity_exact"], link["causal"]) == ("C", True, False)
    assert link["attrs"]["sent_by"] is True
    assert link["attrs"]["network.protocol.name"] == protocol
    assert not _links(graph, "resource_pid")
    # The connection the spans came over is the link's support, as the host plane recorded it.
    connections = [
        e
        for e in graph["edges"]
        if e["relation"] == "connected_to" and _pid_of(graph, e["source"]) == pid
    ]
    support = set(link["derived_support"])
    assert any(support & set(c["support"]) for c in connections), (support, connections)
    # The model call joins the connection its sender made, as for a pid-stating agent.
    served = [e for e in graph["edges"] if e["relation"] == "served_at"]
    assert [e["method"] for e in served] == ["model_endpoint"], served
    assert served[0]["attrs"]["sender"] is True
    report = (run / "report.md").read_text(encoding="utf-8")
    assert f"Spans sent by pid {pid} " in report, report
    assert "the agent's own process, unless it relays spans it received" in report, report
    assert "Agent process" not in report, report
    assert "is linked to no process" not in report, report


def test_two_pidless_agents_are_each_linked_to_their_own_process(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    (tmp_path / "launcher.py").write_text(LAUNCHER, encoding="utf-8")
    run = observed_run(tmp_path, sys.executable, "launcher.py", "http/protobuf")
    graph = _graph(run)
    links = _links(graph, "transport_peer")
    assert sorted(links) == ["agent:svc-alpha:alpha", "agent:svc-beta:beta"]
    for name in ("alpha", "beta"):
        pid = int((tmp_path / f"{name}.pid").read_text())
        assert _pid_of(graph, links[f"agent:svc-{name}:{name}"]["target"]) == pid
    assert not any(k.startswith("exact.transport_peer.") for k in _correlation(run))


def test_a_pid_stating_agent_is_linked_by_its_pid_alone(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    command = ("env", "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process", sys.executable, "agent.py")
    run = observed_run(tmp_path, *command, "solo", "grpc")
    pid = int((tmp_path / "solo.pid").read_text())
    graph = _graph(run)
    [link] = _links(graph, "resource_pid").values()
    assert _pid_of(graph, link["target"]) == pid
    assert not _links(graph, "transport_peer")
    # Its peer was the same process: nothing disagreed.
    assert "exact.transport_peer.disagrees" not in _correlation(run)


RELAY = """
import sys, time
from pathlib import Path
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

asked, done = Path(sys.argv[1]), Path(sys.argv[2])
deadline = time.monotonic() + 120
while not asked.exists() and time.monotonic() < deadline:
    time.sleep(0.01)
endpoint = asked.read_text()
exporter = OTLPSpanExporter(endpoint=endpoint + "/v1/traces")
provider = TracerProvider(resource=Resource.create({"service.name": "svc-unseen"}))
provider.add_span_processor(SimpleSpanProcessor(exporter))
attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "unseen"}
with provider.get_tracer("sender-test").start_as_current_span("invoke_agent", attributes=attrs):
    pass
provider.shutdown()
done.write_text("sent")
"""

ASK = """
import os, sys, time
from pathlib import Path
Path(sys.argv[1] + ".tmp").write_text(os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
deadline = time.monotonic() + 120
while not Path(sys.argv[2]).exists() and time.monotonic() < deadline:
    time.sleep(0.01)
sys.exit(0 if Path(sys.argv[2]).exists() else 1)
"""


def test_spans_sent_by_a_process_the_host_plane_did_not_see_are_not_linked(
    tmp_path: Path,
) -> None:
    """The observed command has a process outside the run (not followed) send its agent's
    spans: the receiver knows the peer, but no followed process held that connection."""
    (tmp_path / "relay.py").write_text(RELAY, encoding="utf-8")
    (tmp_path / "ask.py").write_text(ASK, encoding="utf-8")
    asked, done = tmp_path / "endpoint.txt", tmp_path / "sent.txt"
    outside = subprocess.Popen([sys.executable, "relay.py", str(asked), str(done)], cwd=tmp_path)
    try:
        run = observed_run(tmp_path, sys.executable, "ask.py", str(asked), str(done))
    finally:
        assert outside.wait(timeout=120) == 0
    graph = _graph(run)
    assert not _links(graph, "transport_peer")
    assert _correlation(run).get("exact.transport_peer.no_connection", 0) >= 1
    report = (run / "report.md").read_text(encoding="utf-8")
    assert "agent `unseen` (service svc-unseen) is linked to no process" in report, report
    assert "the host plane saw no followed process hold the connection the spans came over" in (
        report
    ), report


RELAY_CONFIG = """
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:${env:RELAY_PORT}
exporters:
  otlp:
    endpoint: ${env:UPSTREAM}
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp]
"""

RELAYED = """
import os, re, socket, subprocess, sys, time
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
env = dict(os.environ, RELAY_PORT=str(port), UPSTREAM=os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"])
relay = subprocess.Popen(
    [sys.executable, "-m", "otel_bridge", "run", "-c", "relay.yaml"],
    env=env, stderr=subprocess.PIPE, text=True,
)
for line in relay.stderr:
    if re.search("OTLP/http on", line):
        break
env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:%d" % port)
code = subprocess.call([sys.executable, "agent.py", "relayed", "http/protobuf"], env=env)
relay.send_signal(2)
relay.communicate(timeout=60)
sys.exit(code or relay.returncode)
"""


def test_a_relay_that_sent_the_spans_is_not_said_to_be_the_agent(tmp_path: Path) -> None:
    """A local collector between the agent and observe's endpoint holds the connection the
    spans came over: it is linked as their sender, and the report says it may be a relay
    (it listened for connections), never that it is the agent's process."""
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    (tmp_path / "relay.yaml").write_text(RELAY_CONFIG, encoding="utf-8")
    (tmp_path / "relayed.py").write_text(RELAYED, encoding="utf-8")
    run = observed_run(tmp_path, sys.executable, "relayed.py")
    agent = int((tmp_path / "relayed.pid").read_text())
    graph = _graph(run)
    [link] = _links(graph, "transport_peer").values()
    relay = _pid_of(graph, link["target"])
    assert relay != agent
    report = (run / "report.md").read_text(encoding="utf-8")
    head = report.split("## Tool calls")[0]
    assert "Agent process" not in head, report
    assert f"Spans sent by pid {relay} `" in head, report
    assert "it may be a relay (a local OpenTelemetry Collector)" in head, report
