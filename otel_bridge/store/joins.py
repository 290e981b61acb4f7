"""The cross-host connection join in the store (``docs/store.md``, *Cross-host joins*).

A gateway's ``crosshost`` processor joins the two ends of one TCP connection in its memory,
so it misses a join whose ends reach two gateways (two runs in one database) or straddle a
restart. The store sees every end every writer stored, so it makes the same join, by the same
rule (:mod:`otel_bridge.processors.crosshost.join`), over its rows:

* each new ``connected_to``/``accepted`` observation that :func:`~otel_bridge.processors.
  crosshost.join.connection_end` accepts (TCP, both addresses routable, both ports known) is an
  ``ob_conn_ends`` row keyed by its host and observation id (one end stored by two runs is one
  row), under its client-side 4-tuple;
* in the same transaction, :data:`FITS` selects the opposite ends of the exact 4-tuple seen on
  another host at most the skew window apart, one per (host, process): none gives nothing, two
  or more are ambiguous (no join, counted in ``ob_conn_tuples.ambiguous``), exactly one gives
  the join unless the 4-tuple already has one (the same pair: nothing; another: ambiguous);
* the join is :func:`~otel_bridge.processors.crosshost.join.connection_join`'s observation,
  with its deterministic id: the writer stores it in the run whose end completed it, and
  ``ob_conn_tuples`` records it so it is made once in the database.

An advisory lock per 4-tuple, taken in one order for a whole batch, serializes two writers
completing one connection at the same time: the second sees the first's end.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from otel_bridge import jsonl
from otel_bridge.model import Channel, Observation
from otel_bridge.processors.crosshost.join import (
    FourTuple,
    Sighting,
    connection_end,
    connection_join,
)

if TYPE_CHECKING:
    import psycopg

FITS = """
SELECT host_id, process_id, obs_id, time_ns, channel, process, count(*) OVER ()
FROM (
    SELECT DISTINCT ON (host_id, process_id) host_id, process_id, obs_id, time_ns, channel,
           process
    FROM ob_conn_ends
    WHERE client_address = %(ca)s AND client_port = %(cp)s
      AND server_address = %(sa)s AND server_port = %(sp)s
      AND connecting <> %(connecting)s
      AND host_id <> %(host)s
      AND time_ns BETWEEN %(time)s - %(skew)s AND %(time)s + %(skew)s
    ORDER BY host_id, process_id, n DESC
) fits
LIMIT 1
"""
"""The rule's predicates in SQL (:func:`~otel_bridge.processors.crosshost.join.may_pair`):
the opposite ends of the exact 4-tuple, on another host, at most the skew window apart; one
row per (host, process), the latest stored; with how many there are."""

_INSERT_END = """
INSERT INTO ob_conn_ends (client_address, client_port, server_address, server_port,
    connecting, host_id, process_id, run_id, obs_id, time_ns, channel, process)
VALUES (%(ca)s, %(cp)s, %(sa)s, %(sp)s, %(connecting)s, %(host)s, %(process_id)s, %(run)s,
    %(obs)s, %(time)s, %(channel)s, %(process)s)
ON CONFLICT (host_id, obs_id) DO NOTHING
RETURNING n
"""

_TUPLE = """
SELECT client_host, client_process, server_host, server_process FROM ob_conn_tuples
WHERE client_address = %(ca)s AND client_port = %(cp)s
  AND server_address = %(sa)s AND server_port = %(sp)s
"""

_AMBIGUOUS = """
INSERT INTO ob_conn_tuples (client_address, client_port, server_address, server_port, ambiguous)
VALUES (%(ca)s, %(cp)s, %(sa)s, %(sp)s, 1)
ON CONFLICT (client_address, client_port, server_address, server_port)
DO UPDATE SET ambiguous = ob_conn_tuples.ambiguous + 1
"""

_JOINED = """
INSERT INTO ob_conn_tuples (client_address, client_port, server_address, server_port,
    join_id, run_id, client_host, client_process, server_host, server_process)
VALUES (%(ca)s, %(cp)s, %(sa)s, %(sp)s, %(join)s, %(run)s, %(chost)s, %(cproc)s, %(shost)s,
    %(sproc)s)
