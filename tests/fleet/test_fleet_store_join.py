"""Issue 17: the cross-host joins made in the store, so two gateways and a gateway restart never
lose a join (``docs/deployment.md``, ``docs/store.md``, *Cross-host joins*).

Real processes: two gateways (``configs/gateway-postgres.yaml``: TLS, token, key file, the
``crosshost`` processor and the ``postgres`` exporter) writing two runs of one task into the
test's own PostgreSQL server. The test stands for the agents of three hosts: it ships each
host's connection ends as an agent's ``evidence_to_logs`` does (OTLP/HTTP, evidence log
records of the host's normalized OS events), and a trace's spans (raw, and their evidence
records), each to the gateway the scenario names. The
gateway acknowledges a request once the store's transaction committed, so every check follows
the last acknowledgement without waiting, except those reading graph rows (flushed every second).
"""

from __future__ import annotations

import http.client
import json
import ssl
import sys
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
from cli_support import run_cli
from fleet_support import TOKEN, CollectorProcess, gateway_env, subprocess_env
from store.join_support import (
    HOST_A,
    HOST_B,
    HOST_C,
    T0,
    S,
    accept,
    connect_end,
)
from store.store_support import Server, pg_server
from store.trace_support import TRACE, span
from waiting import wait_until

from otel_bridge.model import Batch, Observation, Span
from otel_bridge.otlp import json_codec
from otel_bridge.processors import normalize
from otel_bridge.processors.crosshost import wire

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "otlp"))
from certs import Certs, make_certs

__all__ = ["pg_server"]

psycopg = pytest.importorskip("psycopg", reason="needs the postgres extra")

TASK = "two-gateways"


class Agent:
    """One host's agent instance, shipping evidence records as ``evidence_to_logs`` does."""

    def __init__(self, host: str, ca: Path) -> None:
        self.resource = wire.evidence_resource(host, uuid.uuid4().hex)
        self.context = ssl.create_default_context(cafile=str(ca))

    def ship(self, gateway: CollectorProcess, *observations: Observation) -> None:
        records = wire.encode(self.resource, observations, (), 2048)
        self._post(gateway, "/v1/logs", msgspec.json.encode(json_codec.encode_logs(records)))

    def ship_spans(self, gateway: CollectorProcess, *spans: Span) -> None:
        """The spans over the traces signal and their normalized observations as evidence
        records, as an agent ships them (two requests: they may reach two gateways)."""
        self._post(gateway, "/v1/traces", msgspec.json.encode(json_codec.encode_traces(spans)))
        self.ship(gateway, *normalize.Normalizer()(Batch(spans=spans)).observations)

    def _post(self, gateway: CollectorProcess, path: str, body: bytes) -> None:
        conn = http.client.HTTPSConnection(
            "localhost", gateway.http_port, context=self.context, timeout=60
        )
        try:
            conn.request(
                "POST",
                path,
                body,
                {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
            )
            answer = conn.getresponse()
            assert answer.status == 200, answer.read()
        finally:
            conn.close()


def _gateway(tmp: Path, certs: Certs, url: str, name: str) -> CollectorProcess:
    env = gateway_env(tmp / name, certs.server, certs.server_key)
    env.update(
        OTEL_BRIDGE_GATEWAY_GRPC_ENDPOINT="127.0.0.1:0",
        OTEL_BRIDGE_GATEWAY_HTTP_ENDPOINT="127.0.0.1:0",
        OTEL_BRIDGE_DB_URL=url,
        OTEL_BRIDGE_GATEWAY_RUN=name,
        OTEL_BRIDGE_GATEWAY_TASK=TASK,
    )
    return CollectorProcess("gateway-postgres.yaml", env)


def _joins(url: str, kind: str = "tcp") -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT run_id, id FROM ob_observations WHERE id LIKE %s ORDER BY run_id, id",
            (f"crosshost:{kind}:%",),
        ).fetchall()
    return [(str(r), str(i)) for r, i in rows]


def _cli(*args: str) -> dict[str, Any]:
    shown = run_cli(*args, env=subprocess_env())
    assert shown.returncode == 0, shown.stderr
    doc: dict[str, Any] = json.loads(shown.stdout)
    return doc


