"""The cross-host joins in the store (``docs/store.md``, *Cross-host joins*).

A gateway's ``crosshost`` processor joins the two ends of one TCP connection, and a span to its
parent span on another host, in its memory, so it misses a join whose sides reach two gateways
(two runs in one database) or straddle a restart. The store sees every side every writer
stored, so it makes the same joins, by the same rules
(:mod:`otel_bridge.processors.crosshost.join`), over its rows. Connections:

* each new ``connected_to``/``accepted`` observation that :func:`~otel_bridge.processors.
  crosshost.join.connection_end` accepts (TCP, both addresses routable, both ports known) is an
  ``ob_conn_ends`` row keyed by its host and observation id (one end stored by two runs is one
  row), under its client-side 4-tuple;
* in the same transaction, :data:`FITS` selects for every end the stored opposite ends of the
  exact 4-tuple seen on another host at most the skew window apart, one per (host, process),
  and :func:`~otel_bridge.processors.crosshost.join.may_pair` adds the batch's own earlier
  ends, so each end meets exactly the ends stored before it: none gives nothing, two or more
  are ambiguous (no join, counted in ``ob_conn_tuples.ambiguous``), exactly one gives the join
  unless the 4-tuple already has one (the same pair: nothing; another: ambiguous);
* the join is :func:`~otel_bridge.processors.crosshost.join.connection_join`'s observation,
  with its deterministic id: the writer stores it in the run whose end completed it, and
  ``ob_conn_tuples`` records it so it is made once in the database.

An advisory lock per 4-tuple, taken in one order for a whole batch, serializes two writers
completing one connection at the same time: the second sees the first's end.

Traces (:func:`join_spans`): each new span observation (its node and shipping host) and each
span's parent link is an ``ob_span_ends`` row keyed by (trace id, span id), whatever the run;
in the same transaction, under a lock per trace (taken after the 4-tuples'), :data:`TRACE_JOINS`
joins every child the batch touched (as itself or as a parent) whose parent in the same trace
was shipped by another host and that no writer joined before, marking it joined in the writer's
run: :func:`~otel_bridge.processors.crosshost.join.trace_join`'s observation, once per database.
Both joins are stored in the run whose batch completed them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from otel_bridge import jsonl
from otel_bridge.model import Channel, Observation, Span
from otel_bridge.processors.crosshost.join import (
    FourTuple,
    Sighting,
    SpanNode,
    connection_end,
    connection_join,
    may_pair,
    party,
    span_node,
    span_parent,
    trace_join,
)

if TYPE_CHECKING:
    import psycopg

_ENDS = """
unnest(%(ca)s::text[], %(cp)s::int[], %(sa)s::text[], %(sp)s::int[], %(connecting)s::bool[],
       %(host)s::text[], %(time)s::bigint[]) WITH ORDINALITY
    AS e(ca, cp, sa, sp, connecting, host, time_ns, ord)
"""
"""The batch's ends as a table (``ord``: the end's position in the batch, from 1)."""

FITS = f"""
SELECT e.ord, f.host_id, f.process_id, f.obs_id, f.time_ns, f.channel, f.process
FROM {_ENDS}
CROSS JOIN LATERAL (
    SELECT DISTINCT ON (c.host_id, c.process_id) c.host_id, c.process_id, c.obs_id, c.time_ns,
           c.channel, c.process
    FROM ob_conn_ends c
    WHERE c.client_address = e.ca AND c.client_port = e.cp
      AND c.server_address = e.sa AND c.server_port = e.sp
      AND c.connecting <> e.connecting
      AND c.host_id <> e.host
      AND c.time_ns BETWEEN e.time_ns - %(skew)s AND e.time_ns + %(skew)s
    ORDER BY c.host_id, c.process_id, c.n DESC
) f
ORDER BY e.ord, f.host_id, f.process_id
"""
"""The rule's predicates in SQL (:func:`~otel_bridge.processors.crosshost.join.may_pair`), for
every end of a batch at once, over the ends stored before the batch: the opposite ends of the
exact 4-tuple, on another host, at most the skew window apart; one row per (host, process),
the latest stored."""

_INSERT_ENDS = f"""
INSERT INTO ob_conn_ends (client_address, client_port, server_address, server_port,
    connecting, host_id, process_id, run_id, obs_id, time_ns, channel, process)
