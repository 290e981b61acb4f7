"""Issue 17 end to end: two agents on two simulated hosts feed one gateway that writes PostgreSQL.

Real processes throughout: ``configs/gateway-postgres.yaml`` (exporters ``graph``, ``file`` and
``postgres``) in host B's network namespace, reaching the test's PostgreSQL server through its
Unix socket; ``configs/agent.yaml`` on host A and on host B (each its own network stack and
machine id). The workload:

1. a traced client on host A calls a traced server on host B over a real TCP connection (the
   cross-host join, and the trace join of the server's span to the client's), next to an
   untraced control client whose connection differs only by its port;
2. a client on host A sends spans with the OpenTelemetry SDK to agent A and keeps a receipt of
   every span the agent acknowledged; agent A is killed (-9) and restarted on its queue, then the
   gateway is killed (-9) and restarted while agent A keeps accepting into its queue (so the join
   made before the kill must survive the gateway's restart in both the journal and the store).

Then the database holds the gateway's run: the graph read back equals the gateway's graph.json,
``--host`` selects one host's part, the join edge is a row with its evidence columns, every
acknowledged span is stored exactly once and no observation is stored twice.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli
from fleet_support import (
    App,
    CollectorProcess,
    Host,
    agent_env,
    gateway_env,
    link,
    remove,
    require_namespaces,
    start_load,
    stored_span_rows,
    subprocess_env,
)
from store.store_support import Server, pg_server
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "otlp"))
from certs import make_certs

__all__ = ["pg_server"]  # the store tests' fixture (a real PostgreSQL server), shared

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
psycopg = pytest.importorskip("psycopg", reason="needs the postgres extra")

HOST_A = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
HOST_B = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2"
RUN = "gateway-test"
SERVER_PORT = 8080
GATEWAY_PORT = 14317  # in host B's own network stack: nothing else listens there
AGENT_A_PORT = 14318  # in host A's
FAST_RETRY = [
    "exporters.otlp/gateway.retry_on_failure.initial_interval=0.2s",
    "exporters.otlp/gateway.retry_on_failure.max_interval=1s",
]


class Fleet:
    """The gateway and two agents as restartable processes."""

    def __init__(self, tmp: Path, host_a: Host, host_b: Host, db_url: str) -> None:
        certs = make_certs(tmp)
        self.state = tmp / "gateway"
        self.host_a, self.host_b = host_a, host_b
        self.gw_env = gateway_env(self.state, certs.server, certs.server_key)
        self.gw_env.update(
            OTEL_BRIDGE_GATEWAY_GRPC_ENDPOINT=f"0.0.0.0:{GATEWAY_PORT}",
            OTEL_BRIDGE_DB_URL=db_url,
            OTEL_BRIDGE_GATEWAY_RUN=RUN,
        )
        self.a_env = agent_env(f"{host_b.address}:{GATEWAY_PORT}", certs.ca, tmp / "qa")
        self.a_env["OTEL_BRIDGE_OTLP_HTTP_ENDPOINT"] = f"127.0.0.1:{AGENT_A_PORT}"
        self.b_env = agent_env(f"127.0.0.1:{GATEWAY_PORT}", certs.ca, tmp / "qb")
        self.procs: dict[str, CollectorProcess] = {}

    def gateway(self) -> CollectorProcess:
        self.procs["gateway"] = CollectorProcess(
            "gateway-postgres.yaml",
            self.gw_env,
            prefix=["ip", "netns", "exec", self.host_b.netns],
        )
        return self.procs["gateway"]

    def agent_a(self) -> CollectorProcess:
        sets = [*FAST_RETRY, r"receivers.host.command=[fleet_app\.py client .* traced]"]
        self.procs["a"] = CollectorProcess(
            "agent.yaml", self.a_env, prefix=self.host_a.prefix(), sets=sets
        )
        return self.procs["a"]

    def agent_b(self) -> CollectorProcess:
        sets = [*FAST_RETRY, r"receivers.host.command=[fleet_app\.py server]"]
        self.procs["b"] = CollectorProcess(
            "agent.yaml", self.b_env, prefix=self.host_b.prefix(), sets=sets
        )
        return self.procs["b"]

    def kill(self) -> None:
        for proc in self.procs.values():
            proc.kill()


def load_with_restarts(fleet: Fleet, receipts: Path) -> set[str]:
    """Step 2 of the module docstring; the acknowledged span ids."""
    client, progress = start_load(
        f"http://127.0.0.1:{AGENT_A_PORT}", receipts, fleet.host_a.prefix()
    )
    try:
        progress.wait_for(r"acked 100\b")
        fleet.procs["a"].kill()  # SIGKILL mid-run, restarted on the same queue
        fleet.agent_a()
        progress.wait_for(r"acked 200\b")
        fleet.procs["gateway"].kill()  # SIGKILL mid-run; the agent keeps accepting
        progress.wait_for(r"acked 300\b")
        fleet.gateway()
        progress.wait_for(r"acked 400\b")
        assert client.stdin is not None
        client.stdin.write("stop\n")
        client.stdin.close()
        assert client.wait(timeout=60) == 0
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    return set(receipts.read_text().split())


def cross_host_calls(fleet: Fleet, apps: list[App]) -> tuple[App, App, int]:
    """Step 1: the server, the traced client, the traced client's port."""
    a, b = fleet.procs["a"], fleet.procs["b"]

    def traced(agent: CollectorProcess) -> dict[str, str]:
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{agent.http_port}"}

    host_a, host_b = fleet.host_a, fleet.host_b
    server = App("server", host_b.address, SERVER_PORT, traced(b), host_b.prefix())
    apps.append(server)
    b.stderr.wait_for(rf"following pid {server.pid} from now")
    client = App("client", host_b.address, SERVER_PORT, traced(a), host_a.prefix(), label="traced")
    control = App(
        "client", host_b.address, SERVER_PORT, {"OTEL_SDK_DISABLED": "true"}, host_a.prefix()
    )
    apps += [client, control]
    a.stderr.wait_for(rf"following pid {client.pid} from now")
    _, client_port = client.go()
    _, control_port = control.go()
    assert client_port != control_port
    assert server.wait() == 0
    return server, client, client_port