def _edges(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The connection joins of a graph document, by their (one) observation id."""
    out = {}
    for edge in doc["edges"]:
        if edge["relation"] == "connected_to_process":
            (obs_id,) = edge["support"]
            out[obs_id] = edge
    return out


def _join_id(client: tuple[str, str, int], server: tuple[str, str, int]) -> str:
    return f"crosshost:tcp:{client[0]}:{client[1]}:{client[2]}:{server[0]}:{server[1]}:{server[2]}"


def _supported_by(edge: dict[str, Any], *ends: Observation) -> bool:
    """Whether the edge's support is the two ends, as the gateway scoped them (``id@agent``)."""
    support = edge["derived_support"]
    return len(support) == len(ends) and all(
        any(s.startswith(e.id + "@") for s in support) for e in ends
    )


@pytest.mark.slow  # about 30 s: three gateway starts
def test_two_gateways_and_a_restart_lose_no_join(tmp_path: Path, pg_server: Server) -> None:
    url = pg_server.url(pg_server.create_database())
    certs = make_certs(tmp_path)
    a, b, c = (Agent(h, certs.ca) for h in (HOST_A, HOST_B, HOST_C))
    one, two = _gateway(tmp_path, certs, url, "gw-1"), _gateway(tmp_path, certs, url, "gw-2")
    try:
        # (a) one connection's client end to gateway 1, its server end to gateway 2
        split = (connect_end(), accept(t=T0 + S))
        a.ship(one, split[0])
        b.ship(two, split[1])
        # (b) the server end to gateway 1, which is killed and started again (same run), then
        # the client end: the restarted gateway's memory has only one end
        net = ("10.0.0.5", 40005), ("10.0.0.6", 443)
        restart = (
            connect_end(pid=101, local=net[0], peer=net[1], t=T0 + 2 * S),
            accept(pid=201, peer=net[0], local=net[1], t=T0 + 2 * S),
        )
        b.ship(one, restart[1])
        one.kill()
        one = _gateway(tmp_path, certs, url, "gw-1")
        a.ship(one, restart[0])
        # (c) two fitting server ends (two hosts, two gateways): ambiguous, no join
        amb = ("10.0.0.7", 40007), ("10.0.0.8", 443)
        b.ship(one, accept(pid=202, peer=amb[0], local=amb[1]))
        c.ship(two, accept(host=HOST_C, pid=302, peer=amb[0], local=amb[1]))
        a.ship(two, connect_end(pid=102, local=amb[0], peer=amb[1], t=T0 + S))
        # (d) both ends through gateway 2: its crosshost joins them in memory, the store too
        same = ("10.0.0.9", 40009), ("10.0.0.10", 443)
        both = (
            connect_end(pid=103, local=same[0], peer=same[1]),
            accept(pid=203, peer=same[0], local=same[1]),
        )
        a.ship(two, both[0])
        b.ship(two, both[1])
        # (e) a trace: host A's parent span to the restarted gateway 1, host B's child span
        # (started under it: W3C context) to gateway 2; neither gateway's memory has both
        a.ship_spans(one, span("client", 1, 0, "client.call"))
        b.ship_spans(two, span("server", 2, 1, "server.handle"))

        split_id = _join_id((HOST_A, "10.0.0.1", 40001), (HOST_B, "10.0.0.2", 8080))
        restart_id = _join_id((HOST_A, *net[0]), (HOST_B, *net[1]))
        both_id = _join_id((HOST_A, *same[0]), (HOST_B, *same[1]))
        assert _joins(url) == sorted([("gw-2", split_id), ("gw-1", restart_id), ("gw-2", both_id)])
        edges = _edges(_cli("graph", "--db", url, "--task", TASK, "--json"))
        assert set(edges) == {split_id, restart_id, both_id}
        assert _supported_by(edges[split_id], *split)
        assert _supported_by(edges[restart_id], *restart)
        assert _supported_by(edges[both_id], *both)
        assert all(e["evidence_count"] == 1 for e in edges.values())
        status = _cli("db", "status", "--db", url)
        assert (status["connections_joined"], status["connections_ambiguous"]) == (3, 1)
        trace_id = f"crosshost:trace:{TRACE.hex()}:{2:016x}"
        assert _joins(url, "trace") == [("gw-2", trace_id)]
        (remote,) = (
            e
            for e in _cli("graph", "--db", url, "--task", TASK, "--json")["edges"]
            if e["relation"] == "remote_child_of"
        )
        assert remote["support"] == [trace_id]
        assert remote["derived_support"] == [f"{1:016x}#0", f"{2:016x}#0"]
        assert status["traces_joined"] == 1
        # the graph rows of each run (flushed every second) hold its joins once
        wait_until(
            lambda: (
                set(_edges(_cli("graph", "--db", url, "--run", "gw-2", "--json")))
                == {split_id, both_id}
            ),
            60,
            "gateway 2's graph rows hold its two joins",
        )
        gw1 = _edges(_cli("graph", "--db", url, "--run", "gw-1", "--json"))
        assert set(gw1) == {restart_id}
        assert gw1[restart_id]["evidence_count"] == 1
        assert one.stop() == 0, one.stderr.log()
        assert two.stop() == 0, two.stderr.log()
    finally:
        one.kill()
        two.kill()
