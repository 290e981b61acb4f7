"""The PostgreSQL store against a real server: migrations, the graph read back equal to the
``graph`` exporter's document, idempotent re-sends, restart, retention, an unreachable database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from otel_bridge.component import Host
from otel_bridge.errors import RefusedError
from otel_bridge.exporters.graph import GraphExporter, GraphExporterConfig
from otel_bridge.exporters.postgres import Config, PostgresExporter
from otel_bridge.model import Batch
from otel_bridge.store import connect, migrate, status
from otel_bridge.store.reader import Selector, read_graph
from otel_bridge.store.schema import LATEST, MIGRATIONS
from store.store_support import T0, Server, batches, cli, free_port

psycopg = pytest.importorskip("psycopg", reason="needs the postgres extra")

RUN = {"runtime_reads": "folded"}
CRASHING_COLLECTOR = """
import sys, time
from store.store_support import batches
from otel_bridge.component import Host
from otel_bridge.exporters.postgres import Config, PostgresExporter
exporter = PostgresExporter(Config(endpoint=sys.argv[1], run_id="run-1", flush_interval=3600,
                                   run={"runtime_reads": "folded"}))
exporter.start(Host())
for batch in batches()[:2]:
    exporter.consume(batch)
print("stored", flush=True)
time.sleep(600)
"""


def _exporter(url: str, *, run_id: str = "run-1", **kw: Any) -> PostgresExporter:
    exporter = PostgresExporter(Config(endpoint=url, run_id=run_id, run=dict(RUN), **kw))
    exporter.start(Host())
    return exporter


def _graph_exporter(tmp_path: Path) -> GraphExporter:
    exporter = GraphExporter(
        GraphExporterConfig(output=str(tmp_path / "graph.json"), flush_interval=0, run=dict(RUN))
    )
    exporter.start(Host())
    return exporter


def _read(url: str, **selector: Any) -> dict[str, Any]:
    with connect(url) as conn:
        return read_graph(conn, Selector(**selector))


def _count(url: str, sql: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return int(row[0])


def test_migrate_from_empty_then_again_is_a_no_op(pg_url: str) -> None:
    """Migrating an empty database applies every step and records each version; running it
    again (API and CLI) applies nothing and leaves the version table as it was."""
    with connect(pg_url) as conn:
        assert status(conn)["schema_version"] == 0
        assert migrate(conn) == [m.version for m in MIGRATIONS]
        assert migrate(conn) == []
        info = status(conn)
    assert info["schema_version"] == info["latest"] == LATEST
    assert info["pending"] == []
    again = cli("db", "migrate", "--db", pg_url)
    assert again.returncode == 0, again.stderr
    assert "nothing applied" in again.stdout
    shown = cli("db", "status", "--db", pg_url)
    assert json.loads(shown.stdout)["schema_version"] == LATEST
    assert _count(pg_url, "SELECT count(*) FROM ob_schema_version") == len(MIGRATIONS)


def test_graph_read_back_equals_the_graph_exporter_document(pg_url: str, tmp_path: Path) -> None:
    """The same batches through the graph exporter and the postgres exporter: the graph read
    back from the database (rows of one run) equals graph.json, runtime reads folded, facts
    merged per field, derived support and coverage kept; a replay read (time range) too."""
    graph = _graph_exporter(tmp_path)
    store = _exporter(pg_url, flush_interval=0)
    for batch in batches():
        graph.consume(batch)
        store.consume(batch)
    graph.shutdown()
    store.shutdown()
    expected = json.loads((tmp_path / "graph.json").read_text())
    assert any(n["kind"] == "runtime_reads" for n in expected["nodes"])  # the fold ran
    assert expected["summary"]["coverage_total"] == 3
    assert _read(pg_url, run="run-1") == expected
    assert _read(pg_url, run="run-1", since_ns=0) == expected  # the replay path
    shown = cli("graph", "--db", pg_url, "--run", "run-1", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == expected
    ranged = cli(
        "graph", "--db", pg_url, "--run", "run-1", "--since", "2020-01-01T00:00:00Z", "--json"
    )
    assert json.loads(ranged.stdout) == expected
    # until T0 + 50 ns: the three process observations and the spawn, not the file events
    early = cli("graph", "--db", pg_url, "--run", "run-1", "--until", str(T0 + 50), "--json")
    assert early.returncode == 0, early.stderr
    assert json.loads(early.stdout)["summary"]["observations"] == 4
    # Evidence fields are columns: the derived edge is queryable without JSON.
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            "SELECT grade, inferred, method, derived_support FROM ob_edges "
            "WHERE relation = 'correlated_with_process'"
        ).fetchone()
    expected_edge = next(e for e in expected["edges"] if e["relation"] == "correlated_with_process")
    assert row == (expected_edge["grade"], "true", "time-window", ["obs-1", "obs-2"])


def test_resending_after_a_crash_changes_nothing(pg_url: str, tmp_path: Path) -> None:
    """A collector killed after storing two batches restarts (same run id) and its sender
    re-sends everything: no record is stored twice, and the graph read back still equals the
    graph of the stream sent once."""
    graph = _graph_exporter(tmp_path)
    stream = batches()
    for batch in stream:
        graph.consume(batch)
    graph.shutdown()
    # A collector process stores the first two batches, then is killed (-9: no shutdown, no
    # final upsert of the graph rows).
    child = subprocess.Popen(
        [sys.executable, "-c", CRASHING_COLLECTOR, pg_url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "stored"
    child.kill()
    child.wait()
    child.stdout.close()
    stored = _count(pg_url, "SELECT count(*) FROM ob_observations")
    second = _exporter(pg_url, flush_interval=3600)  # upserts only at shutdown
    for batch in stream:  # everything again
        second.consume(batch)
    second.consume(stream[2])  # and the last batch twice
    second.shutdown()
    total = sum(len(b.observations) for b in stream)
    assert stored == total - len(stream[2].observations)
    assert _count(pg_url, "SELECT count(*) FROM ob_observations") == total
    assert _count(pg_url, "SELECT count(*) FROM ob_coverage") == 3
    assert _read(pg_url, run="run-1") == json.loads((tmp_path / "graph.json").read_text())


def test_retention_drops_an_old_partition(pg_url: str) -> None:
    """Observations from 40 days ago land in their own partition; `db prune --older-than 30d`
    drops it and keeps today's, and the exporter's retention setting does the same."""
    old = datetime.now(UTC) - timedelta(days=40)
    base = int(old.timestamp()) * 1_000_000_000
    recent = int(datetime.now(UTC).timestamp()) * 1_000_000_000
    stream = batches(n_files=4)
    shifted = [_shift(stream[0], base), _shift(stream[1], recent)]
    store = _exporter(pg_url, flush_interval=0)
    for batch in shifted:
        store.consume(batch)
    store.shutdown()
    before = _count(pg_url, "SELECT count(*) FROM ob_partitions WHERE parent = 'ob_observations'")
    assert before == 2
    pruned = cli("db", "prune", "--db", pg_url, "--older-than", "30d")
    assert pruned.returncode == 0, pruned.stderr
    # the old observations' partition and that of the block holding their records
    assert "dropped 2 partitions" in pruned.stdout
    assert "ob_observations_p" in pruned.stdout
    assert "ob_blocks_p" in pruned.stdout
    assert _count(pg_url, "SELECT count(*) FROM ob_observations") == len(shifted[1].observations)
    with connect(pg_url) as conn:  # the kept records still read back from their block
        kept = read_graph(conn, Selector(run="run-1", since_ns=0))
    assert kept["summary"]["observations"] == len(shifted[1].observations)
    # the exporter's own retention setting: old records of another run, then a collector
    # configured with a 1-day retention drops their partition (it checks at start, then
    # every minute)
    store = _exporter(pg_url, run_id="run-2", flush_interval=0)
    store.consume(_shift(batches(n_files=2, prefix="x")[0], base))
    store.shutdown()
    assert _count(pg_url, "SELECT count(*) FROM ob_observations WHERE run_id = 'run-2'") == 3
    store = _exporter(pg_url, run_id="run-3", retention=86400.0, flush_interval=0.05)
    try:
        wait_until(
            lambda: (
                _count(pg_url, "SELECT count(*) FROM ob_observations WHERE run_id = 'run-2'") == 0
            ),
            timeout=30,
        )
    finally:
        store.shutdown()


def _shift(batch: Batch, start: int) -> Batch:
    import msgspec

    obs = tuple(
        msgspec.structs.replace(o, time_unix_nano=start + i, end_time_unix_nano=0)
        for i, o in enumerate(batch.observations)
    )
    return Batch(observations=obs)


def test_unreachable_database_refuses_then_accepts(
    pg_server: Server, pg_url: str, tmp_path: Path
) -> None:
    """With the server down a batch is refused (RefusedError, retryable: the sender keeps it)
    with a message naming the database; once it is back the same batch is accepted and the
    graph equals the stream's."""
    graph = _graph_exporter(tmp_path)
    stream = batches()
    for batch in stream:
        graph.consume(batch)
    graph.shutdown()
    store = _exporter(pg_url, flush_interval=0)
    store.consume(stream[0])
    pg_server.stop()
    try:
        with pytest.raises(RefusedError, match=r"127\.0\.0\.1"):
            store.consume(stream[1])
    finally:
        pg_server.start()
    store.consume(stream[1])  # the sender's retry
    store.consume(stream[2])
    store.shutdown()
    assert _read(pg_url, run="run-1") == json.loads((tmp_path / "graph.json").read_text())


