"""Writing to the store: raw records through COPY into time partitions, graph rows upserted.

:class:`StoreWriter` wraps one connection. Every batch is one transaction:

1. missing partitions for the batch's times are created (:meth:`StoreWriter.ensure_partitions`);
2. observations, spans and coverage records are COPYed into session-temporary staging tables,
   then ``INSERT ... SELECT ... ON CONFLICT DO NOTHING RETURNING`` moves them into the real
   tables: a record already stored (same run and record id) is skipped, and the ids returned
   are exactly the records that are new, which the caller applies to its graph;
3. changed graph rows are COPYed to staging and upserted (``ON CONFLICT DO UPDATE``).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from otel_bridge import jsonl
from otel_bridge.model import Batch, CoverageRecord, LogRecord, Observation, ProcessFacts, Span
from otel_bridge.store import codec
from otel_bridge.store.blocks import RECORD_COLUMNS, Blocks
from otel_bridge.store.records import decode_observation
from otel_bridge.store.records import encode as encode_record

if TYPE_CHECKING:
    import psycopg

    from otel_bridge.store.joins import Joined

OBSERVATIONS = "ob_observations"
SPANS = "ob_spans"
LOGS = "ob_logs"
BLOCKS = "ob_blocks"
PARTITIONED = (OBSERVATIONS, SPANS, LOGS, BLOCKS)
HOST_SCOPE = "otel_bridge.receivers.host"
"""The instrumentation scope of the host receiver's OS events (log records)."""

_OBS_COLUMNS = (
    "run_id, id, part_time, seq, time_ns, end_ns, host_id, channel, backend, record_id, "
    "relation, subject_id, subject_key, object_id, object_key, grade, causal, inferred, method, "
    "occurrence, block, pos"
)
_SPAN_COLUMNS = (
    "run_id, trace_id, span_id, part_time, seq, parent_span_id, name, service, start_ns, end_ns, "
    "block, pos"
)
_LOG_COLUMNS = "run_id, digest, part_time, seq, time_ns, host_id, os_event, event_name, block, pos"
_COV_COLUMNS = "run_id, digest, seq, time_ns, channel, backend, record_id, reason, detail"
NODE_COLUMNS = (
    "run_id",
    "id",
    "key",
    "kind",
    "label",
    "facts",
    "attrs",
    "channels",
    "backends",
    "first_seen",
    "last_seen",
    "logical_count",
    "evidence_count",
)
EDGE_COLUMNS = (
    "run_id",
    "source",
    "relation",
    "target",
    "id",
    "source_key",
    "target_key",
    "grade",
    "causal",
    "inferred",
    "identity_exact",
    "attribution",
    "method",
    "score",
    "channels",
    "backends",
    "support",
    "derived_support",
    "attrs",
    "first_seen",
    "last_seen",
    "logical_count",
    "evidence_count",
)
_TEXT, _INT8, _BOOL, _TIME, _JSON, _TEXTS = "text", "int8", "bool", "timestamptz", "jsonb", "text[]"
_TYPES: dict[str, tuple[str, ...]] = {
    "ob_stage_obs": (
        *(_TEXT, _TEXT, _TIME, _INT8, _INT8, _INT8),
        *(_TEXT,) * 9,
        *(_TEXT, _BOOL, _BOOL, _TEXT, _TEXT, _INT8, "int4"),
    ),
    "ob_stage_spans": (
        *(_TEXT, _TEXT, _TEXT, _TIME, _INT8, _TEXT, _TEXT, _TEXT, _INT8, _INT8, _INT8, "int4"),
    ),
    "ob_stage_logs": (_TEXT, _TEXT, _TIME, _INT8, _INT8, _TEXT, _BOOL, _TEXT, _INT8, "int4"),
    "ob_stage_cov": (_TEXT, _TEXT, _INT8, _INT8, *(_TEXT,) * 5),
    "ob_stage_nodes": (*(_TEXT,) * 9, *(_INT8,) * 4),
    "ob_stage_edges": (*(_TEXT,) * 13, "float8", *(_TEXT,) * 5, *(_INT8,) * 4),
}
"""The column types of every staging table's COPY (binary COPY: psycopg formats each row in C
once it knows them), in the order of its column list. The graph rows' arrays and jsonb are
staged as text formatted here (psycopg dumps those in Python) and cast by the upsert."""
_CASTS = {
    "facts": "jsonb",
    "attrs": "jsonb",
    "method": "jsonb",
    "channels": "text[]",
    "backends": "text[]",
    "attribution": "text[]",
    "support": "text[]",
    "derived_support": "text[]",
}
"""The graph columns staged as text, and their type."""
_STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS ob_stage_obs "
    "(LIKE ob_observations INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS ob_stage_spans "
    "(LIKE ob_spans INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS ob_stage_logs "
    "(LIKE ob_logs INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS ob_stage_cov "
    "(LIKE ob_coverage INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS ob_stage_nodes "
    "(LIKE ob_nodes INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
    "CREATE TEMP TABLE IF NOT EXISTS ob_stage_edges "
    "(LIKE ob_edges INCLUDING DEFAULTS) ON COMMIT DELETE ROWS",
    "ALTER TABLE ob_stage_nodes "
    + ", ".join(f"ALTER COLUMN {c} TYPE text" for c in _CASTS if c in NODE_COLUMNS),
    "ALTER TABLE ob_stage_edges "
    + ", ".join(f"ALTER COLUMN {c} TYPE text" for c in _CASTS if c in EDGE_COLUMNS),
)


