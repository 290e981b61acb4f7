"""The store's cross-host join: what it costs per connection end (``docs/store.md``,
*Cross-host joins*).

N connections between two hosts, each seen from both ends (the client's ``network.connect`` on
host A, the server's ``network.accept`` on host B, normalized by the real ``Normalizer``), are
stored by the real ``PostgresExporter`` in batches of ``--batch`` observations: every client end
first, then every server end (each server end completes one join). The same ends are stored
twice on one private server, as two runs of one database, one after the other: once with
``crosshost_join: false`` (the ends stored as any observation) and once with it on. Reported:
the joins made, and for each pass this process's CPU and the server's CPU per end; the
ratio of the two passes is the figure to read (wall-clock times on a shared machine are not).

With ``--traces N`` the same for the trace join instead: N traces of two spans, a parent
shipped by host A's agent and its child by host B's, as a gateway's exporter receives them (the
raw spans and their normalized observations stamped with the shipping host, as
``logs_to_evidence`` does): every parent first, then every child (each completes one join).
The figures are per span.

Usage::

    python benchmarks/store_join.py                    # 20,000 connections (40,000 ends)
    python benchmarks/store_join.py --connections 2000
    python benchmarks/store_join.py --traces 20000     # 20,000 traces (40,000 spans)
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import msgspec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from store_ingest import server_cpu, start_server  # noqa: E402

from otel_bridge.component import Host  # noqa: E402
from otel_bridge.exporters.postgres import Config, PostgresExporter  # noqa: E402
from otel_bridge.identity import iso_ms  # noqa: E402
from otel_bridge.model import Batch, Observation, Resource, Scope, Span, SpanKind  # noqa: E402
from otel_bridge.processors.crosshost.wire import AGENT_HOST_ATTR  # noqa: E402
from otel_bridge.processors.normalize import Normalizer  # noqa: E402
from otel_bridge.store import connect  # noqa: E402
from otel_bridge.testing import connection_record  # noqa: E402

T0 = 1_800_000_000_000_000_000
START = iso_ms(1_800_000_000_000 - 5_000)


def ends(connections: int) -> list[Observation]:
    """Every client end, then every server end."""
    clients, servers = [], []
    for i in range(connections):
        client = (f"10.1.{i // 50_000}.{1 + i // 250 % 200}", 10_000 + i % 50_000)
        server = ("10.2.0.1", 443)
        t = T0 + i * 1_000_000
        clients.append(
            connection_record(
                "network.connect", "host-a", 100 + i % 64, (client, server), t, start=START
            )
        )
        servers.append(
            connection_record(
                "network.accept", "host-b", 7, (server, client), t + 500_000, start=START
            )
        )
    normalizer = Normalizer()
    return list(normalizer(Batch(logs=tuple(clients + servers))).observations)


def _span(trace: int, sid: int, parent: int) -> Span:
    return Span(
        resource=Resource(attributes={"service.name": "server" if parent else "client"}),
        scope=Scope(name="app"),
        trace_id=trace.to_bytes(16, "big"),
        span_id=sid.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name="server.handle" if parent else "client.call",
        kind=SpanKind.SERVER if parent else SpanKind.CLIENT,
        start_time_unix_nano=T0 + trace * 1_000_000,
        end_time_unix_nano=T0 + trace * 1_000_000 + 500_000,
    )


def traces(n: int, batch: int) -> list[Batch]:
    """Every parent's batches, then every child's: raw spans and their observations."""
    out = []
    normalizer = Normalizer()
    for host, sids in (("host-a", (0, 0)), ("host-b", (1, 0))):
        for k in range(0, n, batch // 2):
            spans = tuple(
                _span(1 + i, 2 * i + 1 + sids[0], (2 * i + 1) if sids[0] else 0)
                for i in range(k, min(n, k + batch // 2))
            )
            obs = tuple(
                msgspec.structs.replace(o, attrs={**o.attrs, AGENT_HOST_ATTR: host})
                for o in normalizer(Batch(spans=spans)).observations
            )
            out.append(Batch(spans=spans, observations=obs))
    return out


def store_batches(url: str, run: str, batches: list[Batch], join: bool) -> float:
    """Store ``batches`` as run ``run`` (whether the store joins); this process's CPU seconds."""
    exporter = PostgresExporter(
        Config(endpoint=url, run_id=run, flush_interval=3600, crosshost_join=join)
    )
    exporter.start(Host())
    cpu = time.process_time()
    for b in batches:
        exporter.consume(b)
    exporter.shutdown()
    return time.process_time() - cpu


def store(url: str, run: str, observations: list[Observation], how: tuple[int, bool]) -> float:
    """Store ``observations`` as run ``run`` in batches (``how``: their size, whether the store
    joins); this process's CPU seconds."""
    batch, join = how
    exporter = PostgresExporter(
        Config(endpoint=url, run_id=run, flush_interval=3600, crosshost_join=join)
    )
    exporter.start(Host())
    cpu = time.process_time()
    for k in range(0, len(observations), batch):
        exporter.consume(Batch(observations=tuple(observations[k : k + batch])))
    exporter.shutdown()
    return time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    """Run both passes and print the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--connections", type=int, default=20_000)
    p.add_argument("--traces", type=int, default=0, help="measure the trace join instead")
    p.add_argument("--batch", type=int, default=2048, help="observations per consumed batch")
    args = p.parse_args(argv)
    observations = [] if args.traces else ends(args.connections)
    spans = traces(args.traces, args.batch) if args.traces else []
    url, stop = start_server()
    data = stop.data
    figures: dict[str, tuple[float, float]] = {}
    joins: dict[str, int] = {}
    try:
        for join in (False, True):  # two runs of one database: only the second joins
            name = "join" if join else "plain"
            server0 = server_cpu(data)
            if spans:
                client = store_batches(url, name, spans, join)
            else:
                client = store(url, name, observations, (args.batch, join))
            figures[name] = (client, server_cpu(data) - server0)
            with connect(url) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM ob_observations WHERE run_id = %s "
                    "AND backend = 'crosshost'",
                    (name,),
                ).fetchone()
            joins[name] = int(row[0]) if row else 0
    finally:
        stop()
    n = sum(len(b.spans) for b in spans) if spans else len(observations)
    unit = "span" if spans else "end"
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    if spans:
        print(
            f"input: {args.traces} traces, {n} spans with their observations, {len(spans)} batches"
        )
    else:
        print(f"input: {args.connections} connections, {n} ends, batches of {args.batch}")
    for name in ("plain", "join"):
        client, server = figures[name]
        print(
            f"{name}: client CPU {client / n * 1e6:.1f} us/{unit}, server CPU "
            f"{server / n * 1e6:.1f} us/{unit}, joins {joins[name]}"
        )
    (c0, s0), (c1, s1) = figures["plain"], figures["join"]
    ratio = f"x{s1 / s0:.2f}" if s0 > 0 else "n/a (no server CPU measured)"
    print(
        f"join/plain: client CPU x{c1 / c0:.2f}, server CPU {ratio}, "
        f"client + server x{(c1 + s1) / (c0 + s0):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