SELECT e.ca, e.cp, e.sa, e.sp, e.connecting, e.host, x.process_id, %(run)s, x.obs_id,
       e.time_ns, x.channel, x.process
FROM {_ENDS}
JOIN unnest(%(process_id)s::text[], %(obs)s::text[], %(channel)s::text[], %(process)s::bytea[])
    WITH ORDINALITY AS x(process_id, obs_id, channel, process, ord) ON x.ord = e.ord
ORDER BY e.ord
ON CONFLICT (host_id, obs_id) DO NOTHING
RETURNING host_id, obs_id
"""

_TUPLES = f"""
SELECT DISTINCT t.client_address, t.client_port, t.server_address, t.server_port,
       t.client_host, t.client_process, t.server_host, t.server_process
FROM {_ENDS}
JOIN ob_conn_tuples t ON t.client_address = e.ca AND t.client_port = e.cp
    AND t.server_address = e.sa AND t.server_port = e.sp
WHERE t.join_id IS NOT NULL
"""

_UPDATE_TUPLES = """
INSERT INTO ob_conn_tuples AS t (client_address, client_port, server_address, server_port,
    join_id, run_id, client_host, client_process, server_host, server_process, ambiguous)
SELECT * FROM unnest(%s::text[], %s::int[], %s::text[], %s::int[], %s::text[], %s::text[],
    %s::text[], %s::text[], %s::text[], %s::text[], %s::int[])
ON CONFLICT (client_address, client_port, server_address, server_port) DO UPDATE SET
    join_id = coalesce(EXCLUDED.join_id, t.join_id),
    run_id = coalesce(EXCLUDED.run_id, t.run_id),
    client_host = coalesce(EXCLUDED.client_host, t.client_host),
    client_process = coalesce(EXCLUDED.client_process, t.client_process),
    server_host = coalesce(EXCLUDED.server_host, t.server_host),
    server_process = coalesce(EXCLUDED.server_process, t.server_process),
    ambiguous = t.ambiguous + EXCLUDED.ambiguous
"""

_LOCK = (
    "SELECT count(pg_advisory_xact_lock(k)) "
    "FROM (SELECT k FROM unnest(%s::bigint[]) k ORDER BY k) s"
)
"""Lock every 4-tuple of a batch, in ascending order (two writers cannot deadlock)."""

End = tuple[FourTuple, Sighting, bool]
"""A connection end: its client-side 4-tuple, the sighting, whether it is the connecting end."""
Pair = tuple[str, str, str, str]
"""A joined pair: client host and process, server host and process."""


@dataclass(slots=True)
class Joined:
    """What the store's join decided for one batch."""

    joins: list[Observation] = field(default_factory=list)
    """The connection joins, then the trace joins."""
    ambiguous: int = 0
    numbered: int = 0
    """Sequence numbers the writer gave the joins (a join the run already held keeps its)."""


@dataclass(slots=True)
class _State:
    """One 4-tuple's decisions: its join's pair (stored, or made in this batch), the ambiguous
    ends this batch counted, the join made in this batch."""

    pair: Pair | None = None
    ambiguous: int = 0
    made: Observation | None = None


def is_memory_join(o: Observation) -> bool:
    """A connection or trace join a gateway's ``crosshost`` made in memory. With the store's
    join on, the store makes each of these itself (the same id), once per database, and drops
    the copy."""
    return o.source.backend == "crosshost" and o.evidence.method in (
        "tcp_4tuple",
        "w3c_trace_context",
    )


def _lock_key(key: FourTuple) -> int:
    text = "\x1f".join(str(p) for p in key).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


def _sighting(row: Sequence[Any]) -> Sighting:
    _ord, host, _process_id, obs_id, time_ns, channel, process = row
    entity = jsonl.entity_from_dict(msgspec.msgpack.decode(process), "ob_conn_ends.process")
    return Sighting(str(host), entity, str(obs_id), int(time_ns), Channel(channel))