def flag_text(flag: Any) -> str | None:
    """An aggregated flag (True, False, "mixed", None) as its column text."""
    if flag is None:
        return None
    if flag is True:
        return "true"
    if flag is False:
        return "false"
    return str(flag)


def part_time(time_ns: int, ingest: datetime) -> datetime:
    """The partition column: the record's time, or the ingest time when it has none (0)."""
    if time_ns <= 0:
        return ingest
    return datetime.fromtimestamp(time_ns / 1e9, UTC)


def _json(value: Any) -> Any:
    from psycopg.types.json import Jsonb  # noqa: PLC0415 - optional driver

    return None if value is None else Jsonb(value)


def observation_row(
    run_id: str, seq: int, o: Observation, host: str, now: datetime, *, block: int, pos: int
) -> tuple[Any, ...]:
    """The ``ob_observations`` row of ``o``, its record at ``pos`` in ``block``."""
    host_id = observation_host(o, host)
    ob = o.object
    ev = o.evidence
    return (
        run_id,
        o.id,
        part_time(o.time_unix_nano, now),
        seq,
        o.time_unix_nano,
        o.end_time_unix_nano,
        host_id,
        o.source.channel.value,
        o.source.backend,
        o.source.record_id,
        None if o.relation is None else o.relation.value,
        o.subject.id,
        o.subject.key,
        None if ob is None else ob.id,
        None if ob is None else ob.key,
        None if ev.grade is None else ev.grade.value,
        ev.causal,
        ev.inferred,
        ev.method,
        o.occurrence,
        block,
        pos,
    )


AGENT_HOST_ATTR = "otel_bridge.agent.host.id"
"""The attribute a gateway's ``logs_to_evidence`` stamps on every observation it accepts: the
host of the agent that shipped it (``otel_bridge/processors/crosshost/wire.py``)."""


def observation_host(o: Observation, host: str) -> str:
    """The host an observation belongs to: its subject process's host, else the host of the
    agent that shipped it to a gateway (``AGENT_HOST_ATTR``), else ``host`` (the writer's).
    Part of the key: OS record ids are only unique per host (every agent counts from 1)."""
    facts = o.subject.facts
    if isinstance(facts, ProcessFacts) and facts.host_id:
        return facts.host_id
    shipped = o.attrs.get(AGENT_HOST_ATTR)
    return shipped if isinstance(shipped, str) and shipped else host


def span_row(
    run_id: str, seq: int, span: Span, now: datetime, *, block: int, pos: int
) -> tuple[Any, ...]:
    """The ``ob_spans`` row of ``span``, its record at ``pos`` in ``block``."""
    service = span.resource.attributes.get("service.name", "")
    return (
        run_id,
        span.trace_id.hex(),
        span.span_id.hex(),
        part_time(span.start_time_unix_nano, now),
        seq,
        span.parent_span_id.hex(),
        span.name,
        service if isinstance(service, str) else str(service),
        span.start_time_unix_nano,
        span.end_time_unix_nano,
        block,
        pos,
    )


