"""The cross-host connection join in the store (``docs/store.md``, *Cross-host joins*), against a
real PostgreSQL server: the SQL rule gives the in-memory rule's answers, two writers (two
gateways: two runs) and one writer across a restart join one connection once, ambiguity gives no
join and is counted, and a join a gateway made in memory is stored once.
"""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest

from otel_bridge.component import Host, Telemetry
from otel_bridge.exporters.postgres import Config, PostgresExporter
from otel_bridge.model import Batch, Observation, RelationKind
from otel_bridge.processors.crosshost.join import CrossHostJoin
from otel_bridge.store import connect, migrate, status
from otel_bridge.store.reader import Selector, read_graph
from otel_bridge.store.writer import StoreWriter
from store.join_support import (
    CLIENT,
    HOST_A,
    HOST_B,
    HOST_C,
    SERVER,
    T0,
    S,
    accept,
    at_once,
    connect_end,
    observations,
    os_event,
)
from store.store_support import cli

psycopg = pytest.importorskip("psycopg", reason="needs the postgres extra")
SKEW = 5 * S
JOIN_ID = f"crosshost:tcp:{HOST_A}:{CLIENT[0]}:{CLIENT[1]}:{HOST_B}:{SERVER[0]}:{SERVER[1]}"
JOINS = "SELECT run_id, id FROM ob_observations WHERE id LIKE 'crosshost:tcp:%' ORDER BY run_id"


def _exporter(url: str, run_id: str, telemetry: Telemetry | None = None) -> PostgresExporter:
    exporter = PostgresExporter(Config(endpoint=url, run_id=run_id, task="fleet", flush_interval=0))
    exporter.start(Host(telemetry=telemetry or Telemetry()))
    return exporter


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with connect(url) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def _join_edges(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["edges"] if e["relation"] == "connected_to_process"]


# ----------------------------------------------------------------- the SQL rule is the Python rule


def _random_ends(rng: random.Random, net: int) -> list[Observation]:
    """Eight ends of connections among three hosts, on the 4-tuples of network ``net`` (so that
    two sequences in one database never meet), some loopback, at times 0-9 s."""
    out = []
    for i in range(8):
        loop = rng.random() < 0.1
        client = ("127.0.0.1" if loop else f"10.{net}.0.{rng.choice((1, 9))}", rng.choice((1, 2)))
        server = ("127.0.0.1" if loop else f"10.{net}.1.{rng.choice((2, 2, 3))}", 8080)
        host, pid = rng.choice((HOST_A, HOST_B, HOST_C)), rng.choice((100, 200, 300))
        t = T0 + rng.choice((0, 3, 5, 6, 9)) * S
        rid = f"strace:{net}:{i}"
        if rng.random() < 0.5:
            record = os_event("network.connect", host, pid, (client, server), t, rid=rid)
        else:
            record = os_event("network.accept", host, pid, (server, client), t, rid=rid)
        out.extend(observations(record))
    return out


def _in_memory(ends: list[Observation]) -> tuple[set[bytes], int]:
    join = CrossHostJoin(SKEW)
    out: list[Observation] = []
    for obs in ends:
        join.add_observation(obs, out)
    return {_seen(j) for j in out}, join.counts.connections_ambiguous


def _seen(j: Observation) -> bytes:
    """The whole join observation (entities, facts, evidence, attributes), comparable."""
    return msgspec.json.encode(j)


def test_the_sql_rule_agrees_with_the_in_memory_rule(pg_url: str) -> None:
    """Random sequences of ends (same or other 4-tuple part, host, process, time inside or
    outside the skew window, loopback), stored in random batches: the store makes exactly the
    joins, with the same ids, supports, subjects, objects, times and attributes, and counts the
    same ambiguities as the gateway's in-memory join fed the same ends in the same order."""
    rng = random.Random(17)
    with connect(pg_url) as conn:
        migrate(conn)
        writer = StoreWriter(conn, partition_interval=86400)
        writer.ensure_run("r", host_id="gw", service="", task="", run={})
        seq, joined_any, ambiguous_any = 0, 0, 0
        for net in range(60):
            ends = _random_ends(rng, net)
            expected, ambiguous = _in_memory(ends)
            made: set[bytes] = set()
            counted = 0
            i = 0
            while i < len(ends):
                n = rng.choice((1, 1, 2, 3, 8))
                stored = writer.ingest(
                    "r",
                    host_id="gw",
                    seq=seq,
                    batch=Batch(observations=tuple(ends[i : i + n])),
                    join_skew_ns=SKEW,
                )
                seq = stored.next_seq
                made.update(_seen(j) for j in stored.joins)
                counted += stored.ambiguous
                i += n
            assert (made, counted) == (expected, ambiguous), f"sequence {net}"
            joined_any += len(made)
            ambiguous_any += counted
    assert joined_any >= 10, "the sequences exercise joins"
    assert ambiguous_any >= 5, "and ambiguities"


