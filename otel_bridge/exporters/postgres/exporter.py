"""The ``postgres`` exporter's component (see ``docs/store.md``).

Every consumed batch is one transaction: raw records go through COPY into the time-partitioned
tables, and only the records that were new (not stored for the run before: same observation
id) are applied to the run's :class:`~otel_bridge.graph.GraphAccumulator`, so re-sending a batch
changes nothing. Every ``flush_interval`` (and at shutdown) the rows of the graph's nodes and
edges that those observations touched since the last flush are upserted
(:meth:`~otel_bridge.graph.GraphAccumulator.rows`); the rest of the graph is neither rewritten
nor snapshotted.

When the database cannot be reached, :meth:`PostgresExporter.consume` raises
:class:`~otel_bridge.errors.RefusedError`: nothing was accepted, the receiver answers its client
with a retryable status, and the data stays in the sender's queue (an SDK's retry, or an
upstream collector's persistent ``sending_queue``) until the database is back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from otel_bridge.component import (
    EXPORTER,
    STANDARD_COUNTERS,
    CounterScope,
    CounterSpec,
    CreateSettings,
    Host,
)
from otel_bridge.errors import PermanentError, RefusedError
from otel_bridge.exporters import count, warn
from otel_bridge.graph import GraphAccumulator
from otel_bridge.identity import host_id
from otel_bridge.model import Batch, Observation
from otel_bridge.store import (
    ConnectOptions,
    StoreError,
    connect,
    migrate,
    redact_url,
    require_schema,
)
from otel_bridge.store.joins import is_memory_join
from otel_bridge.store.writer import StoreWriter, batch_size, replay

from .config import Config

if TYPE_CHECKING:
    import psycopg

__all__ = ["COUNTERS", "PostgresExporter"]

_log = logging.getLogger("otel_bridge.exporters.postgres")

COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("observations", "observations stored and applied to the graph", "{observations}"),
    CounterSpec("duplicates", "records already stored for the run (re-sent), skipped", "{records}"),
    CounterSpec("spans_stored", "raw spans offered to the span table", "{spans}"),
    CounterSpec("logs_stored", "raw log records (OS events) offered to the log table", "{logs}"),
    CounterSpec("rows_upserted", "graph rows (nodes and edges) upserted", "{rows}"),
    CounterSpec("write_errors", "batches or flushes the database did not take", "{errors}"),
    CounterSpec("partitions_dropped", "raw-record partitions dropped by retention", "{partitions}"),
    CounterSpec("connections_joined", "TCP connections the store joined across hosts", "{joins}"),
    CounterSpec(
        "connections_ambiguous", "connection ends with several fits in the store: no join", "{ends}"
    ),
    CounterSpec("traces_joined", "spans the store joined to a parent span on another host"),
    CounterSpec(
        "memory_joins_left_to_store",
        "in-memory connection and trace joins not stored: the store makes each itself, once",
        "{observations}",
    ),
)
_ALL = (*COUNTERS, *STANDARD_COUNTERS[EXPORTER])
_KEEP = {"runtime_reads": "keep"}
"""The live accumulator never folds: rows are stored unfolded, the reader folds."""


class PostgresExporter:
    """Stores batches in PostgreSQL and keeps the run's graph rows current (module docstring)."""

    def __init__(self, config: Config, settings: CreateSettings | None = None) -> None:
        self.config = config
        self._id = settings.id if settings is not None else "postgres"
        self._telemetry = settings.telemetry if settings is not None else None
        self.run_id = config.run_id
        self.host_id = config.host_id or host_id()
        self.accumulator = self._new_accumulator()
        self._coverage: Counter[str] = Counter()
        self._coverage_by_channel: Counter[str] = Counter()
        self._touched_nodes: set[str] = set()
        self._touched_edges: set[tuple[str, str, str]] = set()
        self._first: int | None = None
        self._last: int | None = None
        self._seq = 0
        self._service = config.service
        self._conn: psycopg.Connection[Any] | None = None
        self._writer: StoreWriter | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dirty = False
        self._started = False
        self._stopped = False
        self._last_retention = 0.0

    def _new_accumulator(self) -> GraphAccumulator:
        return GraphAccumulator(
            retain_support=self.config.retain_support,
            support_limit=self.config.support_limit,
            occurrence_window=self.config.occurrence_window,
            run=dict(_KEEP),
        )

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, host: Host) -> None:
        """Resolve the run id, connect (a database that is down is retried at each batch)."""
        self._telemetry = host.telemetry.scoped(
            self._telemetry.scope if self._telemetry else CounterScope.of(EXPORTER, self._id, _ALL)
        )
        if not self.run_id:
            self.run_id = _observe_run_id(host.run_dir) or _new_run_id()
        self._started = True
        with self._lock:
            try:
                self._connected()
            except RefusedError as exc:
                self._warn("connect", f"{exc}; batches are refused until it is reachable")
        interval = self.config.flush_interval
        if interval > 0:
            self._thread = threading.Thread(
                target=self._loop, name=f"otel-bridge-{self._id}-flush", daemon=True
            )
            self._thread.start()

    def shutdown(self) -> None:
        """Stop the flush thread, upsert what changed, close. Safe before start and twice."""
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._flush_locked()
            if self._conn is not None:
                self._conn.close()
            self._conn, self._writer = None, None

    # -- connection -----------------------------------------------------------------------

    def _options(self) -> ConnectOptions:
        cfg = self.config
        return ConnectOptions(
            password=cfg.password,
            sslmode=cfg.tls.mode,
            sslrootcert=cfg.tls.ca_file,
            sslcert=cfg.tls.cert_file,
            sslkey=cfg.tls.key_file,
            connect_timeout=cfg.connect_timeout,
            application_name=f"otel-bridge {self._id}",
        )

    def _connected(self) -> StoreWriter:
        """The writer, connecting and resuming the run first when needed (lock held).

        :class:`RefusedError` when the database cannot be reached or set up.
        """
        if self._writer is not None:
            return self._writer
        try:
            conn = connect(self.config.endpoint, self._options())
        except StoreError as exc:
            raise RefusedError(f"{self._id}: {exc}") from None
        try:
            if self.config.migrate:
                migrate(conn)
            else:
                require_schema(conn)
            writer = StoreWriter(conn, partition_interval=int(self.config.partition_interval))
            writer.ensure_run(
                self.run_id,
                host_id=self.host_id,
                service=self._service,
                task=self.config.task,
                run=dict(self.config.run),
            )
            self._resume(conn, writer)
        except Exception as exc:
            conn.close()
            raise RefusedError(
                f"{self._id}: cannot set up the store at {redact_url(self.config.endpoint)}: "
                f"{_first_line(exc)}"
            ) from None
        self._conn, self._writer = conn, writer
        return writer

    def _resume(self, conn: psycopg.Connection[Any], writer: StoreWriter) -> None:
        """Rebuild the run's graph from what the database already holds (a restart, or a
        reconnection after an outage), so later batches continue it instead of replacing it."""
        self._seq = writer.max_seq(self.run_id)
        self.accumulator = self._new_accumulator()
        self._coverage.clear()
        self._coverage_by_channel.clear()
        self._touched_nodes.clear()
        self._touched_edges.clear()
        self._first = self._last = None
        if self._seq == 0:
            return
        for chunk in replay(conn, [self.run_id]):
            self.accumulator.apply_many(chunk)
            self._touch(chunk)
        rows = conn.execute(
            "SELECT reason, channel FROM ob_coverage WHERE run_id = %s", (self.run_id,)
        ).fetchall()
        conn.commit()
        for reason, channel in rows:
            self._coverage[str(reason)] += 1
            self._coverage_by_channel[str(channel)] += 1
        self._dirty = True

    def _disconnect(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                self._conn.close()
        self._conn, self._writer = None, None

    # -- data -----------------------------------------------------------------------------

    def consume(self, batch: Batch) -> None:
        """Store ``batch`` (one transaction) and apply its new observations to the graph."""
        if not batch_size(batch):
            return
        with self._lock:
            if self._stopped:  # a batch after shutdown: the sender keeps it and retries
                raise RefusedError(f"{self._id}: shut down")
            writer = self._connected()
            if not self._service and batch.spans:
                service = batch.spans[0].resource.attributes.get("service.name")
                if isinstance(service, str) and service:
                    self._service = service
                    writer.ensure_run(
                        self.run_id,
                        host_id=self.host_id,
                        service=service,
                        task=self.config.task,
                        run=dict(self.config.run),
                    )
            batch, left = self._without_memory_joins(batch)
            try:
                stored = writer.ingest(
                    self.run_id,
                    host_id=self.host_id,
                    seq=self._seq,
                    batch=batch,
                    join_skew_ns=self._skew_ns(),
                )
            except Exception as exc:
                self._failed(exc)
            self._seq = stored.next_seq
            fresh, fresh_cov = stored.observations, stored.coverage
            self.accumulator.apply_many(fresh)
            self.accumulator.apply_many(stored.joins)
            self._touch(fresh)
            self._touch(stored.joins)
            for record in fresh_cov:
                self._coverage[record.reason] += 1
                self._coverage_by_channel[record.source.channel.value] += 1
            self._dirty = self._dirty or bool(fresh or fresh_cov or stored.joins)
            if self.config.flush_interval == 0:
                self._flush_locked()
        self._count("observations", len(fresh) + len(stored.joins))
        self._count("connections_joined", len(stored.joins) - stored.traces)
        self._count("traces_joined", stored.traces)
        self._count("connections_ambiguous", stored.ambiguous)
        self._count("memory_joins_left_to_store", left)
        self._count("spans_stored", len(batch.spans))
        self._count("logs_stored", len(batch.logs))
        self._count(
            "duplicates",
            len(batch.observations) - len(fresh) + len(batch.coverage) - len(fresh_cov),
        )

    def _skew_ns(self) -> int | None:
        return int(self.config.skew_window * 1e9) if self.config.crosshost_join else None

    def _without_memory_joins(self, batch: Batch) -> tuple[Batch, int]:
        """``batch`` without a gateway's in-memory cross-host joins when the store joins
        (it makes each of them itself, with the same id); how many were left out."""
        if not self.config.crosshost_join:
            return batch, 0
        kept = tuple(o for o in batch.observations if not is_memory_join(o))
        left = len(batch.observations) - len(kept)
        return (batch.replace(observations=kept) if left else batch), left

    def _failed(self, exc: Exception) -> NoReturn:
        """A batch the database did not take: refused (retry) or, for bad data, rejected."""
        from psycopg import DataError, OperationalError  # noqa: PLC0415 - optional driver

        self._count("write_errors")
        if isinstance(exc, DataError):
            raise PermanentError(
                f"{self._id}: the database refused the batch: {_first_line(exc)}"
            ) from None
        if isinstance(exc, OperationalError) or self._conn is None or self._conn.closed:
            self._disconnect()
        raise RefusedError(
            f"{self._id}: cannot store the batch in {redact_url(self.config.endpoint)}: "
            f"{_first_line(exc)}"
        ) from None

    def flush(self) -> None:
        """Upsert the graph rows that changed (and the run's totals) now."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._dirty:
            return
        try:
            writer = self._connected()
            self._upsert(writer)
        except Exception as exc:
            self._count("write_errors")
            self._warn("flush", f"cannot upsert the graph rows: {_first_line(exc)}")
            self._disconnect()

    def _touch(self, observations: list[Observation]) -> None:
        """Remember the nodes and edges ``observations`` changed: the next flush upserts
        those rows only (an edge changes both its end nodes' totals; nothing else changes)."""
        nodes, edges = self._touched_nodes, self._touched_edges
        for o in observations:
            sid = o.subject.id
            nodes.add(sid)
            ob, rel = o.object, o.relation
            if ob is not None and rel is not None:
                nodes.add(ob.id)
                edges.add((sid, rel.value, ob.id))

    def _upsert(self, writer: StoreWriter) -> None:
        """Upsert the rows of the touched nodes and edges, then the run's totals."""
        nodes, edges = self.accumulator.rows(self._touched_nodes, self._touched_edges)
        keys = {n["id"]: n["key"] for n in nodes}  # every touched edge's ends are touched
        writer.upsert(self.run_id, nodes, edges, keys)
        # a node's first_seen only decreases and its last_seen only grows: the run's bounds
        # are those of every row ever upserted
        first = [n["first_seen"] for n in nodes if n["first_seen"] is not None]
        last = [n["last_seen"] for n in nodes if n["last_seen"] is not None]
        if first:
            self._first = min(first) if self._first is None else min(self._first, *first)
        if last:
            self._last = max(last) if self._last is None else max(self._last, *last)
        writer.update_run(
            self.run_id,
            observations=self.accumulator.observations,
            coverage=dict(self._coverage),
            coverage_by_channel=dict(self._coverage_by_channel),
            first=self._first,
            last=self._last,
        )
        self._touched_nodes.clear()
        self._touched_edges.clear()
        self._dirty = False
        self._count("rows_upserted", len(nodes) + len(edges))

    def _loop(self) -> None:
        while not self._stop.wait(self.config.flush_interval):
            with self._lock:
                self._flush_locked()
                self._retain()

    def _retain(self) -> None:
        """Drop raw partitions older than ``retention`` (at most once a minute)."""
        if self.config.retention <= 0 or self._writer is None:
            return
        now = time.monotonic()
        if now - self._last_retention < 60:
            return
        self._last_retention = now
        cutoff = datetime.now(UTC) - timedelta(seconds=self.config.retention)
        try:
            dropped = self._writer.drop_before(cutoff)
        except Exception as exc:
            self._warn("retention", f"retention failed: {_first_line(exc)}")
            self._disconnect()
            return
        self._count("partitions_dropped", len(dropped))

    # -- telemetry ------------------------------------------------------------------------

    def _count(self, name: str, n: int = 1) -> None:
        count(self._telemetry, name, n)

    def _warn(self, key: str, message: str) -> None:
        warn(self._telemetry, _log, self._id, key, message)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _observe_run_id(run_dir: str | None) -> str:
    """The run id ``observe`` wrote in its run directory's manifest ("" when none)."""
    if not run_dir:
        return ""
    try:
        with open(os.path.join(run_dir, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return ""
    run = manifest.get("run") if isinstance(manifest, dict) else None
    value = run.get("id") if isinstance(run, dict) else None
    return value if isinstance(value, str) else ""


def _new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"