def log_rows(
    run_id: str,
    seq: int,
    logs: Sequence[LogRecord],
    host: str,
    now: datetime,
    *,
    block: tuple[int, int, list[bytes]],
) -> list[tuple[Any, ...]]:
    """``ob_logs`` rows; keyed like coverage records (content digest and ordinal), since a log
    record has no id. OS events (the host receiver's scope) are flagged ``os_event``. A record's
    host is its resource's ``host.id`` (an agent's, passed through a gateway), else ``host``.
    ``block``: the block id, the first record's position in it, and the list each record
    (msgpack of its OTLP/JSON request) is appended to."""
    seen: dict[bytes, int] = {}
    rows = []
    block_id, first, stored = block
    for i, r in enumerate(logs):
        encoded = encode_record(r)
        stored.append(encoded)
        n = seen.get(encoded, 0)
        seen[encoded] = n + 1
        digest = hashlib.blake2b(encoded + n.to_bytes(4, "little"), digest_size=16).hexdigest()
        rows.append(
            (
                run_id,
                digest,
                part_time(r.time_unix_nano or r.observed_time_unix_nano, now),
                seq + i,
                r.time_unix_nano,
                _resource_host(r, host),
                r.scope.name == HOST_SCOPE,
                r.event_name,
                block_id,
                first + i,
            )
        )
    return rows


def _resource_host(record: LogRecord, host: str) -> str:
    value = record.resource.attributes.get("host.id")
    return value if isinstance(value, str) and value else host


def coverage_rows(
    run_id: str, seq: int, records: Sequence[CoverageRecord]
) -> list[tuple[Any, ...]]:
    """``ob_coverage`` rows: a coverage record has no id, so its key is the digest of its
    content and of how many equal records came before it in the batch (a re-sent batch gives
    the same keys)."""
    seen: dict[bytes, int] = {}
    rows = []
    for i, c in enumerate(records):
        encoded = msgspec.msgpack.encode(jsonl.coverage_to_dict(c))
        n = seen.get(encoded, 0)
        seen[encoded] = n + 1
        digest = hashlib.blake2b(encoded + n.to_bytes(4, "little"), digest_size=16).hexdigest()
        source = c.source
        rows.append(
            (
                run_id,
                digest,
                seq + i,
                c.time_unix_nano,
                source.channel.value,
                source.backend,
                source.record_id,
                c.reason,
                c.detail,
            )
        )
    return rows


class Ingested(NamedTuple):
    """What :meth:`StoreWriter.ingest` stored."""

    observations: list[Observation]
    """The batch's observations that were new for the run, in order."""
    coverage: list[CoverageRecord]
    """The batch's coverage records that were new."""
    joins: list[Observation]
    """The cross-host joins the store made (stored after the batch's records)."""
    ambiguous: int
    """Connection ends whose join was ambiguous (no join)."""
    traces: int
    """How many of ``joins`` are trace joins (the last ones)."""
    next_seq: int
    """The run's next sequence number after this batch and its joins."""


def _fresh(
    obs: Sequence[Observation], rows: list[tuple[Any, ...]], new_ids: set[str]
) -> list[Observation]:
    """The observations whose rows were inserted (each id once, in order)."""
    fresh: list[Observation] = []
    for o, row in zip(obs, rows, strict=True):
        key = f"{row[6]}\x1f{o.id}"
        if key in new_ids:
            new_ids.discard(key)
            fresh.append(o)
    return fresh


def batch_size(batch: Batch) -> int:
    """How many sequence numbers :meth:`StoreWriter.ingest` gives ``batch``'s records."""
    return len(batch.observations) + len(batch.coverage) + len(batch.spans) + len(batch.logs)


