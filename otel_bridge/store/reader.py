"""Reading graphs back from the store (``otel-bridge graph|review|compare|view --db``).

A :class:`Selector` picks runs (one run, runs of one host, of one task or service) and
optionally a time range. One whole run is read from its graph rows (``ob_nodes``,
``ob_edges``) and assembled by the same code that finishes ``graph.json`` (summary, runtime
reads folded), so it equals the ``graph.json`` a ``graph`` exporter wrote for the same stream.
Any other selection (several runs, a time range, one host's part of a run) replays the stored
observations it covers, in ingest order, through a :class:`~otel_bridge.graph.GraphAccumulator`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from otel_bridge.graph import FORMAT, VERSION, GraphAccumulator, encode
from otel_bridge.graph.fold import fold_runtime_reads
from otel_bridge.graph.summary import summarize
from otel_bridge.store import StoreError, require_schema
from otel_bridge.store.writer import EDGE_COLUMNS, NODE_COLUMNS, replay

if TYPE_CHECKING:
    import psycopg

_FLAGS: dict[str | None, Any] = {None: None, "true": True, "false": False, "mixed": "mixed"}
_EDGE_FLAGS = ("causal", "inferred", "identity_exact")


@dataclass(frozen=True, slots=True, kw_only=True)
class Selector:
    """Which stored evidence to read. Empty fields select everything they would filter."""

    run: str = ""
    host: str = ""
    task: str = ""
    service: str = ""
    since_ns: int | None = None
    until_ns: int | None = None

    @property
    def whole_run(self) -> bool:
        """One run, unrestricted: read from its graph rows."""
        return bool(self.run) and not self.host and self.since_ns is None and self.until_ns is None

    def describe(self) -> str:
        """A short text for messages."""
        parts = [
            f"{k}={v}"
            for k, v in (
                ("run", self.run),
                ("host", self.host),
                ("task", self.task),
                ("service", self.service),
            )
            if v
        ]
        if self.since_ns is not None or self.until_ns is not None:
            parts.append(f"time=[{self.since_ns}, {self.until_ns})")
        return ", ".join(parts) or "every run"


def select_runs(conn: psycopg.Connection[Any], selector: Selector) -> list[str]:
    """Ids of the runs ``selector`` picks, sorted."""
    where: list[str] = []
    params: list[Any] = []
    if selector.run:
        where.append("r.run_id = %s")
        params.append(selector.run)
    if selector.task:
        where.append("r.task = %s")
        params.append(selector.task)
    if selector.service:
        where.append("r.service = %s")
        params.append(selector.service)
    if selector.host:
        where.append(
            "EXISTS (SELECT 1 FROM ob_run_hosts h WHERE h.run_id = r.run_id AND h.host_id = %s)"
        )
        params.append(selector.host)
    if selector.since_ns is not None:
        where.append("(r.last_seen IS NULL OR r.last_seen >= %s)")
        params.append(selector.since_ns)
    if selector.until_ns is not None:
        where.append("(r.first_seen IS NULL OR r.first_seen < %s)")
        params.append(selector.until_ns)
    sql = "SELECT r.run_id FROM ob_runs r"
    if where:
        sql += " WHERE " + " AND ".join(where)
    rows = conn.execute(sql + " ORDER BY r.run_id", params).fetchall()
    return [str(r[0]) for r in rows]


def read_graph(conn: psycopg.Connection[Any], selector: Selector) -> dict[str, Any]:
    """The graph document of what ``selector`` picks (``docs/store.md``, *Readers*).

    Raises :class:`StoreError` when no stored run matches.
    """
    require_schema(conn)
    runs = select_runs(conn, selector)
    if not runs:
        raise StoreError(f"no stored run matches {selector.describe()}")
    if selector.whole_run:
        return _read_rows(conn, runs[0])
    return _replay(conn, runs, selector)


def _run_row(conn: psycopg.Connection[Any], run_id: str) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT run, observations, coverage, coverage_by_channel FROM ob_runs WHERE run_id = %s",
        (run_id,),
    ).fetchone()
    if row is None:
        raise StoreError(f"no stored run {run_id}")
    return tuple(row)


def _read_rows(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any]:
    run, observations, coverage, by_channel = _run_row(conn, run_id)
    node_cols = [c for c in NODE_COLUMNS if c != "run_id"]
    nodes = []
    rows = conn.execute(
        f"SELECT {', '.join(node_cols)} FROM ob_nodes WHERE run_id = %s ORDER BY id",
        (run_id,),
    ).fetchall()
    for row in rows:
        nodes.append(dict(sorted(zip(node_cols, row, strict=True))))
    skip = {"run_id", "source_key", "target_key"}
    edge_cols = [c for c in EDGE_COLUMNS if c not in skip]
    edges = []
    rows = conn.execute(
        f"SELECT {', '.join(edge_cols)} FROM ob_edges WHERE run_id = %s "
        "ORDER BY source, relation, target",
        (run_id,),
    ).fetchall()
    for row in rows:
        edge = dict(zip(edge_cols, row, strict=True))
        for flag in _EDGE_FLAGS:
            edge[flag] = _FLAGS[edge[flag]]
        edges.append(dict(sorted(edge.items())))
    conn.commit()
    # Sorted like the snapshot: by id, by (source, relation, target) in code-point order.
    nodes.sort(key=lambda n: n["id"])
    edges.sort(key=lambda e: (e["source"], e["relation"], e["target"]))
    doc = {
        "edges": edges,
        "format": FORMAT,
        "nodes": nodes,
        "run": dict(run),
        "summary": summarize(nodes, edges, Counter(coverage), Counter(by_channel), observations),
        "version": VERSION,
    }
    return fold_runtime_reads(doc)


def _replay(conn: psycopg.Connection[Any], runs: list[str], selector: Selector) -> dict[str, Any]:
    metadata: dict[str, Any] = (
        dict(_run_row(conn, runs[0])[0]) if len(runs) == 1 else {"runs": runs}
    )
    acc = GraphAccumulator(retain_support=True, run=metadata)
    for chunk in replay(
        conn,
        runs,
        since_ns=selector.since_ns,
        until_ns=selector.until_ns,
        host_id=selector.host or None,
    ):
        acc.apply_many(chunk)
    rows = conn.execute(
        "SELECT reason, channel, time_ns FROM ob_coverage WHERE run_id = ANY(%s) "
        "ORDER BY run_id, seq",
        (runs,),
    ).fetchall()
    conn.commit()
    from otel_bridge.model import Channel, CoverageRecord, Source  # noqa: PLC0415

    records = [
        CoverageRecord(
            source=Source(channel=Channel(ch), backend="store", record_id=""),
            reason=r,
            time_unix_nano=t,
        )
        for r, ch, t in rows
        if _in_range(int(t), selector)
    ]
    acc.apply_coverage(records)
    # As a JSON document (lists, not the snapshot's tuples), like the rows path.
    document: dict[str, Any] = json.loads(encode(acc.to_dict()))
    return document


def _in_range(t: int, selector: Selector) -> bool:
    if t <= 0:
        return True
    if selector.since_ns is not None and t < selector.since_ns:
        return False
    return selector.until_ns is None or t < selector.until_ns