# --------------------------------------------------------------------------- two writers, restart


@pytest.fixture
def telemetry() -> Telemetry:
    return Telemetry()


def test_two_writers_each_with_one_end_join_once_with_both_supports(
    pg_url: str, telemetry: Telemetry
) -> None:
    """Two gateways (two runs of one database): the client end reaches one, the server end the
    other. The second's transaction makes the join, in its run, with both observations'
    ids as support; the task's graph shows one edge."""
    client, server = connect_end(), accept(t=T0 + S)
    one, two = _exporter(pg_url, "gateway-1"), _exporter(pg_url, "gateway-2", telemetry)
    try:
        one.consume(Batch(observations=(client,)))
        two.consume(Batch(observations=(server,)))
    finally:
        one.shutdown()
        two.shutdown()
    assert telemetry.total("connections_joined", kind="exporter") == 1
    assert _rows(pg_url, JOINS) == [("gateway-2", JOIN_ID)]
    with connect(pg_url) as conn:
        both = read_graph(conn, Selector(task="fleet"))
        rows = read_graph(conn, Selector(run="gateway-2"))
        counts = status(conn)
    for doc in (both, rows):
        (edge,) = _join_edges(doc)
        assert edge["source"] == client.subject.id
        assert edge["target"] == server.subject.id
        assert edge["support"] == [JOIN_ID]
        assert edge["derived_support"] == sorted([client.id, server.id])
        assert (edge["grade"], edge["method"], edge["identity_exact"], edge["causal"]) == (
            "C",
            "tcp_4tuple",
            True,
            False,
        )
        assert edge["evidence_count"] == 1
    assert (counts["connections_joined"], counts["connections_ambiguous"]) == (1, 0)
    shown = cli("graph", "--db", pg_url, "--task", "fleet", "--json")
    assert shown.returncode == 0, shown.stderr
    (edge,) = _join_edges(json.loads(shown.stdout))
    assert edge["derived_support"] == sorted([client.id, server.id])


def test_a_writer_restarted_between_the_two_ends_joins_them(pg_url: str) -> None:
    """One gateway stores the client end, stops, starts again (resuming its run) and stores the
    server end: one join, in the run's graph rows, once."""
    first = _exporter(pg_url, "gateway-1")
    first.consume(Batch(observations=(accept(),)))  # the server's end may come first
    first.shutdown()
    again = _exporter(pg_url, "gateway-1")
    again.consume(Batch(observations=(connect_end(t=T0 + 2 * S),)))
    again.consume(Batch(observations=(connect_end(t=T0 + 2 * S),)))  # a resend adds nothing
    again.shutdown()
    assert len(_rows(pg_url, JOINS)) == 1
    with connect(pg_url) as conn:
        (edge,) = _join_edges(read_graph(conn, Selector(run="gateway-1")))
    assert edge["evidence_count"] == 1
    assert len(edge["derived_support"]) == 2


def test_two_fitting_server_ends_are_ambiguous_no_join_counted(
    pg_url: str, telemetry: Telemetry
) -> None:
    """Two processes (on two hosts) accepted the client's 4-tuple within the window: the store
    cannot tell which one the client reached, so it joins neither, counts it in the exporter's
    counter and in the database (``db status``), and a later end changes nothing."""
    one, two = _exporter(pg_url, "gateway-1"), _exporter(pg_url, "gateway-2", telemetry)
    try:
        one.consume(Batch(observations=(accept(pid=200), accept(host=HOST_C, pid=300))))
        two.consume(Batch(observations=(connect_end(t=T0 + S),)))
    finally:
        one.shutdown()
        two.shutdown()
    assert _rows(pg_url, JOINS) == []
    assert telemetry.total("connections_ambiguous", kind="exporter") == 1
    assert telemetry.total("connections_joined", kind="exporter") == 0
    shown = cli("db", "status", "--db", pg_url)
    assert shown.returncode == 0, shown.stderr
    counts = json.loads(shown.stdout)
    assert (counts["connections_joined"], counts["connections_ambiguous"]) == (0, 1)
    with connect(pg_url) as conn:
        assert _join_edges(read_graph(conn, Selector(task="fleet"))) == []


