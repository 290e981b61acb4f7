"""A standing collector never attributes another process's connections to what it follows.

The kernel's TCP destroy notifications (sock_diag) cover every TCP socket of the network
namespace, the whole machine for a standing collector. A notification whose process cannot be
established must not become a connection of the followed session: it is dropped from the
followed view and counted ("unattributed machine connections: N", docs/host.md).

The test starts ``otel-bridge run -c configs/local.yaml`` as a real process and an SDK agent
that it follows; meanwhile an *unrelated* process (a child of the test, not of the agent) makes
short TCP connections to a server of its own. None of those connections may appear in the
records or the graph; the agent's own connection still does, with its pid.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from standing_support import REPO, Agent, RunningCollector

from otel_bridge.testing import LoopbackServer, closing_server

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")

UNRELATED = """
import socket, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
ports = []
with open(out, "w") as f:
    for _ in range(200):
        with socket.create_connection(("127.0.0.1", port)) as s:
            f.write(f"{s.getsockname()[1]}\\n")
            f.flush()
            s.recv(16)  # the server closes first: this socket is destroyed at once on close
        time.sleep(0.01)
"""


def log_records(path: Path) -> list[dict[str, object]]:
    """The attributes (values as text) of every OTLP/JSON log record in the records file."""
    out: list[dict[str, object]] = []
    for line in path.read_text().splitlines():
        for rl in json.loads(line).get("resourceLogs", []):
            for sl in rl["scopeLogs"]:
                for rec in sl["logRecords"]:
                    attrs = {a["key"]: next(iter(a["value"].values())) for a in rec["attributes"]}
                    out.append({"event": rec.get("eventName"), **attrs})
    return out


def config_file(tmp_path: Path, tracing: bool) -> Path:
    """configs/local.yaml as shipped, or a copy with the eBPF socket tracer off (a machine
    without bpftrace: destroy notifications are then the only report of a short connection)."""
    shipped = REPO / "configs" / "local.yaml"
    if tracing:
        return shipped
    text = shipped.read_text()
    assert "\n  host:\n" in text
    copy = tmp_path / "local-no-ebpf.yaml"
    copy.write_text(text.replace("\n  host:\n", "\n  host:\n    socket_tracing: false\n"))
    return copy


@pytest.mark.parametrize("tracing", [True, False], ids=["local.yaml", "local.yaml-no-ebpf"])
def test_unrelated_short_connections_are_never_the_followed_sessions(
    tmp_path: Path, tracing: bool
) -> None:
    """configs/local.yaml: an unfollowed process's short connections are not recorded (the
    coverage counts them), the agent's connection is recorded with its pid."""
    graph_path, records = tmp_path / "graph.json", tmp_path / "records.jsonl"
    env = {"OTEL_BRIDGE_GRAPH": str(graph_path), "OTEL_BRIDGE_RECORDS": str(records)}
    collector = RunningCollector(config_file(tmp_path, tracing), tmp_path, env)
    held = LoopbackServer()
    ports_file = tmp_path / "unrelated-ports.txt"
    with closing_server() as port:
        other = subprocess.Popen([sys.executable, "-c", UNRELATED, str(port), str(ports_file)])
        agent = Agent(
            tmp_path / "out.txt",
            held.port,
            f"http://127.0.0.1:{collector.http_port}",
            "http/protobuf",
        )
        try:
            collector.stderr.wait_for(rf"following pid {agent.pid} from now")
            agent.go()
            assert other.wait(timeout=60) == 0
        finally:
            agent.kill()
            if other.poll() is None:
                other.kill()
                other.wait()
            held.close()
            code = collector.stop()
    assert code == 0, collector.output
    # 200 connections made (the kernel may give a local port again: the server closes first, so
    # the client's end leaves no TIME_WAIT behind to keep it taken)
    assert len(ports_file.read_text().split()) == 200
    recorded = log_records(records)
    leaked = [a for a in recorded if a.get("network.peer.port") == str(port)]
    assert leaked == [], leaked[:3]
    states = [str(a.get("collection.reason")) for a in recorded if a["event"] == "collection.state"]
    counted = [s for s in states if "unattributed machine connections: " in s]
    if not tracing:  # with the tracer attached, it reports them as another process's
        assert counted, states
    graph: dict[str, Any] = json.loads(graph_path.read_text())
    endpoints = [n for n in graph["nodes"] if n["kind"] == "endpoint"]
    said = [line for line in collector.output.splitlines() if "network" in line or "pid" in line]
    assert port not in {n["facts"].get("port") for n in endpoints}, said[-12:]
    assert held.port in {n["facts"].get("port") for n in endpoints}, (endpoints, said[-12:])
