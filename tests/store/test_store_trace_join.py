"""The cross-host trace join in the store (``docs/store.md``, *Cross-host joins*), against a
real PostgreSQL server: the SQL rule gives the in-memory rule's answers; a parent span shipped
from host A to one gateway and its child from host B to another (two runs of one database), in
either order, or to one gateway across a restart, give one ``remote_child_of`` join with both
spans' observations as support, read back by ``otel-bridge graph --db``; a parent on the same
host, or a parent id that names no stored span, gives none; a join made in memory and in the
store is stored once.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from otel_bridge.component import Telemetry
from otel_bridge.model import Batch, Observation, RelationKind, Span
from otel_bridge.processors.crosshost.join import CrossHostJoin
from otel_bridge.store import connect, migrate, status
from otel_bridge.store.reader import Selector, read_graph
from otel_bridge.store.writer import StoreWriter, drop_partitions_before
from store.join_support import T0, S, accept, at_once, connect_end
from store.store_support import cli
from store.trace_support import TRACE, Gateway, agent_ships, node_observation, received, span

psycopg = pytest.importorskip("psycopg", reason="needs the postgres extra")
HOST_A, HOST_B, HOST_C = "host-a", "host-b", "host-c"
JOIN_ID = f"crosshost:trace:{TRACE.hex()}:{2:016x}"
JOINS = (
    "SELECT run_id, id FROM ob_observations WHERE id LIKE 'crosshost:trace:%' ORDER BY run_id, id"
)
PARENT = span("client", 1, 0, "client.call")
CHILD = span("server", 2, 1, "server.handle")


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with connect(url) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def _trace_edges(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["edges"] if e["relation"] == RelationKind.REMOTE_CHILD_OF.value]


def _seen(j: Observation) -> bytes:
    """The whole join observation (entities, facts, evidence, attributes), comparable."""
    return msgspec.json.encode(j)


# ----------------------------------------------------------------- the SQL rule is the Python rule

Piece = tuple[list[Observation], list[Span]]


def _random_trace(rng: random.Random, net: int) -> list[Piece]:
    """Seven spans of one trace (``net``) shipped by three hosts' agents, each span's parent an
    earlier span, a span id nothing stored, or none; every span's observations and its raw span
    are two pieces, shuffled. Span ids are unique in the database, as real ones are."""
    trace = bytes([net]) * 16
    pieces: list[Piece] = []
    first = net * 100
    for sid in range(first, first + 7):
        parent = 0 if sid == first else rng.choice((0, first + 99, *range(first, sid)))
        one = span(f"svc{sid}", sid, parent, f"op{sid}", trace=trace)
        host = rng.choice((HOST_A, HOST_A, HOST_B, HOST_C))
        pieces.append((list(received(host, one).observations), []))
        pieces.append(([], [one]))
    rng.shuffle(pieces)
    return pieces


def _in_memory(batches: list[Piece]) -> set[bytes]:
    """The gateway's ``crosshost`` fed the same batches (observations, then spans, as the
    processor does)."""
    join, out = CrossHostJoin(5 * 10**9), list[Observation]()
    for observations, spans in batches:
        for obs in observations:
            join.add_observation(obs, out)
        for one in spans:
            join.add_span(one, out)
    return {_seen(j) for j in out}


def _batches(rng: random.Random, pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    i = 0
    while i < len(pieces):
        n = rng.choice((1, 1, 2, 3, 14))
        out.append(
            (
                [o for p in pieces[i : i + n] for o in p[0]],
                [s for p in pieces[i : i + n] for s in p[1]],
            )
        )
        i += n
    return out


def test_the_sql_rule_agrees_with_the_in_memory_rule(pg_url: str) -> None:
    """Random traces across three hosts, their span observations and raw spans stored in random
    batches and orders: the store makes exactly the in-memory join's trace joins, whole (ids,
    subjects, objects, supports, times, attributes)."""
    rng = random.Random(17)
    joined = 0
    with connect(pg_url) as conn:
        migrate(conn)
        writer = StoreWriter(conn, partition_interval=86400)
        writer.ensure_run("r", host_id="gw", service="", task="", run={})
        seq = 0
        for net in range(1, 21):
            batches = _batches(rng, _random_trace(rng, net))
            made: set[bytes] = set()
            for observations, spans in batches:
                stored = writer.ingest(
                    "r",
                    host_id="gw",
                    seq=seq,
                    batch=Batch(observations=tuple(observations), spans=tuple(spans)),
                    join_skew_ns=5 * 10**9,
                )
                seq = stored.next_seq
                assert stored.traces == len(stored.joins)
                made.update(_seen(j) for j in stored.joins)
            assert made == _in_memory(batches), f"trace {net}"
            joined += len(made)
    assert joined >= 30, "the traces exercise joins"


# ----------------------------------------------------------------- two gateways, a restart


def _check_join(url: str, run: str) -> None:
    """One trace join in the database, in ``run``, read back by ``otel-bridge graph --db`` for
    the task (both gateways' runs) and by the reader for ``run`` alone and for the child's host's
    part of it (not the parent's), with both spans' support."""
    parent, child = (
        node_observation(received(HOST_A, PARENT), 1),
        node_observation(received(HOST_B, CHILD), 2),
    )
    assert _rows(url, JOINS) == [(run, JOIN_ID)]
    shown = cli("graph", "--db", url, "--task", "fleet", "--json")  # both gateways' runs
    assert shown.returncode == 0, shown.stderr
    with connect(url) as conn:
        alone = read_graph(conn, Selector(run=run))
        child_host = read_graph(conn, Selector(run=run, host=HOST_B))  # the join's subject's
        assert _trace_edges(read_graph(conn, Selector(task="fleet", host=HOST_A))) == []
    for doc in (json.loads(shown.stdout), alone, child_host):
        (edge,) = _trace_edges(doc)
        assert (edge["source"], edge["target"]) == (child.subject.id, parent.subject.id)
        assert edge["support"] == [JOIN_ID]
        assert edge["derived_support"] == sorted([child.id, parent.id])
        assert (edge["method"], edge["identity_exact"], edge["causal"], edge["inferred"]) == (
            "w3c_trace_context",
            True,
            False,
            False,
        )
    with connect(url) as conn:
        counts = status(conn)
    assert (counts["span_ends"], counts["traces_joined"]) == (2, 1)


@pytest.mark.parametrize("parent_first", [True, False], ids=["parent-first", "child-first"])
def test_two_gateways_each_with_one_span_join_once_with_both_supports(
    pg_url: str, parent_first: bool
) -> None:
    """Host A's parent span reaches one gateway, host B's child span the other (two runs of
    one database), in either order: neither gateway's memory can join them; the store makes
    the join once, in the run of the gateway whose batch completed it."""
    telemetry = Telemetry()
    one, two = Gateway(pg_url, "gateway-1"), Gateway(pg_url, "gateway-2", telemetry)
    first, second = (PARENT, CHILD) if parent_first else (CHILD, PARENT)
    try:
        one.receive(agent_ships(HOST_A if parent_first else HOST_B, first))
        two.receive(agent_ships(HOST_B if parent_first else HOST_A, second))
    finally:
        one.stop()
        two.stop()
    assert telemetry.total("traces_joined", kind="exporter") == 1
    assert telemetry.total("traces_joined", kind="processor") == 0  # not in memory
    _check_join(pg_url, "gateway-2")


def test_a_gateway_restarted_between_the_two_spans_joins_them_once(pg_url: str) -> None:
    """One gateway stores the child span, stops, starts again (resuming its run, its memory
    empty) and stores the parent: one join; the agent resending both adds nothing."""
    first = Gateway(pg_url, "gateway-1")
    first.receive(agent_ships(HOST_B, CHILD))
    first.stop()
    again = Gateway(pg_url, "gateway-1")
    try:
        again.receive(agent_ships(HOST_A, PARENT))
        fresh = Gateway(pg_url, "gateway-2")  # the resends reach another gateway
        fresh.receive(agent_ships(HOST_B, CHILD))
        fresh.receive(agent_ships(HOST_A, PARENT))
        fresh.stop()
    finally:
        again.stop()
    _check_join(pg_url, "gateway-1")


def test_a_join_made_in_memory_and_in_the_store_is_stored_once(pg_url: str) -> None:
    """A gateway that receives both spans joins them in memory too; its exporter leaves that
    copy to the store, which makes the same join (same id, same observation): one row, one
    edge of evidence count 1."""
    telemetry = Telemetry()
    gateway = Gateway(pg_url, "gateway-1", telemetry)
    try:
        gateway.receive(agent_ships(HOST_A, PARENT))
        gateway.receive(agent_ships(HOST_B, CHILD))
    finally:
        gateway.stop()
    assert telemetry.total("traces_joined", kind="processor") == 1
    assert telemetry.total("memory_joins_left_to_store", kind="exporter") == 1
    assert telemetry.total("traces_joined", kind="exporter") == 1
    with connect(pg_url) as conn:
        (edge,) = _trace_edges(read_graph(conn, Selector(run="gateway-1")))
    assert edge["evidence_count"] == 1
    _check_join(pg_url, "gateway-1")


def test_a_parent_on_the_same_host_or_never_stored_gives_no_join(pg_url: str) -> None:
    """Host A ships a parent and its child (one host: not a cross-host join) and host B a span
    whose parent id names no stored span of the trace: nothing joined, in the store or in the
    gateway's memory."""
    telemetry = Telemetry()
    one, two = Gateway(pg_url, "gateway-1", telemetry), Gateway(pg_url, "gateway-2", telemetry)
    try:
        one.receive(agent_ships(HOST_A, PARENT))
        two.receive(agent_ships(HOST_A, CHILD))
        two.receive(agent_ships(HOST_B, span("server", 3, 77, "server.orphan")))
        one.receive(agent_ships(HOST_C, span("other", 4, 1, "other.call", trace=bytes(16))))
    finally:
        one.stop()
        two.stop()
    assert _rows(pg_url, JOINS) == []
    assert telemetry.total("traces_joined", kind="processor") == 0
    assert telemetry.total("traces_joined", kind="exporter") == 0
    with connect(pg_url) as conn:
        assert _trace_edges(read_graph(conn, Selector(task="fleet"))) == []


def test_two_gateways_storing_both_spans_at_once_join_every_trace_once(pg_url: str) -> None:
    """Two gateways store the parent and child spans of 30 traces at the same time, in batches
    of three traces whose order is opposite in the two (each has the parent of half the traces
    and the child of the other half), each batch with one end of a connection too (the two kinds
    of lock in one transaction). The lock per trace makes the second transaction see the first's
    span, and one lock order keeps the two from deadlocking: 30 joins, none twice, none
    refused."""
    pieces: tuple[list[Batch], list[Batch]] = ([], [])
    for i in range(30):
        trace = bytes([7, i]) * 8
        pair = (
            received(HOST_A, span("client", 1000 + i, 0, "client.call", trace=trace)),
            received(HOST_B, span("server", 2000 + i, 1000 + i, "server.handle", trace=trace)),
        )
        pieces[0].append(pair[i % 2])
        pieces[1].append(pair[1 - i % 2])
    pieces[1].reverse()
    telemetry = Telemetry()
    gateways = [Gateway(pg_url, f"gateway-{n}", telemetry) for n in (1, 2)]

    def store(n: int) -> None:
        for k in range(0, len(pieces[n]), 3):
            chunk = pieces[n][k : k + 3]
            ends = ((f"10.1.{k}.1", 40000 + k), (f"10.2.{k}.1", 443))
            end = connect_end(pid=100, local=ends[0], peer=ends[1])
            if n == 1:
                end = accept(pid=200, peer=ends[0], local=ends[1], t=T0 + S)
            gateways[n].exporter.consume(
                Batch(
                    observations=(end, *(o for b in chunk for o in b.observations)),
                    spans=tuple(s for b in chunk for s in b.spans),
                )
            )

    try:
        at_once(store)
    finally:
        for gateway in gateways:
            gateway.stop()
    joins = _rows(pg_url, JOINS)
    assert len(joins) == len({j for _, j in joins}) == 30
    assert telemetry.total("traces_joined", kind="exporter") == 30
    assert telemetry.total("connections_joined", kind="exporter") == 10


def test_retention_forgets_waiting_spans_and_keeps_joined_children(pg_url: str) -> None:
    """Retention deletes the span rows older than its cutoff that no join used as a child (a
    span still waiting for its parent, a parent), keeps the joined children, so the agents
    resending both sides to another gateway after it makes no second join."""
    gateway = Gateway(pg_url, "gateway-1")
    try:
        gateway.receive(agent_ships(HOST_A, PARENT))
        gateway.receive(agent_ships(HOST_B, CHILD))
        gateway.receive(agent_ships(HOST_B, span("server", 5, 6, "server.waiting")))
    finally:
        gateway.stop()
    with connect(pg_url) as conn:
        drop_partitions_before(conn, datetime(2031, 1, 1, tzinfo=UTC))  # after every span
    assert _rows(pg_url, "SELECT span_id, joined_in FROM ob_span_ends") == [
        (f"{2:016x}", "gateway-1")
    ]
    again = Gateway(pg_url, "gateway-2")
    try:
        again.receive(agent_ships(HOST_B, CHILD))
        again.receive(agent_ships(HOST_A, PARENT))
    finally:
        again.stop()
    assert _rows(pg_url, "SELECT count(*) FROM ob_observations WHERE run_id = 'gateway-2'") != [
        (0,)
    ]
    assert _rows(pg_url, "SELECT count(joined_in) FROM ob_span_ends") == [(1,)]
    assert _rows(pg_url, JOINS) == []  # the join's own row went with its partition


def test_a_child_span_without_a_time_is_joined_too(pg_url: str) -> None:
    """A span whose start time is 0 (valid OTLP) is stored at its ingest time; its join, whose
    time is the child's, goes to the partition of the batch that completed it."""
    child = msgspec.structs.replace(CHILD, start_time_unix_nano=0)
    one, two = Gateway(pg_url, "gateway-1"), Gateway(pg_url, "gateway-2")
    try:
        two.receive(agent_ships(HOST_B, child))
        one.receive(agent_ships(HOST_A, PARENT))
    finally:
        one.stop()
        two.stop()
    assert node_observation(received(HOST_B, child), 2).time_unix_nano == 0
    assert _rows(pg_url, JOINS) == [("gateway-1", JOIN_ID)]