def test_refused_connection_is_a_clear_error(tmp_path: Path) -> None:
    """Nothing listens: starting works (the database may come later), a batch is refused with
    the redacted URL, and `otel-bridge graph --db` fails with one line, exit 2."""
    url = f"postgresql://otel_bridge@127.0.0.1:{free_port()}/x"
    store = _exporter(url, connect_timeout=2)
    with pytest.raises(RefusedError, match=r"cannot connect to postgresql://otel_bridge@127"):
        store.consume(batches()[0])
    store.shutdown()
    shown = cli("graph", "--db", url, "--run", "r")
    assert shown.returncode == 2
    assert "cannot connect" in shown.stderr


def test_same_record_id_on_two_hosts_is_two_records(pg_url: str) -> None:
    """OS record ids are unique per host only: the same observation id from two hosts in one
    run is two records (and two nodes), while the same one re-sent from one host is one."""
    import msgspec

    first = batches()[0].observations[0]
    facts = first.subject.facts
    assert facts is not None
    other_host = msgspec.structs.replace(
        first,
        subject=msgspec.structs.replace(
            first.subject,
            id=first.subject.id.replace("host-a", "host-b"),
            facts=msgspec.structs.replace(facts, host_id="host-b"),
        ),
    )
    store = _exporter(pg_url, flush_interval=0)
    store.consume(Batch(observations=(first, other_host, first)))
    store.consume(Batch(observations=(other_host,)))
    store.shutdown()
    assert _count(pg_url, "SELECT count(*) FROM ob_observations") == 2
    assert _count(pg_url, "SELECT count(DISTINCT host_id) FROM ob_observations") == 2
    assert len(_read(pg_url, run="run-1")["nodes"]) == 2