class StoreWriter:
    """Writes one collector's records and graph rows through one connection."""

    def __init__(self, conn: psycopg.Connection[Any], *, partition_interval: int) -> None:
        self.conn = conn
        self.interval = max(60, int(partition_interval))
        self._known: set[tuple[str, int]] = set()
        self._run_hosts: set[tuple[str, str]] = set()
        self._staged = False

    def _stage(self) -> None:
        if not self._staged:
            with self.conn.transaction():
                for sql in _STAGING:
                    self.conn.execute(sql)
            self._staged = True

    def ensure_host(self, host_id: str) -> None:
        """The host row (``last_seen`` moved to now)."""
        self.conn.execute(
            "INSERT INTO ob_hosts (host_id) VALUES (%s) ON CONFLICT (host_id) "
            "DO UPDATE SET last_seen = now()",
            (host_id,),
        )

    def ensure_run(
        self, run_id: str, *, host_id: str, service: str, task: str, run: dict[str, Any]
    ) -> None:
        """The run row (created, or its metadata refreshed) and its host."""
        with self.conn.transaction():
            self.ensure_host(host_id)
            self.conn.execute(
                "INSERT INTO ob_runs (run_id, host_id, service, task, run) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_id) DO UPDATE SET "
                "service = CASE WHEN EXCLUDED.service = '' THEN ob_runs.service "
                "ELSE EXCLUDED.service END, "
                "task = CASE WHEN EXCLUDED.task = '' THEN ob_runs.task ELSE EXCLUDED.task END, "
                "run = EXCLUDED.run, updated_at = now()",
                (run_id, host_id, service, task, _json(run)),
            )
            self.conn.execute(
                "INSERT INTO ob_run_hosts VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (run_id, host_id),
            )

    def ensure_partitions(self, parent: str, times: Iterable[datetime]) -> None:
        """Create the partitions of ``parent`` that hold ``times`` (idempotent, race-safe)."""
        starts = {int(t.timestamp()) // self.interval * self.interval for t in times}
        for start in sorted(starts):
            if (parent, start) in self._known:
                continue
            name = f"{parent}_p{datetime.fromtimestamp(start, UTC):%Y%m%d%H%M}"
            lower = datetime.fromtimestamp(start, UTC)
            upper = datetime.fromtimestamp(start + self.interval, UTC)
            with self.conn.transaction():
                self.conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
                exists = self.conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()
                if exists is None or exists[0] is None:
                    self.conn.execute(
                        f"CREATE TABLE {name} PARTITION OF {parent} FOR VALUES "  # derived names
                        f"FROM ('{lower.isoformat()}') TO ('{upper.isoformat()}')"
                    )
                    self.conn.execute(
                        "INSERT INTO ob_partitions VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                        (name, parent, lower, upper),
                    )
            self._known.add((parent, start))

    def ingest(
        self, run_id: str, *, host_id: str, seq: int, batch: Batch, join_skew_ns: int | None = None
    ) -> Ingested:
        """Store ``batch`` in one transaction; returns the observations and coverage records that
        were new (a record already stored for the run is skipped, in order, once). Its records
        take the sequence numbers from ``seq`` on (``batch_size(batch)`` of them); their raw
        records go into one compressed block (``ob_blocks``), stored when any row is new.

        With ``join_skew_ns``, the new observations' connection ends are joined across hosts in
        the same transaction (:mod:`otel_bridge.store.joins`); the joins made are stored after
        the batch's records (sequence numbers after them, one more block) and returned."""
        self._stage()
        now = datetime.now(UTC)
        block = secrets.randbits(63)
        obs, cov, spans = batch.observations, batch.coverage, batch.spans
        records = [encode_record(o) for o in obs]
        obs_rows = [
            observation_row(run_id, seq + i, o, host_id, now, block=block, pos=i)
            for i, o in enumerate(obs)
        ]
        seq += len(obs)
        cov_rows = coverage_rows(run_id, seq, cov)
        seq += len(cov)
        records.extend(encode_record(s) for s in spans)
        span_rows = [
            span_row(run_id, seq + i, s, now, block=block, pos=len(obs) + i)
            for i, s in enumerate(spans)
        ]
        seq += len(spans)
        logs = log_rows(run_id, seq, batch.logs, host_id, now, block=(block, len(records), records))
        times = [r[2] for r in obs_rows] + [r[3] for r in span_rows] + [r[2] for r in logs]
        block_time = max(times, default=now)  # a block outlives every row naming it (retention)
        self.ensure_partitions(OBSERVATIONS, (r[2] for r in obs_rows))
        self.ensure_partitions(SPANS, (r[3] for r in span_rows))
        self.ensure_partitions(LOGS, (r[2] for r in logs))
        self.ensure_partitions(BLOCKS, (block_time,))
        if join_skew_ns is not None:  # a join's time is its earlier end's: within the skew
            self.ensure_partitions(
                OBSERVATIONS, (part_time(r[4] - join_skew_ns, now) for r in obs_rows)
            )
            # a trace join's is its child span's, whose row made its partition, unless it had
            # no time (0): then the join's partition time is now
            self.ensure_partitions(OBSERVATIONS, (now,))
        joined = None
        with self.conn.transaction():
            hosts = {str(r[6]) for r in obs_rows} | {str(r[5]) for r in logs}
            self._ensure_run_hosts(run_id, hosts)
            new_ids = self._copy_insert(
                "ob_stage_obs", OBSERVATIONS, _OBS_COLUMNS, obs_rows, "host_id || chr(31) || id"
            )
            new_raw = self._copy_insert("ob_stage_spans", SPANS, _SPAN_COLUMNS, span_rows, "seq")
            new_raw |= self._copy_insert("ob_stage_logs", LOGS, _LOG_COLUMNS, logs, "seq")
            new_cov = self._copy_insert(
                "ob_stage_cov", "ob_coverage", _COV_COLUMNS, cov_rows, "digest"
            )
            if new_ids or new_raw:
                self.conn.execute(
                    "INSERT INTO ob_blocks (run_id, block, part_time, records, data) "
                    "VALUES (%s, %s, %s, %s, %s)",
                    (run_id, block, block_time, len(records), codec.pack_block(records)),
                )
            fresh = _fresh(obs, obs_rows, new_ids)
            seq += len(logs)
            if join_skew_ns is not None:
                joined = self._join(
                    (run_id, host_id), seq, fresh, join_skew_ns, (now, block_time), spans=spans
                )
                seq += joined.numbered
                hosts.update(observation_host(j, host_id) for j in joined.joins)
            self.conn.execute(
                "UPDATE ob_runs SET next_seq = greatest(next_seq, %s) WHERE run_id = %s",
                (seq, run_id),
            )
        self._run_hosts.update((run_id, h) for h in hosts)  # committed
        fresh_cov = [c for c, row in zip(cov, cov_rows, strict=True) if row[1] in new_cov]
        if joined is None:
            return Ingested(fresh, fresh_cov, [], 0, 0, seq)
        traces = sum(1 for j in joined.joins if j.evidence.method == "w3c_trace_context")
        return Ingested(fresh, fresh_cov, joined.joins, joined.ambiguous, traces, seq)

    def _join(
        self,
        run: tuple[str, str],
        seq: int,
        fresh: list[Observation],
        skew_ns: int,
        times: tuple[datetime, datetime],
        *,
        spans: Sequence[Span] = (),
    ) -> Joined:
        """The store's cross-host join of ``fresh``'s connection ends; the joins it made are
        stored in ``run_id`` from sequence number ``seq`` on, in a block of their own whose
        partition time is the batch block's (``times``: now, that time; a join is no later
        than the end that completed it). ``run``: the run and the writer's host. ``spans``: the
        batch's spans, whose parent links the trace join stores."""
        from otel_bridge.store.joins import join_ends  # noqa: PLC0415 - loads the rule

        run_id, host_id = run
        joined = join_ends(self.conn, run_id, fresh, skew_ns, spans)
        if not joined.joins:
            return joined
        block = secrets.randbits(63)
        rows = [
            observation_row(run_id, seq + i, j, host_id, times[0], block=block, pos=i)
            for i, j in enumerate(joined.joins)
        ]
        # the join's hosts are its ends' (stored, so their host rows exist): link them to the
        # run without touching ob_hosts rows another writer may hold (no lock after the 4-tuples')
        for host in sorted({str(r[6]) for r in rows}):
            if (run_id, host) not in self._run_hosts:
                self.conn.execute(
                    "INSERT INTO ob_hosts (host_id) VALUES (%s) ON CONFLICT DO NOTHING", (host,)
                )
                self.conn.execute(
                    "INSERT INTO ob_run_hosts VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    (run_id, host),
                )
        self.conn.execute("DELETE FROM ob_stage_obs")  # the batch's rows, already moved
        new_ids = self._copy_insert(
            "ob_stage_obs", OBSERVATIONS, _OBS_COLUMNS, rows, "host_id || chr(31) || id"
        )
        kept = _fresh(joined.joins, rows, new_ids)  # a join the run already held: not again
        joined.joins, joined.numbered = kept, len(rows)
        block_time = max(times[1], *(r[2] for r in rows))
        records = [encode_record(j) for j in joined.joins]
        self.conn.execute(
            "INSERT INTO ob_blocks (run_id, block, part_time, records, data) "
            "VALUES (%s, %s, %s, %s, %s)",
            (run_id, block, block_time, len(records), codec.pack_block(records)),
        )
        return joined

    def _ensure_run_hosts(self, run_id: str, hosts: set[str]) -> None:
        """Host rows and run-host links for the hosts a batch's observations belong to (a
        gateway's run spans every agent's host); each pair is written once per writer."""
        for host in sorted(hosts):
            if (run_id, host) not in self._run_hosts:
                self.ensure_host(host)
                self.conn.execute(
                    "INSERT INTO ob_run_hosts VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    (run_id, host),
                )

    def _copy_insert(
        self,
        stage: str,
        table: str,
        columns: str,
        rows: list[tuple[Any, ...]],
        returning: str | None,
    ) -> set[str]:
        if not rows:
            return set()
        with self.conn.cursor() as cur:
            with cur.copy(f"COPY {stage} ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(_TYPES[stage])
                for row in rows:
                    copy.write_row(row)
            tail = f" RETURNING {returning}" if returning else ""
            cur.execute(
                f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {stage} "
                f"ON CONFLICT DO NOTHING{tail}"
            )
            return {str(r[0]) for r in cur.fetchall()} if returning else set()

    def upsert(
        self,
        run_id: str,
        nodes: Sequence[dict[str, Any]],
        edges: Sequence[dict[str, Any]],
        keys: dict[str, str],
    ) -> None:
        """Upsert changed graph rows of ``run_id`` (``keys``: node id -> stable key, for the
        edges' ``source_key``/``target_key``)."""
        self._stage()
        node_rows = [_node_row(run_id, n) for n in nodes]
        edge_rows = [_edge_row(run_id, e, keys) for e in edges]
        with self.conn.transaction():
            self._upsert("ob_stage_nodes", "ob_nodes", NODE_COLUMNS, ("run_id", "id"), node_rows)
            self._upsert(
                "ob_stage_edges",
                "ob_edges",
                EDGE_COLUMNS,
                ("run_id", "source", "relation", "target"),
                edge_rows,
            )

    def _upsert(
        self,
        stage: str,
        table: str,
        columns: tuple[str, ...],
        key: tuple[str, ...],
        rows: list[tuple[Any, ...]],
    ) -> None:
        if not rows:
            return
        cols = ", ".join(columns)
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in key)
        with self.conn.cursor() as cur:
            with cur.copy(f"COPY {stage} ({cols}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(_TYPES[stage])
                for row in rows:
                    copy.write_row(row)
            select = ", ".join(f"{c}::{_CASTS[c]}" if c in _CASTS else c for c in columns)
            cur.execute(
                f"INSERT INTO {table} ({cols}) SELECT {select} FROM {stage} "
                f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {sets}"
            )

    def update_run(
        self,
        run_id: str,
        *,
        observations: int,
        coverage: dict[str, int],
        coverage_by_channel: dict[str, int],
        first: int | None,
        last: int | None,
    ) -> None:
        """The run's totals (what the graph's summary needs besides its rows)."""
        self.conn.execute(
            "UPDATE ob_runs SET observations = %s, coverage = %s, coverage_by_channel = %s, "
            "first_seen = %s, last_seen = %s, updated_at = now() WHERE run_id = %s",
            (observations, _json(coverage), _json(coverage_by_channel), first, last, run_id),
        )
        self.conn.commit()

    def max_seq(self, run_id: str) -> int:
        """The next sequence number of ``run_id`` (one past every stored record's), kept in
        ``ob_runs.next_seq`` by every batch's transaction."""
        row = self.conn.execute(
            "SELECT next_seq FROM ob_runs WHERE run_id = %s", (run_id,)
        ).fetchone()
        self.conn.commit()
        return 0 if row is None else int(row[0])

    def drop_before(self, cutoff: datetime) -> list[str]:
        """Drop every partition whose upper bound is at or before ``cutoff``; their names."""
        return drop_partitions_before(self.conn, cutoff)


def drop_partitions_before(conn: psycopg.Connection[Any], cutoff: datetime) -> list[str]:
    """Retention: drop the partitions entirely older than ``cutoff``; returns their names."""
    dropped: list[str] = []
    with conn.transaction():
        rows = conn.execute(
            "SELECT name FROM ob_partitions WHERE upper_bound <= %s ORDER BY name", (cutoff,)
        ).fetchall()
        for (name,) in rows:
            conn.execute(f'DROP TABLE IF EXISTS "{name}"')
            conn.execute("DELETE FROM ob_partitions WHERE name = %s", (name,))
            dropped.append(str(name))
        # connection ends waiting for their other side: kept as long as the raw records
        conn.execute(
            "DELETE FROM ob_conn_ends WHERE time_ns < %s", (int(cutoff.timestamp() * 1e9),)
        )
        conn.execute(  # unjoined spans (docs/store.md); a joined child stays, once
            "DELETE FROM ob_span_ends WHERE joined_in IS NULL AND coalesce(time_ns, span_ns) < %s",
            (int(cutoff.timestamp() * 1e9),),
        )
    return dropped


def replay(
    conn: psycopg.Connection[Any],
    run_ids: Sequence[str],
    *,
    since_ns: int | None = None,
    until_ns: int | None = None,
    host_id: str | None = None,
    chunk: int = 10_000,
) -> Iterator[list[Observation]]:
    """The stored observations of ``run_ids`` in ingest order (per run, by sequence), in chunks,
    optionally limited to a time range (by observation time) and a host."""
    where = ["run_id = ANY(%s)"]
    params: list[Any] = [list(run_ids)]
    if since_ns is not None:
        where.append("time_ns >= %s")
        params.append(since_ns)
    if until_ns is not None:
        where.append("time_ns < %s")
        params.append(until_ns)
    if host_id is not None:
        where.append("host_id = %s")
        params.append(host_id)
    sql = (
        f"SELECT {RECORD_COLUMNS} FROM ob_observations WHERE {' AND '.join(where)} "
        "ORDER BY run_id, seq"
    )
    blocks = Blocks(conn)
    with conn.transaction(), conn.cursor(name=f"ob_replay_{time.monotonic_ns()}") as cur:
        cur.itersize = chunk
        cur.execute(sql, params)
        while True:
            rows = cur.fetchmany(chunk)
            if not rows:
                break
            yield [decode_observation(r, n) for r, n in blocks.records(rows)]


def _json_text(value: Any) -> str | None:
    return None if value is None else msgspec.json.encode(value).decode()


def _array_text(items: Iterable[str]) -> str:
    """A ``text[]`` literal (every element quoted)."""
    quoted = (i.replace("\\", "\\\\").replace('"', '\\"') for i in items)
    return "{" + ",".join(f'"{q}"' for q in quoted) + "}"


def _node_row(run_id: str, n: dict[str, Any]) -> tuple[Any, ...]:
    return (
        run_id,
        n["id"],
        n["key"],
        n["kind"],
        n["label"],
        _json_text(n["facts"]),
        _json_text(n["attrs"]),
        _array_text(n["channels"]),
        _array_text(n["backends"]),
        n["first_seen"],
        n["last_seen"],
        n["logical_count"],
        n["evidence_count"],
    )


def _edge_row(run_id: str, e: dict[str, Any], keys: dict[str, str]) -> tuple[Any, ...]:
    support = e["support"]
    return (
        run_id,
        e["source"],
        e["relation"],
        e["target"],
        e["id"],
        keys.get(e["source"], ""),
        keys.get(e["target"], ""),
        e["grade"],
        flag_text(e["causal"]),
        flag_text(e["inferred"]),
        flag_text(e["identity_exact"]),
        _array_text(e["attribution"]),
        _json_text(e["method"]),
        e["score"],
        _array_text(e["channels"]),
        _array_text(e["backends"]),
        None if support is None else _array_text(support),
        _array_text(e["derived_support"]),
        _json_text(e["attrs"]),
        e["first_seen"],
        e["last_seen"],
        e["logical_count"],
        e["evidence_count"],
    )
