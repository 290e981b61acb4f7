"""The PostgreSQL schema of the evidence store and its migrations (``docs/store.md``).

Every migration is one numbered step of SQL applied in one transaction, recorded in
``ob_schema_version``. :func:`migrate` applies the steps a database lacks, holding an advisory
lock so two collectors starting together do not race; re-running it is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass

LOCK_KEY = 0x0B5704E
"""The advisory lock ``migrate`` holds (any constant shared by every writer)."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step."""

    version: int
    description: str
    sql: str


_V1 = """
CREATE TABLE ob_hosts (
    host_id     text PRIMARY KEY,
    first_seen  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE ob_runs (
    run_id              text PRIMARY KEY,
    host_id             text REFERENCES ob_hosts (host_id),
    service             text NOT NULL DEFAULT '',
    task                text NOT NULL DEFAULT '',
    run                 jsonb NOT NULL DEFAULT '{}',
    first_seen          bigint,
    last_seen           bigint,
    observations        bigint NOT NULL DEFAULT 0,
    coverage            jsonb NOT NULL DEFAULT '{}',
    coverage_by_channel jsonb NOT NULL DEFAULT '{}',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ob_runs_task ON ob_runs (task);
CREATE INDEX ob_runs_service ON ob_runs (service);
CREATE TABLE ob_run_hosts (
    run_id  text NOT NULL REFERENCES ob_runs (run_id) ON DELETE CASCADE,
    host_id text NOT NULL REFERENCES ob_hosts (host_id),
    PRIMARY KEY (run_id, host_id)
);
CREATE TABLE ob_nodes (
    run_id          text NOT NULL REFERENCES ob_runs (run_id) ON DELETE CASCADE,
    id              text NOT NULL,
    key             text NOT NULL,
    kind            text NOT NULL,
    label           text NOT NULL,
    facts           jsonb,
    attrs           jsonb NOT NULL,
    channels        text[] NOT NULL,
    backends        text[] NOT NULL,
    first_seen      bigint,
    last_seen       bigint,
    logical_count   bigint NOT NULL,
    evidence_count  bigint NOT NULL,
    PRIMARY KEY (run_id, id)
);
CREATE INDEX ob_nodes_key ON ob_nodes (key);
CREATE INDEX ob_nodes_kind ON ob_nodes (kind);
CREATE TABLE ob_edges (
    run_id          text NOT NULL REFERENCES ob_runs (run_id) ON DELETE CASCADE,
    source          text NOT NULL,
    relation        text NOT NULL,
    target          text NOT NULL,
    id              text NOT NULL,
    source_key      text NOT NULL,
    target_key      text NOT NULL,
    grade           text NOT NULL,
    causal          text,
    inferred        text,
    identity_exact  text,
    attribution     text[] NOT NULL,
    method          jsonb,
    score           double precision,
    channels        text[] NOT NULL,
    backends        text[] NOT NULL,
    support         text[],
    derived_support text[] NOT NULL,
    attrs           jsonb NOT NULL,
    first_seen      bigint,
    last_seen       bigint,
    logical_count   bigint NOT NULL,
    evidence_count  bigint NOT NULL,
    PRIMARY KEY (run_id, source, relation, target)
);
CREATE INDEX ob_edges_keys ON ob_edges (source_key, relation, target_key);
CREATE INDEX ob_edges_grade ON ob_edges (grade);
CREATE TABLE ob_observations (
    run_id      text NOT NULL,
    id          text NOT NULL,
    part_time   timestamptz NOT NULL,
    seq         bigint NOT NULL,
    time_ns     bigint NOT NULL,
    end_ns      bigint NOT NULL,
    host_id     text NOT NULL,
    channel     text NOT NULL,
    backend     text NOT NULL,
    record_id   text NOT NULL,
    relation    text,
    subject_id  text NOT NULL,
    subject_key text NOT NULL,
    object_id   text,
    object_key  text,
    grade       text,
    causal      boolean,
    inferred    boolean,
    method      text,
    occurrence  text NOT NULL,
    record      bytea NOT NULL,
    PRIMARY KEY (run_id, host_id, id, part_time)
) PARTITION BY RANGE (part_time);
CREATE INDEX ob_observations_run_seq ON ob_observations (run_id, seq);
CREATE TABLE ob_spans (
    run_id          text NOT NULL,
    trace_id        text NOT NULL,
    span_id         text NOT NULL,
    part_time       timestamptz NOT NULL,
    seq             bigint NOT NULL,
    parent_span_id  text NOT NULL,
    name            text NOT NULL,
    service         text NOT NULL,
    start_ns        bigint NOT NULL,
    end_ns          bigint NOT NULL,
    record          bytea NOT NULL,
    PRIMARY KEY (run_id, trace_id, span_id, part_time)
) PARTITION BY RANGE (part_time);
CREATE INDEX ob_spans_run_seq ON ob_spans (run_id, seq);
CREATE TABLE ob_logs (
    run_id      text NOT NULL,
    digest      text NOT NULL,
    part_time   timestamptz NOT NULL,
    seq         bigint NOT NULL,
    time_ns     bigint NOT NULL,
    host_id     text NOT NULL,
    os_event    boolean NOT NULL,
    event_name  text NOT NULL,
    record      bytea NOT NULL,
    PRIMARY KEY (run_id, digest, part_time)
) PARTITION BY RANGE (part_time);
CREATE INDEX ob_logs_run_seq ON ob_logs (run_id, seq);
CREATE TABLE ob_coverage (
    run_id      text NOT NULL REFERENCES ob_runs (run_id) ON DELETE CASCADE,
    digest      text NOT NULL,
    seq         bigint NOT NULL,
    time_ns     bigint NOT NULL,
    channel     text NOT NULL,
    backend     text NOT NULL,
    record_id   text NOT NULL,
    reason      text NOT NULL,
    detail      text NOT NULL,
    PRIMARY KEY (run_id, digest)
);
CREATE TABLE ob_partitions (
    name        text PRIMARY KEY,
    parent      text NOT NULL,
    lower_bound timestamptz NOT NULL,
    upper_bound timestamptz NOT NULL
);
"""