def test_rows_of_touched_elements_keep_a_copy_equal_to_the_snapshot() -> None:
    """The exporter's incremental upsert in miniature: a copy updated after every batch with
    only the rows of the nodes and edges that batch touched equals the whole snapshot."""
    from otel_bridge.graph import GraphAccumulator

    acc = GraphAccumulator(retain_support=True, run={"runtime_reads": "keep"})
    nodes: dict[str, Any] = {}
    edges: dict[str, Any] = {}
    for batch in batches():
        acc.apply_many(batch.observations)
        touched = {o.subject.id for o in batch.observations}
        touched |= {o.object.id for o in batch.observations if o.object is not None}
        pairs = {
            (o.subject.id, o.relation.value, o.object.id)
            for o in batch.observations
            if o.object is not None and o.relation is not None
        }
        got_nodes, got_edges = acc.rows(touched, pairs)
        assert len(got_nodes) == len(touched)
        assert len(got_edges) == len(pairs)
        nodes.update((n["id"], n) for n in got_nodes)
        edges.update((e["id"], e) for e in got_edges)
        doc = acc.to_dict()
        assert sorted(nodes.values(), key=lambda n: n["id"]) == doc["nodes"]
        assert {e["id"]: e for e in doc["edges"]} == edges
    assert acc.rows(["no-such-node"], [("a", "b", "c")]) == ([], [])


def test_a_version_1_database_upgrades_and_its_records_read_on(pg_url: str) -> None:
    """Observations stored by schema version 1 (each row its own compressed ``record``) are read
    after the upgrade to version 2 (blocks): a run begun on version 1 and continued on version 2
    reads back equal to the same batches stored on version 2 alone, from its rows and by
    replay, and its sequence numbers continue where version 1 left them."""
    import msgspec

    from otel_bridge import jsonl
    from otel_bridge.store import codec
    from otel_bridge.store.schema import VERSION_TABLE
    from otel_bridge.store.writer import OBSERVATIONS, StoreWriter, observation_row

    stream = batches()
    now = datetime.now(UTC)
    with connect(pg_url) as conn:
        conn.execute(VERSION_TABLE)
        conn.execute(MIGRATIONS[0].sql)
        conn.execute("INSERT INTO ob_schema_version (version, description) VALUES (1, 'v1')")
        conn.commit()
        writer = StoreWriter(conn, partition_interval=86400)
        writer.ensure_run("old", host_id="h1", service="", task="", run=dict(RUN))
        rows = [
            (
                *observation_row("old", i, o, "h1", now, block=0, pos=0)[:20],
                codec.pack(msgspec.msgpack.encode(jsonl.observation_to_dict(o))),
            )
            for i, o in enumerate(stream[0].observations)
        ]
        writer.ensure_partitions(OBSERVATIONS, (r[2] for r in rows))
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO ob_observations VALUES ({', '.join(['%s'] * 21)})", rows)
        conn.commit()
        assert migrate(conn) == list(range(2, LATEST + 1))
        next_seq = conn.execute("SELECT next_seq FROM ob_runs WHERE run_id = 'old'").fetchone()
    assert next_seq == (len(rows),)
    old = _exporter(pg_url, run_id="old", host_id="h1", flush_interval=0)  # resumes the run
    new = _exporter(pg_url, run_id="new", host_id="h1", flush_interval=0)
    for batch in stream[1:]:
        old.consume(batch)
    for batch in stream:
        new.consume(batch)
    old.shutdown()
    new.shutdown()
    with connect(pg_url) as conn:
        assert read_graph(conn, Selector(run="old")) == read_graph(conn, Selector(run="new"))
        replayed = read_graph(conn, Selector(run="old", since_ns=0))
        assert replayed == read_graph(conn, Selector(run="new", since_ns=0))
        seqs = conn.execute(
            "SELECT seq FROM ob_observations WHERE run_id = 'old' ORDER BY seq"
        ).fetchall()
    assert [s for (s,) in seqs] == list(range(len(seqs)))
