"""``otel-bridge db``: the PostgreSQL evidence store's schema and retention (``docs/store.md``).

* ``db migrate --db URL``: apply the missing schema steps (a no-op when current);
* ``db status --db URL``: schema version, pending steps, row and partition counts (JSON);
* ``db prune --db URL --older-than 30d``: drop raw-record partitions older than that.

The password comes from ``PGPASSWORD`` (or ``~/.pgpass``), never the URL on a command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from otel_bridge.errors import OtelBridgeError


def register(subparsers: Any) -> None:
    """Add the ``db`` subcommand."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "db",
        help="the PostgreSQL evidence store: migrate, status, prune",
        description="Manage the PostgreSQL evidence store the postgres exporter writes.",
    )
    sub = p.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    for name, text in (
        ("migrate", "apply the missing schema migrations (idempotent)"),
        ("status", "print the schema version, pending migrations and row counts as JSON"),
        ("prune", "drop raw-record partitions older than --older-than"),
    ):
        q = sub.add_parser(name, help=text, description=text)
        q.add_argument("--db", required=True, metavar="URL", help="postgresql://user@host:port/db")
        if name == "prune":
            q.add_argument(
                "--older-than", required=True, metavar="AGE", help="e.g. 30d, 12h, 3600s"
            )
    p.set_defaults(func=run)


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``15m``, ``3600s`` or plain seconds."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    value = text.strip().lower()
    scale = units.get(value[-1:])
    number = value[:-1] if scale is not None else value
    try:
        seconds = float(number) * (scale or 1)
    except ValueError:
        raise OtelBridgeError(f"--older-than: not an age: {text!r} (e.g. 30d, 12h)") from None
    if seconds <= 0:
        raise OtelBridgeError("--older-than: must be positive")
    return timedelta(seconds=seconds)


def run(args: argparse.Namespace) -> int:
    """Execute the command."""
    from otel_bridge.store import connect, migrate, require_schema, status  # noqa: PLC0415
    from otel_bridge.store.writer import drop_partitions_before  # noqa: PLC0415

    conn = connect(args.db)
    try:
        if args.db_command == "migrate":
            applied = migrate(conn)
            print(f"applied {applied}" if applied else "schema up to date, nothing applied")
        elif args.db_command == "status":
            sys.stdout.write(json.dumps(status(conn), indent=2, sort_keys=True) + "\n")
        else:
            age = parse_age(args.older_than)
            require_schema(conn)
            dropped = drop_partitions_before(conn, datetime.now(UTC) - age)
            print(
                f"dropped {len(dropped)} partitions"
                + (f": {', '.join(dropped)}" if dropped else "")
            )
    finally:
        conn.close()
    return 0
