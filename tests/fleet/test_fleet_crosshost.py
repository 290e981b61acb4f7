"""Issue 17 part B: two agents on two simulated hosts feed one gateway, which joins the hosts.

Real processes throughout: the gateway is ``otel-bridge run -c configs/gateway.yaml`` (TLS and a
bearer token), each agent ``otel-bridge run -c configs/agent.yaml`` in its own network namespace
with its own machine id, shipping to the gateway over OTLP/gRPC through its persistent queue. The
workload is a client on host A and a server on host B, traced with the OpenTelemetry SDK (W3C
context on the wire), over a real TCP connection across a veth pair.

The control: a second client on host A, which agent A does not follow (an unobserved process),
connects to the same server from the same address to the same port; only its client port differs.
Agent B observes the server accept both connections. The gateway must join the traced connection
only: a rule by address and server port would also take the control's accept.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from fleet_support import (
    App,
    CollectorProcess,
    Host,
    agent_env,
    gateway_env,
    link,
    remove,
    require_namespaces,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "otlp"))
from certs import make_certs

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")

HOST_A = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
HOST_B = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"
SERVER_PORT = 8080


def _edges(graph: dict[str, Any], relation: str) -> list[dict[str, Any]]:
    return [e for e in graph["edges"] if e["relation"] == relation]


@pytest.mark.slow  # about 25 s: four collectors and apps, the agents drain enrich's hold
@pytest.mark.root
def test_gateway_joins_a_connection_and_a_trace_across_hosts_never_by_port(
    tmp_path: Path,
) -> None:
    require_namespaces()
    hosts: list[Host] = []
    procs: list[CollectorProcess] = []
    apps: list[App] = []
    try:
        host_a, host_b = link(tmp_path, str(os.getpid() % 100000), ("a", HOST_A), ("b", HOST_B))
        hosts += [host_a, host_b]
        certs = make_certs(tmp_path)
        state = tmp_path / "gateway"
        gateway = CollectorProcess(
            "gateway.yaml",
            gateway_env(state, certs.server, certs.server_key),
            prefix=["ip", "netns", "exec", host_b.netns],
        )
        procs.append(gateway)
        agent_a = CollectorProcess(
            "agent.yaml",
            agent_env(f"{host_b.address}:{gateway.grpc_port}", certs.ca, tmp_path / "qa"),
            prefix=host_a.prefix(),
            sets=[r"receivers.host.command=[fleet_app\.py client .* traced]"],
        )
        agent_b = CollectorProcess(
            "agent.yaml",
            agent_env(f"127.0.0.1:{gateway.grpc_port}", certs.ca, tmp_path / "qb"),
            prefix=host_b.prefix(),
            sets=[r"receivers.host.command=[fleet_app\.py server]"],
        )
        procs += [agent_a, agent_b]

        def traced(agent: CollectorProcess) -> dict[str, str]:
            return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{agent.http_port}"}

        server = App("server", host_b.address, SERVER_PORT, traced(agent_b), host_b.prefix())
        apps.append(server)
        agent_b.stderr.wait_for(rf"following pid {server.pid} from now")
        client = App(
            "client", host_b.address, SERVER_PORT, traced(agent_a), host_a.prefix(), label="traced"
        )
        control = App(
            "client", host_b.address, SERVER_PORT, {"OTEL_SDK_DISABLED": "true"}, host_a.prefix()
        )
        apps += [client, control]
        agent_a.stderr.wait_for(rf"following pid {client.pid} from now")
        client_addr, client_port = client.go()
        control_addr, control_port = control.go()
        assert client_addr == control_addr
        assert client_port != control_port
        assert server.wait() == 0
        for agent in (agent_a, agent_b):  # drain: enrich's held spans, the queue
            assert agent.stop() == 0, agent.stderr.log()
        assert gateway.stop() == 0, gateway.stderr.log()
    finally:
        for app in apps:
            app.kill()
        for proc in procs:
            proc.kill()
        remove(hosts)

    graph = json.loads((state / "graph.json").read_text())
    nodes = {n["id"]: n for n in graph["nodes"]}

    def process(host: str, pid: int) -> dict[str, Any]:
        node: dict[str, Any]
        (node,) = [
            n
            for n in nodes.values()
            if n["kind"] == "process" and n["facts"]["pid"] == pid and n["facts"]["host_id"] == host
        ]
        return node

    client_node = process(HOST_A, client.pid)
    server_node = process(HOST_B, server.pid)
    # host B observed both accepts (the control's too: the negative below has its proof)
    accepts = {
        o["object"]["facts"]["port"]: o["id"]
        for o in observations(state / "records.jsonl", "network.accept")
        if o["subject"]["facts"]["pid"] == server.pid
    }
    assert set(accepts) == {client_port, control_port}, accepts
    (connect,) = [
        o["id"]
        for o in observations(state / "records.jsonl", "network.connect")
        if o["subject"]["facts"]["pid"] == client.pid
    ]

    (join,) = _edges(graph, "connected_to_process")
    assert (join["source"], join["target"]) == (client_node["id"], server_node["id"])
    # the derived relation rests on the two ends of the traced connection, never the control
    assert sorted(join["derived_support"]) == sorted([connect, accepts[client_port]])
    assert join["identity_exact"] is True
    assert join["inferred"] is False
    assert join["causal"] is False
    assert join["method"] == "tcp_4tuple"
    assert join["grade"] == "C"
    assert join["attrs"]["network.local.port"] == client_port

    (trace_join,) = _edges(graph, "remote_child_of")
    child, parent = nodes[trace_join["source"]], nodes[trace_join["target"]]
    assert (child["label"], parent["label"]) == ("server.handle", "client.call")
    assert trace_join["identity_exact"] is True
    assert trace_join["method"] == "w3c_trace_context"


def observations(path: Path, event: str) -> list[dict[str, Any]]:
    """The observations of OS event ``event`` in a file exporter's output."""
    out = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        obs = record.get("observation")
        if obs and obs["attrs"].get("event.name") == event:
            out.append(obs)
    return out
