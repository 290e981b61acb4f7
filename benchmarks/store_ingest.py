"""PostgreSQL store ingest: N spans and M OS events through normalize into the ``postgres``
exporter (``docs/store.md``).

The workload is split into ``--runs`` runs (one exporter instance each, one after the other, as
runs of one task arrive). Per run, an agent's spans (``invoke_agent``, ``chat`` and
``execute_tool`` with GenAI attributes, every span distinct) and the host receiver's OS events
(``process.start`` for a few processes, then ``file.open`` and ``file.write`` records built by
the host receiver's own ``EventFactory`` over a bounded set of paths) are interleaved, one span
to ``M/N`` events, in batches of ``--batch`` records, normalized by the real ``Normalizer`` and
consumed by the real ``PostgresExporter`` (COPY into the partitioned raw tables, the graph rows
upserted every ``--flush-interval`` seconds and at the end of each run).

Reported: the sustained ingest rate (spans + events per second of wall time, from the first
batch to the last run's final upsert), this process's CPU time per record (the server's CPU is
not in it), the database size (``pg_database_size``, and per table with indexes) per million
input records, and the latency of reading one run's graph back (``read_graph`` of the rows,
median of 3) and of the replay path (a time-range read of the same run).

Without ``--db`` the benchmark starts its own server (``initdb`` + ``pg_ctl`` in a temporary
directory, as the ``postgres`` user when run as root; ``fsync`` stays on). Usage::

    python benchmarks/store_ingest.py                         # 1,000,000 spans, 5,000,000 events
    python benchmarks/store_ingest.py --spans 20000 --os-events 100000
    python benchmarks/store_ingest.py --db postgresql://me@127.0.0.1:5432/bench
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import pwd
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from otel_bridge.component import Host, Telemetry
from otel_bridge.exporters.postgres import Config, PostgresExporter
from otel_bridge.model import Batch, LogRecord, Resource, Scope, Span, SpanKind
from otel_bridge.processors.normalize import Normalizer
from otel_bridge.receivers.host.events import Emitter, EventFactory
from otel_bridge.store import connect
from otel_bridge.store.reader import Selector, read_graph
from otel_bridge.testing import RecordingConsumer

T0 = 1_767_225_600_000_000_000
PATHS = 10_000
"""Distinct file paths per run: the graph's size is bounded by them, the raw tables are not."""


def server_cpu(data: str, settle: float = 10.0) -> float:
    """CPU seconds the server at ``data`` used so far: the postmaster's own and its reaped
    children's (connections that closed), plus every live child's (Linux ``/proc``); waits up
    to ``settle`` seconds for client connections to close first (0: reads at once)."""
    with open(os.path.join(data, "postmaster.pid"), encoding="utf-8") as f:
        postmaster = int(f.readline())
    tick = os.sysconf("SC_CLK_TCK")

    def fields(pid: int) -> list[str]:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()

    def backends() -> list[str]:
        """The live children's pids that serve a client connection (a closed one's CPU
        counts only once the postmaster has reaped it)."""
        found = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"bench postgres 127.0.0.1" in f.read() and fields(int(entry))[1] == str(
                        postmaster
                    ):
                        found.append(entry)
            except (OSError, ValueError):
                continue
        return found

    deadline = time.monotonic() + settle
    while backends() and time.monotonic() < deadline:  # the last connection closing
        time.sleep(0.05)
    total = sum(int(x) for x in fields(postmaster)[11:15])  # utime stime cutime cstime
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = fields(int(entry))
            except OSError:  # exited meanwhile
                continue
            if int(stat[1]) == postmaster:
                total += int(stat[11]) + int(stat[12])
    return total / tick


