"""The ``--db URL`` options the readers share (``graph``, ``review``, ``compare``, ``view``)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from otel_bridge.errors import OtelBridgeError
from otel_bridge.identity import iso_to_ms


def add_db_options(p: argparse.ArgumentParser) -> None:
    """``--db URL`` and the selectors (``docs/store.md``, *Readers*)."""
    g = p.add_argument_group("evidence store (instead of a file; docs/store.md)")
    g.add_argument("--db", metavar="URL", help="read from PostgreSQL: postgresql://user@host/db")
    g.add_argument("--run", default="", metavar="ID", help="with --db: one run")
    g.add_argument(
        "--host",
        dest="db_host",
        default="",
        metavar="HOST_ID",
        help="with --db: one host's evidence",
    )
    g.add_argument("--task", default="", help="with --db: the runs of one task")
    g.add_argument("--service", default="", help="with --db: the runs of one service")
    g.add_argument(
        "--since",
        default="",
        metavar="TIME",
        help="with --db: from this time (ISO 8601 or Unix ns)",
    )
    g.add_argument(
        "--until",
        default="",
        metavar="TIME",
        help="with --db: before this time (ISO 8601 or Unix ns)",
    )


def parse_time(text: str, option: str) -> int | None:
    """Unix nanoseconds of ``text`` (ISO 8601, ``Z`` or an offset, naive is UTC; or an integer
    of ns); None when empty. Millisecond precision for ISO times."""
    if not text:
        return None
    if text.isdigit():
        return int(text)
    ms = iso_to_ms(text)
    if ms is None:
        raise OtelBridgeError(f"{option}: not a time: {text!r} (e.g. 2026-12-01T10:00:00Z)")
    return ms * 1_000_000


def selector_of(args: argparse.Namespace) -> Any:
    """The :class:`~otel_bridge.store.reader.Selector` of the parsed options."""
    from otel_bridge.store.reader import Selector  # noqa: PLC0415 - loads the graph code

    return Selector(
        run=args.run,
        host=args.db_host,
        task=args.task,
        service=args.service,
        since_ns=parse_time(args.since, "--since"),
        until_ns=parse_time(args.until, "--until"),
    )


def read_db(args: argparse.Namespace) -> dict[str, Any]:
    """The graph document the options select from ``--db``."""
    from otel_bridge.store import connect  # noqa: PLC0415
    from otel_bridge.store.reader import read_graph  # noqa: PLC0415

    selector = selector_of(args)
    conn = connect(args.db)
    try:
        return read_graph(conn, selector)
    finally:
        conn.close()


def required_file(args: argparse.Namespace, name: str, attr: str = "file") -> str:
    """The positional file argument, which is required without ``--db``."""
    value = getattr(args, attr)
    if not value:
        raise OtelBridgeError(f"give {name} or --db URL")
    return str(value)


def stored_run_dir(args: argparse.Namespace, dest: str | None) -> str:
    """The one run the options select, written as a run directory at ``dest`` (default
    ``./db-run-<id>``); returns its path (``docs/store.md``, *Readers*)."""
    from otel_bridge.store import connect  # noqa: PLC0415
    from otel_bridge.store.rundir_export import (  # noqa: PLC0415
        default_dir,
        select_one_run,
        write_run_dir,
    )

    conn = connect(args.db)
    try:
        run_id = select_one_run(conn, selector_of(args))
        return write_run_dir(conn, run_id, dest or default_dir(run_id)).path
    finally:
        conn.close()


def stored_run_dirs(args: argparse.Namespace, parent: str) -> list[str]:
    """Every run the options select, each written as a run directory under ``parent``."""
    from otel_bridge.store import StoreError, connect  # noqa: PLC0415
    from otel_bridge.store.reader import select_runs  # noqa: PLC0415
    from otel_bridge.store.rundir_export import write_run_dir  # noqa: PLC0415

    selector = selector_of(args)
    conn = connect(args.db)
    try:
        runs = select_runs(conn, selector)
        if not runs:
            raise StoreError(f"no stored run matches {selector.describe()}")
        return [
            write_run_dir(conn, run_id, os.path.join(parent, f"run-{i}")).path
            for i, run_id in enumerate(runs)
        ]
    finally:
        conn.close()