def _columns(ends: Sequence[End], skew_ns: int, run_id: str) -> dict[str, Any]:
    return {
        "ca": [k[0] for k, _, _ in ends],
        "cp": [k[1] for k, _, _ in ends],
        "sa": [k[2] for k, _, _ in ends],
        "sp": [k[3] for k, _, _ in ends],
        "connecting": [c for _, _, c in ends],
        "host": [s.host for _, s, _ in ends],
        "time": [s.time for _, s, _ in ends],
        "process_id": [s.process.id for _, s, _ in ends],
        "obs": [s.obs_id for _, s, _ in ends],
        "channel": [s.channel.value for _, s, _ in ends],
        "process": [msgspec.msgpack.encode(jsonl.entity_to_dict(s.process)) for _, s, _ in ends],
        "skew": skew_ns,
        "run": run_id,
    }


def join_ends(
    conn: psycopg.Connection[Any],
    run_id: str,
    observations: Sequence[Observation],
    skew_ns: int,
    spans: Sequence[Span] = (),
) -> Joined:
    """Store the connection ends among ``observations`` (new ones, in ingest order) and make
    the joins they complete (module docstring). Runs inside the caller's transaction, in five
    statements whatever the number of ends: lock the 4-tuples, find every end's stored fits,
    store the ends, read the 4-tuples' joins, write the decisions. Then the trace join of the
    span observations among ``observations`` and the parent links of ``spans``
    (:func:`join_spans`)."""
    out = Joined()
    _join_connections(conn, run_id, observations, skew_ns, out)
    out.joins.extend(join_spans(conn, run_id, observations, spans))
    return out


def _join_connections(
    conn: psycopg.Connection[Any],
    run_id: str,
    observations: Sequence[Observation],
    skew_ns: int,
    out: Joined,
) -> None:
    ends = [e for e in (connection_end(o) for o in observations) if e is not None]
    if not ends:
        return
    conn.execute(_LOCK, (sorted({_lock_key(key) for key, _, _ in ends}),))
    params = _columns(ends, skew_ns, run_id)
    stored: dict[int, dict[str, Sighting]] = {}
    for row in conn.execute(FITS, params).fetchall():
        other = _sighting(row)
        stored.setdefault(int(row[0]), {})[party(other)] = other
    new = {(str(h), str(o)) for h, o in conn.execute(_INSERT_ENDS, params).fetchall()}
    states: dict[FourTuple, _State] = {}
    for row in conn.execute(_TUPLES, params).fetchall():
        key = (str(row[0]), int(row[1]), str(row[2]), int(row[3]))
        states[key] = _State(pair=(str(row[4]), str(row[5]), str(row[6]), str(row[7])))
    earlier: dict[tuple[FourTuple, bool], list[Sighting]] = {}  # this batch's, by 4-tuple
    for i, (key, sighting, connecting) in enumerate(ends):
        if (sighting.host, sighting.obs_id) in new:
            fits = stored.get(i + 1, {})
            for other in earlier.get((key, not connecting), ()):
                if may_pair(other, sighting, skew_ns):
                    fits[party(other)] = other  # later than any stored: replaces it
            if fits:
                _decide(states.setdefault(key, _State()), (key, sighting, connecting), fits, out)
        # else stored before (by another run): decided when it was first stored
        earlier.setdefault((key, connecting), []).append(sighting)
    _write(conn, states, run_id)


def _decide(state: _State, end: End, fits: dict[str, Sighting], out: Joined) -> None:
    """The rule for one new end with its fits (stored before it, one per host and process)."""
    key, sighting, connecting = end
    if len(fits) > 1:
        state.ambiguous += 1
        out.ambiguous += 1
        return
    (other,) = fits.values()
    client, server = (sighting, other) if connecting else (other, sighting)
    pair = (client.host, client.process.id, server.host, server.process.id)
    if state.pair is not None:
        if state.pair != pair:
            state.ambiguous += 1  # a second pair for one 4-tuple: no join
            out.ambiguous += 1
        return
    state.pair = pair
    state.made = connection_join(key, client, server)
    out.joins.append(state.made)