def start_server() -> tuple[str, Any]:
    """A private server in a temporary directory; its URL and a stop function (with the data
    directory as its ``data`` attribute, for :func:`server_cpu`)."""
    bindirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    if not bindirs:
        sys.exit("PostgreSQL binaries not found (apt-get install postgresql), or pass --db URL")
    bindir = bindirs[0]
    root = tempfile.mkdtemp(prefix="otel-bridge-bench-pg-")
    data = os.path.join(root, "data")
    run_as: list[str] = []
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    initdb = os.path.join(bindir, "initdb")
    subprocess.run(
        [*run_as, initdb, "-D", data, "-U", "bench", "--auth=trust"], check=True, **quiet
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctl = [*run_as, os.path.join(bindir, "pg_ctl"), "-D", data]
    opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_wal_size=4GB"
    subprocess.run([*ctl, "-o", opts, "-l", f"{data}/log", "-w", "start"], check=True, **quiet)

    def stop() -> None:
        subprocess.run([*ctl, "-m", "fast", "-w", "stop"], check=True, **quiet)
        shutil.rmtree(root, ignore_errors=True)

    stop.data = data  # type: ignore[attr-defined]
    stop.command = " ".join([*ctl, "-m", "fast", "-w", "stop"]) + f" && rm -rf {root}"  # type: ignore[attr-defined]
    return f"postgresql://bench@127.0.0.1:{port}/postgres", stop


def _span(run: int, i: int, trace: bytes, resource: Resource, scope: Scope) -> Span:
    kind = i % 3
    attrs: dict[str, Any]
    if kind == 0:
        name = "invoke_agent planner"
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
    elif kind == 1:
        name = "chat gpt-4o"
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.id": f"resp-{run}-{i}",
            "gen_ai.usage.input_tokens": 100 + i % 50,
        }
    else:
        name = "execute_tool shell"
        attrs = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "shell",
            "gen_ai.tool.call.id": f"call-{run}-{i}",
            "gen_ai.tool.call.arguments": '{"command": "ls -la /tmp"}',
        }
    start = T0 + run * 10**12 + i * 1000
    return Span(
        resource=resource,
        scope=scope,
        trace_id=trace,
        span_id=(run << 40 | i + 1).to_bytes(8, "big"),
        name=name,
        kind=SpanKind.CLIENT if kind == 1 else SpanKind.INTERNAL,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 500,
        attributes=attrs,
    )


def _events(run: int, count: int, factory: EventFactory) -> Iterator[LogRecord]:
    """``process.start`` of 8 processes, then file events of those over ``PATHS`` paths."""
    from otel_bridge.receivers.host.procfs import ProcessInfo

    base = T0 + run * 10**12
    pids = [10_000 + run * 10 + p for p in range(8)]
    for n, pid in enumerate(pids[: min(8, count)]):
        info = ProcessInfo(
            pid=pid,
            ppid=1,
            start_ms=base // 1_000_000 + n,
            exe="/usr/bin/python3",
            argv=["python3", "agent.py"],
            cwd="/srv/work",
        )
        factory.remember(info)
        yield factory.process_event("process.start", info, base + n, attribution="syscall")
    for i in range(max(0, count - len(pids))):
        pid = pids[i % len(pids)]
        attrs = factory.identity_attrs(pid)
        attrs["file.path"] = f"/srv/work/data/part-{i % PATHS:05d}.csv"
        name = "file.write" if i % 4 == 0 else "file.open"
        yield factory.record(name, base + 1000 + i, attrs, attribution="syscall", causal=True)