ON CONFLICT (client_address, client_port, server_address, server_port)
DO UPDATE SET join_id = EXCLUDED.join_id, run_id = EXCLUDED.run_id,
    client_host = EXCLUDED.client_host, client_process = EXCLUDED.client_process,
    server_host = EXCLUDED.server_host, server_process = EXCLUDED.server_process
"""

_LOCK = (
    "SELECT count(pg_advisory_xact_lock(k)) "
    "FROM (SELECT k FROM unnest(%s::bigint[]) k ORDER BY k) s"
)
"""Lock every 4-tuple of a batch, in ascending order (two writers cannot deadlock)."""


@dataclass(slots=True)
class Joined:
    """What the store's join decided for one batch."""

    joins: list[Observation] = field(default_factory=list)
    ambiguous: int = 0
    numbered: int = 0
    """Sequence numbers the writer gave the joins (a join the run already held keeps its)."""


def is_memory_join(o: Observation) -> bool:
    """A connection join a gateway's ``crosshost`` made in memory. With the store's join on, the
    store makes each of these itself (the same id), once per database, and drops the copy."""
    return o.source.backend == "crosshost" and o.evidence.method == "tcp_4tuple"


def _lock_key(key: FourTuple) -> int:
    text = "\x1f".join(str(p) for p in key).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


def _params(key: FourTuple) -> dict[str, Any]:
    return {"ca": key[0], "cp": key[1], "sa": key[2], "sp": key[3]}


def _sighting(row: Sequence[Any]) -> Sighting:
    host, _process_id, obs_id, time_ns, channel, process, _n = row
    entity = jsonl.entity_from_dict(msgspec.msgpack.decode(process), "ob_conn_ends.process")
    return Sighting(str(host), entity, str(obs_id), int(time_ns), Channel(channel))


def join_ends(
    conn: psycopg.Connection[Any], run_id: str, observations: Sequence[Observation], skew_ns: int
) -> Joined:
    """Store the connection ends among ``observations`` (new ones, in ingest order) and make
    the joins they complete (module docstring). Runs inside the caller's transaction."""
    out = Joined()
    ends = [e for e in (connection_end(o) for o in observations) if e is not None]
    if not ends:
        return out
    keys = sorted({_lock_key(key) for key, _, _ in ends})
    conn.execute(_LOCK, (keys,))
    with conn.cursor() as cur:
        for key, sighting, connecting in ends:
            params = _params(key)
            params.update(
                connecting=connecting,
                host=sighting.host,
                process_id=sighting.process.id,
                run=run_id,
                obs=sighting.obs_id,
                time=sighting.time,
                channel=sighting.channel.value,
                process=msgspec.msgpack.encode(jsonl.entity_to_dict(sighting.process)),
                skew=skew_ns,
            )
            if cur.execute(_INSERT_END, params).fetchone() is None:
                continue  # stored before (by another run): decided when it was first stored
            _decide(cur, (key, sighting, connecting), params, out)
    return out


def _decide(
    cur: psycopg.Cursor[Any],
    end: tuple[FourTuple, Sighting, bool],
    params: dict[str, Any],
    out: Joined,
) -> None:
    """The rule for one new end (``params``: its query parameters, ``run`` its writer's run)."""
    key, sighting, connecting = end
    row = cur.execute(FITS, params).fetchone()
    if row is None:
        return
    if int(row[-1]) > 1:
        cur.execute(_AMBIGUOUS, params)
        out.ambiguous += 1
        return
    other = _sighting(row)
    client, server = (sighting, other) if connecting else (other, sighting)
    pair = (client.host, client.process.id, server.host, server.process.id)
    known = cur.execute(_TUPLE, params).fetchone()
    if known is not None and known[0] is not None:
        if tuple(known) != pair:
            cur.execute(_AMBIGUOUS, params)  # a second pair for one 4-tuple: no join
            out.ambiguous += 1
        return
    join = connection_join(key, client, server)
    cur.execute(
        _JOINED,
        {
            **params,
            "join": join.id,
            "chost": pair[0],
            "cproc": pair[1],
            "shost": pair[2],
            "sproc": pair[3],
        },
    )
    out.joins.append(join)