_V2 = """
CREATE TABLE ob_blocks (
    run_id      text NOT NULL,
    block       bigint NOT NULL,
    part_time   timestamptz NOT NULL,
    records     integer NOT NULL,
    data        bytea NOT NULL,
    PRIMARY KEY (run_id, block, part_time)
) PARTITION BY RANGE (part_time);
ALTER TABLE ob_observations ALTER COLUMN record DROP NOT NULL,
    ADD COLUMN block bigint, ADD COLUMN pos integer;
ALTER TABLE ob_spans ALTER COLUMN record DROP NOT NULL,
    ADD COLUMN block bigint, ADD COLUMN pos integer;
ALTER TABLE ob_logs ALTER COLUMN record DROP NOT NULL,
    ADD COLUMN block bigint, ADD COLUMN pos integer;
ALTER TABLE ob_observations DROP CONSTRAINT ob_observations_pkey,
    ADD PRIMARY KEY (run_id, part_time, host_id, id);
ALTER TABLE ob_spans DROP CONSTRAINT ob_spans_pkey,
    ADD PRIMARY KEY (run_id, part_time, trace_id, span_id);
ALTER TABLE ob_logs DROP CONSTRAINT ob_logs_pkey,
    ADD PRIMARY KEY (run_id, part_time, digest);
ALTER TABLE ob_runs ADD COLUMN next_seq bigint NOT NULL DEFAULT 0;
UPDATE ob_runs r SET next_seq = coalesce(1 + greatest(
    (SELECT max(seq) FROM ob_observations t WHERE t.run_id = r.run_id),
    (SELECT max(seq) FROM ob_coverage t WHERE t.run_id = r.run_id),
    (SELECT max(seq) FROM ob_spans t WHERE t.run_id = r.run_id),
    (SELECT max(seq) FROM ob_logs t WHERE t.run_id = r.run_id)
), 0);
DROP INDEX ob_spans_run_seq;
DROP INDEX ob_logs_run_seq;
"""

_V3 = """
CREATE TABLE ob_conn_ends (
    n               bigserial PRIMARY KEY,
    client_address  text NOT NULL,
    client_port     integer NOT NULL,
    server_address  text NOT NULL,
    server_port     integer NOT NULL,
    connecting      boolean NOT NULL,
    host_id         text NOT NULL,
    process_id      text NOT NULL,
    run_id          text NOT NULL,
    obs_id          text NOT NULL,
    time_ns         bigint NOT NULL,
    channel         text NOT NULL,
    process         bytea NOT NULL,
    UNIQUE (host_id, obs_id)
);
CREATE INDEX ob_conn_ends_tuple ON ob_conn_ends
    (server_address, server_port, client_address, client_port, time_ns);
CREATE INDEX ob_conn_ends_time ON ob_conn_ends (time_ns);
CREATE TABLE ob_conn_tuples (
    client_address  text NOT NULL,
    client_port     integer NOT NULL,
    server_address  text NOT NULL,
    server_port     integer NOT NULL,
    join_id         text,
    run_id          text,
    client_host     text,
    client_process  text,
    server_host     text,
    server_process  text,
    ambiguous       integer NOT NULL DEFAULT 0,
    PRIMARY KEY (client_address, client_port, server_address, server_port)
);
"""

_V4 = """
CREATE TABLE ob_span_ends (
    trace_id        text NOT NULL,
    span_id         text NOT NULL,
    parent_span_id  text,
    span_ns         bigint,
    host_id         text,
    obs_id          text,
    time_ns         bigint,
    channel         text,
    node            bytea,
    run_id          text,
    joined_in       text,
    PRIMARY KEY (trace_id, span_id)
);
CREATE INDEX ob_span_ends_parent ON ob_span_ends (trace_id, parent_span_id);
CREATE INDEX ob_span_ends_time ON ob_span_ends (coalesce(time_ns, span_ns)) WHERE joined_in IS NULL;
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1, "runs, hosts, nodes, edges, coverage; partitioned observations, spans and logs", _V1
    ),
    Migration(
        2,
        "raw records in one compressed block per batch (ob_blocks); keys led by part_time; "
        "the run's next sequence number in ob_runs (no seq index on spans and logs)",
        _V2,
    ),
    Migration(
        3,
        "cross-host connection join in the store: connection ends by 4-tuple (ob_conn_ends), "
        "each 4-tuple's join or ambiguity (ob_conn_tuples)",
        _V3,
    ),
    Migration(
        4,
        "cross-host trace join in the store: spans by (trace id, span id) with their parent "
        "span id and shipping host, and the run that joined each child (ob_span_ends)",
        _V4,
    ),
)
"""Every schema step, in order. Append; never edit a released step."""

LATEST = MIGRATIONS[-1].version

VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS ob_schema_version (
    version     integer PRIMARY KEY,
    description text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""