def workload(
    run: int, spans: int, events: int, batch: int, host: str = "bench-host"
) -> Iterator[Batch]:
    """The run's input, interleaved, in batches of ``batch`` records; spans and OS events carry
    ``host.id`` ``host``."""
    resource = Resource(attributes={"service.name": "bench-agent", "host.id": host})
    scope = Scope(name="bench")
    emitter = Emitter(RecordingConsumer(), Telemetry(), batch_size=batch, interval=1.0)
    factory = EventFactory("linux", f"bench-{run}", emitter)
    if host != "bench-host":
        factory.resource = Resource(attributes={**factory.resource.attributes, "host.id": host})
    event_iter = _events(run, events, factory)
    per_span = events / max(1, spans)
    made_spans = made_events = 0
    while made_spans < spans or made_events < events:
        out_spans: list[Span] = []
        out_logs: list[LogRecord] = []
        while len(out_spans) + len(out_logs) < batch:
            if made_spans < spans and (
                made_events >= events or made_events >= made_spans * per_span
            ):
                trace = (run << 64 | made_spans // 50 + 1).to_bytes(16, "big")
                out_spans.append(_span(run, made_spans, trace, resource, scope))
                made_spans += 1
            elif made_events < events:
                out_logs.append(next(event_iter))
                made_events += 1
            else:
                break
        yield Batch(spans=tuple(out_spans), logs=tuple(out_logs))


def ingest(url: str, args: argparse.Namespace, data: str | None) -> dict[str, float]:
    """Run the workload into ``url``; wall and CPU seconds (the server's when ``data``, its
    data directory, is given)."""
    normalizer = Normalizer()
    server0 = server_cpu(data) if data else 0.0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    store_cpu = 0.0
    per_run_spans = args.spans // args.runs
    per_run_events = args.os_events // args.runs
    for run in range(args.runs):
        exporter = PostgresExporter(
            Config(
                endpoint=url,
                run_id=f"bench-{run}",
                task="bench",
                flush_interval=args.flush_interval,
            )
        )
        exporter.start(Host())
        for batch in workload(run, per_run_spans, per_run_events, args.batch):
            normalized = normalizer(batch)
            c = time.process_time()
            exporter.consume(normalized)
            store_cpu += time.process_time() - c
        c = time.process_time()
        exporter.shutdown()
        store_cpu += time.process_time() - c
        print(
            f"  run {run + 1}/{args.runs} stored ({time.perf_counter() - wall0:.0f} s)", flush=True
        )
    return {
        "wall": time.perf_counter() - wall0,
        "cpu": time.process_time() - cpu0,
        "exporter": store_cpu,
        "server": server_cpu(data) - server0 if data else float("nan"),
    }


def sizes(url: str) -> dict[str, int]:
    """Database size and per-table totals (with indexes and partitions) in bytes."""
    with connect(url) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        out = {"database": int(row[0]) if row else 0}
        for table in (
            "ob_observations",
            "ob_spans",
            "ob_logs",
            "ob_blocks",
            "ob_nodes",
            "ob_edges",
        ):
            found = conn.execute(  # tables and partitions (their indexes once, not again)
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "WHERE c.relkind IN ('r', 'p') AND (c.relname = %s OR c.relname LIKE %s)",
                (table, f"{table}\\_p2%"),
            ).fetchone()
            out[table] = int(found[0]) if found else 0
    return out


def print_sizes(size: dict[str, int], records: int) -> None:
    """Print :func:`sizes`'s figures, in total and per million input records."""
    per_million = 1e6 / records
    print(
        f"database: {size['database'] / 2**20:,.1f} MiB, "
        f"{size['database'] * per_million / 2**20:,.1f} MiB per million input records"
    )
    for table, n in size.items():
        if table != "database":
            print(f"  {table}: {n / 2**20:,.1f} MiB ({n * per_million / 2**20:,.1f} MiB/M)")


def read_latency(url: str) -> dict[str, Any]:
    """Seconds to read run 0's graph from its rows and by replay (medians of 3), its size."""
    times: dict[str, list[float]] = {"rows": [], "replay": []}
    doc: dict[str, Any] = {}
    with connect(url) as conn:
        for _ in range(3):
            t = time.perf_counter()
            doc = read_graph(conn, Selector(run="bench-0"))
            times["rows"].append(time.perf_counter() - t)
            t = time.perf_counter()
            read_graph(conn, Selector(run="bench-0", since_ns=0))
            times["replay"].append(time.perf_counter() - t)
    return {
        "rows": statistics.median(times["rows"]),
        "replay": statistics.median(times["replay"]),
        "nodes": len(doc.get("nodes", ())),
        "edges": len(doc.get("edges", ())),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spans", type=int, default=1_000_000)
    p.add_argument("--os-events", type=int, default=5_000_000)
    p.add_argument("--runs", type=int, default=10, help="runs the workload is split into")
    p.add_argument("--batch", type=int, default=2048, help="records per consumed batch")
    p.add_argument("--flush-interval", type=float, default=30.0, help="graph row upserts (s)")
    p.add_argument("--db", help="an existing database (default: a private server)")
    args = p.parse_args(argv)
    url, stop = (args.db, None) if args.db else start_server()
    try:
        took = ingest(url, args, getattr(stop, "data", None))
        size = sizes(url)
        read = read_latency(url)
    finally:
        if stop is not None:
            stop()
    records = args.spans + args.os_events
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    print(
        f"input: {args.spans} spans + {args.os_events} OS events in {args.runs} runs, "
        f"batches of {args.batch}"
    )
    print(
        f"ingest: {records / took['wall']:,.0f} records/s sustained ({took['wall']:.1f} s wall), "
        f"client CPU {took['cpu'] / records * 1e6:.1f} us/record "
        f"(the exporter {took['exporter'] / records * 1e6:.1f}), "
        f"server CPU {took['server'] / records * 1e6:.1f} us/record"
    )
    print_sizes(size, records)
    print(
        f"read one run's graph ({read['nodes']} nodes, {read['edges']} edges): "
        f"rows {read['rows'] * 1000:,.0f} ms, replay {read['replay'] * 1000:,.0f} ms (medians of 3)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