def _write(conn: psycopg.Connection[Any], states: dict[FourTuple, _State], run_id: str) -> None:
    """Record the batch's joins and ambiguities in ``ob_conn_tuples`` (one statement)."""
    rows = [(k, s) for k, s in states.items() if s.made is not None or s.ambiguous]
    if not rows:
        return
    made = [(s.made, s.pair) if s.made is not None else (None, None) for _, s in rows]
    conn.execute(
        _UPDATE_TUPLES,
        (
            [k[0] for k, _ in rows],
            [k[1] for k, _ in rows],
            [k[2] for k, _ in rows],
            [k[3] for k, _ in rows],
            [None if m is None else m.id for m, _ in made],
            [None if m is None else run_id for m, _ in made],
            *([None if p is None else p[i] for _, p in made] for i in range(4)),
            [s.ambiguous for _, s in rows],
        ),
    )


# ----------------------------------------------------------------- traces

_TRACE_LOCK = (
    "SELECT count(pg_advisory_xact_lock(a, b)) "
    "FROM (SELECT a, b FROM unnest(%s::int[], %s::int[]) AS k(a, b) ORDER BY a, b) s"
)
"""Lock every trace of a batch, in ascending order, after its 4-tuples (the two-key form is a
key space of its own: a trace never waits for a 4-tuple's lock)."""

_STORE_SPANS = """
INSERT INTO ob_span_ends AS t (trace_id, span_id, parent_span_id, span_ns,
    host_id, obs_id, time_ns, channel, node, run_id)
SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::bigint[],
    %b::text[], %b::text[], %b::bigint[], %b::text[], %b::bytea[], %b::text[])
ON CONFLICT (trace_id, span_id) DO UPDATE SET
    parent_span_id = coalesce(t.parent_span_id, EXCLUDED.parent_span_id),
    span_ns = coalesce(t.span_ns, EXCLUDED.span_ns),
    host_id = coalesce(t.host_id, EXCLUDED.host_id),
    obs_id = CASE WHEN t.host_id IS NULL THEN EXCLUDED.obs_id ELSE t.obs_id END,
    time_ns = CASE WHEN t.host_id IS NULL THEN EXCLUDED.time_ns ELSE t.time_ns END,
    channel = CASE WHEN t.host_id IS NULL THEN EXCLUDED.channel ELSE t.channel END,
    node = CASE WHEN t.host_id IS NULL THEN EXCLUDED.node ELSE t.node END,
    run_id = CASE WHEN t.host_id IS NULL THEN EXCLUDED.run_id ELSE t.run_id END
WHERE (t.parent_span_id IS NULL AND EXCLUDED.parent_span_id IS NOT NULL)
   OR (t.host_id IS NULL AND EXCLUDED.host_id IS NOT NULL)
"""
"""The batch's spans, one row each: a raw span's parent link, a span observation's node and
shipping host (``NULL`` where the batch has not that part). What is stored stays (the first
stored of each part); a row that gains nothing is not rewritten (a resend writes nothing). The
arrays go in binary (``%b``): the node encodings are bytes, which the text format escapes."""

TRACE_JOINS = """
WITH k AS (SELECT * FROM unnest(%(trace)s::text[], %(span)s::text[]) AS k(trace_id, span_id)),
cand AS (
    SELECT c.trace_id, c.span_id FROM k JOIN ob_span_ends c
        ON c.trace_id = k.trace_id AND c.span_id = k.span_id
    UNION
    SELECT c.trace_id, c.span_id FROM k JOIN ob_span_ends c
        ON c.trace_id = k.trace_id AND c.parent_span_id = k.span_id
)
UPDATE ob_span_ends c SET joined_in = %(run)s
FROM cand, ob_span_ends p
WHERE c.trace_id = cand.trace_id AND c.span_id = cand.span_id
  AND p.trace_id = c.trace_id AND p.span_id = c.parent_span_id
  AND c.joined_in IS NULL
  AND c.host_id IS NOT NULL AND p.host_id IS NOT NULL
  AND c.host_id <> p.host_id
RETURNING c.parent_span_id, c.trace_id, c.span_id,
    c.host_id, c.node, c.obs_id, c.channel, c.time_ns,
    p.trace_id, p.span_id, p.host_id, p.node, p.obs_id, p.channel, p.time_ns
"""
"""The trace rule in SQL, for every span the batch touched at once, as a child (its own row)
and as a parent (the rows naming it as parent): a child whose parent span, in the same trace,
was shipped by another host (:func:`~otel_bridge.processors.crosshost.join.may_join_spans`),
not joined before. Marks each such child joined in ``run`` and returns both spans' nodes."""