def stored_span_ids(url: str) -> set[str]:
    """The span ids whose own observation (``<span id>#0``) is in the store."""
    return set(stored_span_rows(url, RUN))


def joins(url: str, relation: str = "connected_to_process") -> int:
    """How many ``relation`` edges (a cross-host join) the gateway's run has."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM ob_edges WHERE run_id = %s AND relation = %s", (RUN, relation)
        ).fetchone()
    return 0 if row is None else int(row[0])


def graph_from_db(url: str, *extra: str) -> dict[str, Any]:
    done = run_cli("graph", "--db", url, "--run", RUN, *extra, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    graph: dict[str, Any] = json.loads(done.stdout)
    return graph


@pytest.mark.slow  # about a minute: three collectors, two kills and restarts, the drains
@pytest.mark.root
def test_two_agents_and_a_gateway_fill_postgres_and_read_back_the_gateway_graph(
    tmp_path: Path, pg_server: Server
) -> None:
    require_namespaces()
    db = pg_server.create_database()
    socket_url, url = pg_server.socket_url(db), pg_server.url(db)
    hosts: list[Host] = []
    apps: list[App] = []
    fleet: Fleet | None = None
    try:
        host_a, host_b = link(tmp_path, str(os.getpid() % 100000), ("a", HOST_A), ("b", HOST_B))
        hosts += [host_a, host_b]
        fleet = Fleet(tmp_path, host_a, host_b, socket_url)
        fleet.gateway()
        fleet.agent_a()
        fleet.agent_b()
        server, client, client_port = cross_host_calls(fleet, apps)
        # both ends reach the gateway first: crosshost's pending ends live in its memory only,
        # so a side that arrived before the gateway's kill and one after would never meet
        wait_until(lambda: joins(url) == 1, 90, "the cross-host join stored")
        # the same for the trace join (client span on A, server span on B): the store would
        # make it across the gateway's restart below, the gateway's memory would not
        wait_until(lambda: joins(url, "remote_child_of") == 1, 90, "the trace join stored")
        acked = load_with_restarts(fleet, tmp_path / "receipts")
        wait_until(lambda: acked <= stored_span_ids(url), 90, "every acknowledged span stored")
        for name in ("a", "b", "gateway"):  # drain: enrich's held spans, the queues, the store
            proc = fleet.procs[name]
            assert proc.stop() == 0, proc.stderr.log()
    finally:
        for app in apps:
            app.kill()
        if fleet is not None:
            fleet.kill()
        remove(hosts)

    assert len(acked) >= 400
    graph = json.loads((fleet.state / "graph.json").read_text())
    # the gateway's graph exporter is bounded (configs/gateway-postgres.yaml); nothing went over
    # its bounds here, and the store's reader has no bounds to state
    assert graph["summary"].pop("bounded")["over_bounds"] == 0
    # the reader gets the gateway's graph back: rows of the run, and a replay of its records
    read = graph_from_db(url, "--json")
    (tmp_path / "db-graph.json").write_text(json.dumps(read))  # kept for a failure's diagnosis
    assert read == graph
    assert graph_from_db(url, "--json", "--since", "2000-01-01T00:00:00Z") == graph

    with psycopg.connect(url) as conn:
        duplicates = conn.execute(
            "SELECT host_id, id, count(*) FROM ob_observations WHERE run_id = %s "
            "GROUP BY host_id, id HAVING count(*) > 1",
            (RUN,),
        ).fetchall()
        hosts_of_run = {
            str(r[0])
            for r in conn.execute("SELECT host_id FROM ob_run_hosts WHERE run_id = %s", (RUN,))
        }
        stored = conn.execute(
            "SELECT count(*) FROM ob_observations WHERE run_id = %s", (RUN,)
        ).fetchone()
        join = conn.execute(
            "SELECT source_key, target_key, grade, causal, inferred, identity_exact, method, "
            "derived_support FROM ob_edges WHERE run_id = %s AND relation = 'connected_to_process'",
            (RUN,),
        ).fetchall()
    assert duplicates == []  # nothing stored twice, after both kills and the resends
    assert acked <= stored_span_ids(url)  # nothing acknowledged was lost
    assert stored is not None
    assert stored[0] == graph["summary"]["observations"]
    assert {HOST_A, HOST_B} <= hosts_of_run

    nodes = {n["id"]: n for n in graph["nodes"]}
    (edge,) = [e for e in graph["edges"] if e["relation"] == "connected_to_process"]
    source, target = nodes[edge["source"]], nodes[edge["target"]]
    assert (source["facts"]["host_id"], source["facts"]["pid"]) == (HOST_A, client.pid)
    assert (target["facts"]["host_id"], target["facts"]["pid"]) == (HOST_B, server.pid)
    assert edge["attrs"]["network.local.port"] == client_port
    # the cross-host join is a row, its evidence in columns
    assert join == [
        (
            source["key"],
            target["key"],
            "C",
            "false",
            "false",
            "true",
            "tcp_4tuple",
            edge["derived_support"],
        )
    ]

    # --host: one host's part. Its processes are that host's, except the other end of a
    # cross-host join (host A's part holds the join: its subject is A's client)
    for host, pid in ((HOST_A, client.pid), (HOST_B, server.pid)):
        part = graph_from_db(url, "--json", "--host", host)
        ends = {
            end
            for e in part["edges"]
            if e["relation"] == "connected_to_process"
            for end in (e["source"], e["target"])
        }
        procs = [n for n in part["nodes"] if n["kind"] == "process"]
        assert pid in {p["facts"]["pid"] for p in procs if p["facts"]["host_id"] == host}
        assert {p["id"] for p in procs if p["facts"]["host_id"] != host} <= ends
        assert len(part["nodes"]) < len(graph["nodes"])
