"""The PostgreSQL evidence store: schema and migrations, the writer the ``postgres`` exporter
uses, and the readers behind ``--db`` (``docs/store.md``).

psycopg 3 is an optional dependency (the ``postgres`` extra): importing this package does not
import it; :func:`driver` does, and raises :class:`StoreError` with the install hint when it is
missing.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from otel_bridge.errors import OtelBridgeError
from otel_bridge.store.schema import LATEST, LOCK_KEY, MIGRATIONS, VERSION_TABLE

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "MISSING_DRIVER",
    "StoreError",
    "connect",
    "driver",
    "driver_available",
    "migrate",
    "redact_url",
    "status",
]

MISSING_DRIVER = (
    "the PostgreSQL store needs psycopg 3, which is not installed: "
    "pip install 'otel-bridge[postgres]'"
)


class StoreError(OtelBridgeError):
    """The store cannot be used: no driver, no connection, an unknown schema version."""


def driver_available() -> bool:
    """True when psycopg 3 can be imported."""
    try:
        importlib.import_module("psycopg")
    except ImportError:
        return False
    return True


def driver() -> Any:
    """The ``psycopg`` module; :class:`StoreError` (with the install hint) when missing."""
    try:
        return importlib.import_module("psycopg")
    except ImportError:
        raise StoreError(MISSING_DRIVER) from None


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable database URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectOptions:
    """Connection settings besides the URL (all optional)."""

    password: str = ""
    sslmode: str = ""
    sslrootcert: str = ""
    sslcert: str = ""
    sslkey: str = ""
    connect_timeout: float = 10.0
    application_name: str = "otel-bridge"


def connect(url: str, options: ConnectOptions | None = None) -> psycopg.Connection[Any]:
    """A new connection to ``url`` (``postgresql://user@host:port/db``).

    Raises :class:`StoreError` naming the (redacted) URL when the driver is missing or the
    server cannot be reached.
    """
    pg = driver()
    opts = options or ConnectOptions()
    kwargs: dict[str, Any] = {
        "connect_timeout": max(1, int(opts.connect_timeout)),
        "application_name": opts.application_name,
        # Every statement commits unless inside ``conn.transaction()``, which then is a real
        # transaction (not a savepoint of an implicit one left open by an earlier read).
        "autocommit": True,
    }
    for name in ("password", "sslmode", "sslrootcert", "sslcert", "sslkey"):
        value = getattr(opts, name)
        if value:
            kwargs[name] = value
    try:
        conn: psycopg.Connection[Any] = pg.connect(url, **kwargs)
    except pg.Error as exc:
        raise StoreError(f"cannot connect to {redact_url(url)}: {_first_line(exc)}") from None
    # JSON columns decoded by orjson (a base dependency): a graph read decodes one per row.
    importlib.import_module("psycopg.types.json").set_json_loads(orjson.loads, conn)
    return conn


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def applied_versions(conn: psycopg.Connection[Any]) -> list[int]:
    """Schema versions recorded in ``ob_schema_version`` ([] when the table is absent)."""
    with conn.cursor() as cur:
        cur.execute("SELECT to_regclass('ob_schema_version') IS NOT NULL")
        row = cur.fetchone()
        if row is None or not row[0]:
            return []
        cur.execute("SELECT version FROM ob_schema_version ORDER BY version")
        return [int(r[0]) for r in cur.fetchall()]


def migrate(conn: psycopg.Connection[Any]) -> list[int]:
    """Apply the schema steps ``conn``'s database lacks; returns the versions applied ([] when
    it was up to date). Each step is one transaction; an advisory lock serializes writers."""
    applied: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute(VERSION_TABLE)
        have = set(applied_versions(conn))
        newer = [v for v in have if v > LATEST]
        if newer:
            raise StoreError(
                f"the database has schema version {max(newer)}, newer than this otel-bridge "
                f"understands ({LATEST}); upgrade otel-bridge"
            )
        for step in MIGRATIONS:
            if step.version in have:
                continue
            conn.execute(step.sql)
            conn.execute(
                "INSERT INTO ob_schema_version (version, description) VALUES (%s, %s)",
                (step.version, step.description),
            )
            applied.append(step.version)
    return applied


def require_schema(conn: psycopg.Connection[Any]) -> None:
    """:class:`StoreError` unless the database holds the latest schema."""
    versions = applied_versions(conn)
    current = max(versions) if versions else 0
    if current != LATEST:
        raise StoreError(
            f"the database schema is at version {current}, this otel-bridge needs {LATEST}: "
            "run `otel-bridge db migrate --db URL`"
        )


def status(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Schema version, pending steps, and row counts (``otel-bridge db status``)."""
    versions = applied_versions(conn)
    current = max(versions) if versions else 0
    out: dict[str, Any] = {
        "schema_version": current,
        "latest": LATEST,
        "pending": [m.version for m in MIGRATIONS if m.version not in versions],
    }
    if current:
        with conn.cursor() as cur:
            for table in ("ob_runs", "ob_hosts", "ob_nodes", "ob_edges", "ob_coverage"):
                cur.execute(f"SELECT count(*) FROM {table}")
                row = cur.fetchone()
                out[table.removeprefix("ob_")] = int(row[0]) if row else 0
            if current >= 3:  # the store's cross-host join (docs/store.md)
                cur.execute(
                    "SELECT (SELECT count(*) FROM ob_conn_ends), count(join_id), "
                    "coalesce(sum(ambiguous), 0) FROM ob_conn_tuples"
                )
                row = cur.fetchone()
                if row is not None:
                    out["connection_ends"], out["connections_joined"] = int(row[0]), int(row[1])
                    out["connections_ambiguous"] = int(row[2])
            if current >= 4:  # the store's cross-host trace join
                cur.execute("SELECT count(*), count(joined_in) FROM ob_span_ends")
                row = cur.fetchone()
                if row is not None:
                    out["span_ends"], out["traces_joined"] = int(row[0]), int(row[1])
            cur.execute(
                "SELECT parent, count(*), min(lower_bound), max(upper_bound) "
                "FROM ob_partitions GROUP BY parent ORDER BY parent"
            )
            out["partitions"] = {
                str(p): {"count": int(n), "from": str(lo), "to": str(hi)}
                for p, n, lo, hi in cur.fetchall()
            }
    return out