def test_a_join_made_in_memory_and_in_the_store_is_stored_once(
    pg_url: str, telemetry: Telemetry
) -> None:
    """A gateway whose ``crosshost`` joined the two ends in memory hands the store its join
    after the completing end (as the processor does); the store makes the same join (same id)
    and stores it once: one row, one edge with evidence count 1. A second gateway that receives
    the same in-memory join later (an agent's resend to the other gateway) adds nothing."""
    client, server = connect_end(), accept(t=T0 + S)
    memory: list[Observation] = []
    join = CrossHostJoin(SKEW)
    for obs in (client, server):
        join.add_observation(obs, memory)
    (found,) = memory
    assert found.relation is RelationKind.CONNECTED_TO_PROCESS
    one, two = _exporter(pg_url, "gateway-1", telemetry), _exporter(pg_url, "gateway-2")
    try:
        one.consume(Batch(observations=(client,)))
        one.consume(Batch(observations=(server, found)))
        two.consume(Batch(observations=(found,)))
    finally:
        one.shutdown()
        two.shutdown()
    assert _rows(pg_url, JOINS) == [("gateway-1", found.id)]
    assert telemetry.total("memory_joins_left_to_store", kind="exporter") == 1
    with connect(pg_url) as conn:
        (edge,) = _join_edges(read_graph(conn, Selector(run="gateway-1")))
        assert _join_edges(read_graph(conn, Selector(run="gateway-2"))) == []
    assert edge["evidence_count"] == 1
    assert edge["derived_support"] == sorted(found.evidence.support)


def test_with_the_store_join_off_memory_joins_are_stored_as_before(pg_url: str) -> None:
    """``crosshost_join: false``: nothing is joined in the store and the in-memory join is
    stored like any observation."""
    client, server = connect_end(), accept(t=T0 + S)
    memory: list[Observation] = []
    join = CrossHostJoin(SKEW)
    for obs in (client, server):
        join.add_observation(obs, memory)
    exporter = PostgresExporter(
        Config(endpoint=pg_url, run_id="plain", flush_interval=0, crosshost_join=False)
    )
    exporter.start(Host())
    exporter.consume(Batch(observations=(client,)))
    exporter.consume(Batch(observations=(server,)))
    assert _rows(pg_url, JOINS) == []
    exporter.consume(Batch(observations=tuple(memory)))
    exporter.shutdown()
    assert _rows(pg_url, JOINS) == [("plain", memory[0].id)]
    assert _rows(pg_url, "SELECT count(*) FROM ob_conn_ends") == [(0,)]


def test_two_writers_storing_both_ends_at_once_join_every_connection_once(pg_url: str) -> None:
    """Two writers store the two ends of 40 connections at the same time, in batches of four
    whose 4-tuples overlap in opposite orders (each writer has the client end of half the
    connections and the server end of the other half). The lock per 4-tuple makes the second
    transaction see the first's end, and taking the locks in one order keeps the two from
    deadlocking: 40 joins, none twice, no ambiguity, no refused batch."""
    ends: tuple[list[Observation], list[Observation]] = ([], [])
    for i in range(40):
        client = (f"10.1.{i}.1", 40000 + i)
        server = (f"10.2.{i}.1", 443)
        pair = (
            connect_end(pid=100 + i, local=client, peer=server),
            accept(pid=500 + i, peer=client, local=server, t=T0 + S),
        )
        ends[0].append(pair[i % 2])
        ends[1].append(pair[1 - i % 2])
    ends[1].reverse()
    telemetry = Telemetry()
    writers = [_exporter(pg_url, f"gateway-{n}", telemetry) for n in (1, 2)]

    def store(n: int) -> None:
        for k in range(0, len(ends[n]), 4):
            writers[n].consume(Batch(observations=tuple(ends[n][k : k + 4])))

    try:
        at_once(store)
    finally:
        for writer in writers:
            writer.shutdown()
    joins = _rows(pg_url, JOINS)
    assert len(joins) == len({j for _, j in joins}) == 40
    assert telemetry.total("connections_joined", kind="exporter") == 40
    assert telemetry.total("connections_ambiguous", kind="exporter") == 0
