"""A stored run written back as a run directory, for the readers that read one
(``review``, ``compare``, ``view`` with ``--db``).

The directory holds what ``observe`` would have written from the same stream: ``graph.json``
(read from the graph rows, :func:`~otel_bridge.store.reader.read_graph`), ``sem.jsonl`` (the
spans and the application's log records), ``os.jsonl`` (the host receiver's OS events),
``correlated.jsonl`` (observations and coverage records), each in ingest order, in the
``file`` exporter's JSON-lines format, a ``summary.json`` holding only what the store knows
(``run``: id, host, first and last observation time, ``source: postgres``; ``command`` and
``exit_code`` null, unknown: they are observe's account of its own process), and a manifest
that ``otel-bridge verify`` checks.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import msgspec

from otel_bridge import jsonl, rundir
from otel_bridge.graph import encode
from otel_bridge.model import Channel, CoverageRecord, Source
from otel_bridge.store.blocks import RECORD_COLUMNS, Blocks
from otel_bridge.store.reader import Selector, read_graph
from otel_bridge.store.records import decode_observation, otlp_request

if TYPE_CHECKING:
    import psycopg

REQUIRED = (
    rundir.OS_STREAM,
    rundir.SEM_STREAM,
    rundir.CORRELATED_STREAM,
    rundir.GRAPH,
    rundir.SUMMARY,
)


def write_run_dir(conn: psycopg.Connection[Any], run_id: str, dest: str) -> rundir.RunDir:
    """Write stored run ``run_id`` as a run directory at ``dest`` (created 0700, files 0600)."""
    graph = read_graph(conn, Selector(run=run_id))
    run = rundir.RunDir.create(dest)
    run.begin({"id": run_id, "source": "postgres"})
    rundir.write_private(run.file(rundir.GRAPH), encode(graph))
    _write_lines(run.file(rundir.SEM_STREAM), _sem_lines(conn, run_id))
    _write_lines(run.file(rundir.OS_STREAM), _log_lines(conn, run_id, os_events=True))
    _write_lines(run.file(rundir.CORRELATED_STREAM), _correlated_lines(conn, run_id))
    run.write_json(rundir.SUMMARY, _summary(conn, run_id))
    run.write_manifest({"id": run_id, "source": "postgres"}, required=REQUIRED)
    return run


def _summary(conn: psycopg.Connection[Any], run_id: str) -> dict[str, Any]:
    row = conn.execute(
        "SELECT host_id, first_seen, last_seen FROM ob_runs WHERE run_id = %s", (run_id,)
    ).fetchone()
    host, first, last = row if row is not None else (None, None, None)
    return {
        "run": {
            "id": run_id,
            "host.id": host,
            "started": first,
            "ended": last,
            "source": "postgres",
        },
        "command": None,
        "exit_code": None,
    }


def _write_lines(path: str, lines: list[str]) -> None:
    rundir.write_private(path, "".join(line + "\n" for line in lines).encode())


def _record_lines(conn: psycopg.Connection[Any], rows: list[Any]) -> list[tuple[int, str]]:
    """``(seq, line)`` of rows ``seq, record, run_id, block, pos``."""
    records = Blocks(conn).records(rows)
    return [
        (int(row[0]), jsonl.dumps(otlp_request(raw, native)))
        for row, (raw, native) in zip(rows, records, strict=True)
    ]


def _log_lines(conn: psycopg.Connection[Any], run_id: str, *, os_events: bool) -> list[str]:
    rows = conn.execute(
        f"SELECT seq, {RECORD_COLUMNS} FROM ob_logs WHERE run_id = %s AND os_event = %s "
        "ORDER BY seq",
        (run_id, os_events),
    ).fetchall()
    return [line for _, line in _record_lines(conn, rows)]


def _sem_lines(conn: psycopg.Connection[Any], run_id: str) -> list[str]:
    spans = conn.execute(
        f"SELECT seq, {RECORD_COLUMNS} FROM ob_spans WHERE run_id = %s ORDER BY seq", (run_id,)
    ).fetchall()
    logs = conn.execute(
        f"SELECT seq, {RECORD_COLUMNS} FROM ob_logs WHERE run_id = %s AND NOT os_event "
        "ORDER BY seq",
        (run_id,),
    ).fetchall()
    merged = sorted(_record_lines(conn, spans) + _record_lines(conn, logs))
    return [line for _, line in merged]


def _correlated_lines(conn: psycopg.Connection[Any], run_id: str) -> list[str]:
    obs = conn.execute(
        f"SELECT seq, {RECORD_COLUMNS} FROM ob_observations WHERE run_id = %s ORDER BY seq",
        (run_id,),
    ).fetchall()
    lines = [
        (int(row[0]), jsonl.dumps({"observation": _observation_dict(raw, native)}))
        for row, (raw, native) in zip(obs, Blocks(conn).records(obs), strict=True)
    ]
    cov = conn.execute(
        "SELECT seq, time_ns, channel, backend, record_id, reason, detail FROM ob_coverage "
        "WHERE run_id = %s ORDER BY seq",
        (run_id,),
    ).fetchall()
    for seq, t, channel, backend, record_id, reason, detail in cov:
        record = CoverageRecord(
            source=Source(channel=Channel(channel), backend=backend, record_id=record_id),
            reason=reason,
            time_unix_nano=t,
            detail=detail,
        )
        lines.append((int(seq), jsonl.dumps({"coverage": jsonl.coverage_to_dict(record)})))
    lines.sort()
    return [line for _, line in lines]


def _observation_dict(raw: bytes, native: bool) -> dict[str, Any]:
    """An observation's ``jsonl`` form (a v1 record is that form already)."""
    if not native:
        return dict(msgspec.msgpack.decode(raw))
    return jsonl.observation_to_dict(decode_observation(raw, native))


def select_one_run(conn: psycopg.Connection[Any], selector: Selector) -> str:
    """The one run ``selector`` picks; :class:`StoreError` when none or several."""
    from otel_bridge.store import StoreError  # noqa: PLC0415
    from otel_bridge.store.reader import select_runs  # noqa: PLC0415

    runs = select_runs(conn, selector)
    if len(runs) != 1:
        found = f"{len(runs)} runs" + (f" ({', '.join(runs[:5])})" if runs else "")
        raise StoreError(f"{selector.describe()} selects {found}; give --run ID")
    return runs[0]


def default_dir(run_id: str) -> str:
    """Where a reader writes a stored run when told no directory: ``./db-run-<id>``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_id)
    return os.path.abspath(f"db-run-{safe}")