def _trace_key(trace: str) -> tuple[int, int]:
    digest = hashlib.blake2b(trace.encode(), digest_size=8).digest()
    return (
        int.from_bytes(digest[:4], "big", signed=True),
        int.from_bytes(digest[4:], "big", signed=True),
    )


def _node(row: Sequence[Any], known: dict[tuple[str, str], SpanNode]) -> SpanNode:
    """A span's node from its returned columns (``row``: trace id, span id, then the node's),
    or from ``known`` (the batch's own nodes, the same: the first stored stays) when the batch
    stored it, to spare the decoding."""
    trace, span, host, node, obs_id, channel, time_ns = row
    mine = known.get((str(trace), str(span)))
    if mine is not None and mine.obs_id == obs_id and mine.host == host:
        return mine
    entity = jsonl.entity_from_dict(msgspec.msgpack.decode(node), "ob_span_ends.node")
    return SpanNode(str(host), entity, str(obs_id), Channel(channel), int(time_ns))


def join_spans(
    conn: psycopg.Connection[Any],
    run_id: str,
    observations: Sequence[Observation],
    spans: Sequence[Span],
) -> list[Observation]:
    """Store the span nodes among ``observations`` and the parent links of ``spans``, and make
    the trace joins they complete (module docstring), in ``run_id``; the joins in (trace, span)
    order. Runs inside the caller's transaction: lock the traces, store the spans, join (three
    statements whatever the number of spans; none without spans)."""
    nodes: dict[tuple[str, str], SpanNode] = {}
    for o in observations:
        shipped = span_node(o)
        if shipped is not None:
            nodes.setdefault(shipped[:2], shipped[2])
    links: dict[tuple[str, str], tuple[str, int]] = {}
    for s in spans:
        link = span_parent(s)
        if link is not None:
            links.setdefault(link[:2], (link[2], s.start_time_unix_nano))
    if not nodes and not links:
        return []
    touched = sorted({*nodes, *links})
    keys = sorted({_trace_key(t) for t, _ in touched})
    conn.execute(_TRACE_LOCK, ([a for a, _ in keys], [b for _, b in keys]))
    conn.execute(_STORE_SPANS, _span_columns(touched, links, nodes, run_id))
    params = {"trace": [t for t, _ in touched], "span": [s for _, s in touched], "run": run_id}
    made = [
        trace_join((str(r[1]), str(r[2]), str(r[0])), _node(r[1:8], nodes), _node(r[8:15], nodes))
        for r in conn.execute(TRACE_JOINS, params).fetchall()
    ]
    return sorted(made, key=lambda j: j.id)


def _span_columns(
    keys: list[tuple[str, str]],
    links: dict[tuple[str, str], tuple[str, int]],
    nodes: dict[tuple[str, str], SpanNode],
    run_id: str,
) -> tuple[list[Any], ...]:
    link = [links.get(k) for k in keys]
    node = [nodes.get(k) for k in keys]
    return (
        [t for t, _ in keys],
        [s for _, s in keys],
        [None if x is None else x[0] for x in link],
        [None if x is None else x[1] for x in link],
        [None if n is None else n.host for n in node],
        [None if n is None else n.obs_id for n in node],
        [None if n is None else n.time for n in node],
        [None if n is None else n.channel.value for n in node],
        [None if n is None else msgspec.msgpack.encode(jsonl.entity_to_dict(n.node)) for n in node],
        [None if n is None else run_id for n in node],
    )
