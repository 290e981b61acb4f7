"""Fleet scale (issue 17): N spans and M OS events from simulated agents through gateway
process(es) into PostgreSQL.

Each simulated agent (its own ``host.id``) ships what ``configs/agent.yaml`` ships: its spans
(``invoke_agent``, ``chat``, ``execute_tool``, every one distinct) over the OTLP trace service,
and in one OTLP logs request per agent batch its raw OS log records (the host receiver's own
``EventFactory``: a few ``process.start``, then ``file.open``/``file.write`` over 10,000 paths)
plus the evidence records (``evidence_to_logs``'s encoding) of every observation the real
``Normalizer`` derives from the batch's spans and OS records. The workload is
``store_ingest.workload``; the gateway configuration is ``gateway_ingest``'s: the gateway's
processors (``logs_to_evidence`` with its key file, ``crosshost``) and the ``postgres`` exporter
alone (one run per gateway process), plain loopback gRPC (no TLS, no token).

Phases, so that generation is not in the ingest figures:

1. generate: each agent's requests are encoded once, batch by batch, into a file of
   length-prefixed request bytes (two processes; memory bounded by one batch); their CPU
   time is reported as "generation";
2. send: one sender process per agent streams its file over OTLP/gRPC (two calls in flight)
   to the gateway(s); with ``--gateways 2`` every gateway binds one port (``reuse_port``) and
   the kernel assigns each agent's connection to one of them. Every ~30 s a progress line:
   input records and observations acknowledged, the rates over the last interval and overall,
   the gateways' CPU and the load average;
3. stop the gateways (their final graph upsert), then check with count queries that every
   observation, span and log record is stored exactly once, read the database size by table
   (``pg_total_relation_size``, indexes included) and time ``otel-bridge graph --db URL --run
   ID`` for the largest run (a gateway's).

Sustained ingest is the rate between 10 % and 90 % of the acknowledged input (the steady part);
CPU per record is the gateways' and the PostgreSQL server's (``/proc``), over the whole send.

Usage::

    python benchmarks/fleet_scale.py                                  # 1 M spans, 5 M events
    python benchmarks/fleet_scale.py --spans 20000 --os-events 100000 # 1/50
    python benchmarks/fleet_scale.py --gateways 2                     # two behind one port
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gateway_ingest import REPO, cpu_seconds, start_gateway
from store_ingest import print_sizes, server_cpu, sizes, start_server, workload

from otel_bridge.testing import free_port

_LOGS = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
_TRACES = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_FRAME = struct.Struct("<cIII")
"""One request in an agent's file: kind (``L`` logs, ``T`` traces), input records, observations,
length of the request bytes that follow."""


def generate(agent: int, spans: int, events: int, batch: int, path: str) -> dict[str, float]:
    """Write agent ``agent``'s requests to ``path``; its totals and the CPU seconds it took."""
    from otel_bridge.otlp.proto_codec import encode_logs, encode_traces
    from otel_bridge.processors.crosshost import wire
    from otel_bridge.processors.normalize import Normalizer

    cpu0 = time.process_time()
    host = f"scale-host-{agent:04d}"
    resource = wire.evidence_resource(host, f"scale-instance-{agent}")
    normalizer = Normalizer()
    totals = {"spans": 0, "os_events": 0, "observations": 0, "requests": 0, "bytes": 0}
    with open(path, "wb") as out:
        for raw in workload(agent, spans, events, batch, host):
            done = normalizer(raw)
            evidence = wire.encode(resource, done.observations, done.coverage, 2048)
            logs = encode_logs([*raw.logs, *evidence]).SerializeToString()
            out.write(_FRAME.pack(b"L", len(raw.logs), len(done.observations), len(logs)))
            out.write(logs)
            if raw.spans:
                traces = encode_traces(raw.spans).SerializeToString()
                out.write(_FRAME.pack(b"T", len(raw.spans), 0, len(traces)))
                out.write(traces)
                totals["requests"] += 1
                totals["bytes"] += len(traces)
            totals["spans"] += len(raw.spans)
            totals["os_events"] += len(raw.logs)
            totals["observations"] += len(done.observations)
            totals["requests"] += 1
            totals["bytes"] += len(logs)
    return {**totals, "cpu": time.process_time() - cpu0}


def _frames(path: str) -> Any:
    with open(path, "rb") as f:
        while header := f.read(_FRAME.size):
            kind, records, observations, size = _FRAME.unpack(header)
            yield kind, records, observations, f.read(size)


def _sender(port: int, path: str, acked: Any, ready: Any, go: Any) -> None:
    """Stream ``path``'s requests to ``port``, two in flight; ``acked`` holds the input records
    and observations acknowledged so far, then this process's CPU seconds once done."""
    import grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    calls = {
        b"L": channel.unary_unary(_LOGS, None, None),
        b"T": channel.unary_unary(_TRACES, None, None),
    }
    grpc.channel_ready_future(channel).result(timeout=60)
    ready.put(True)
    go.wait()
    in_flight: list[tuple[Any, int, int]] = []

    def settle() -> None:
        future, records, observations = in_flight.pop(0)
        future.result()
        acked[0] += records
        acked[1] += observations

    for kind, records, observations, body in _frames(path):
        if len(in_flight) == 2:
            settle()
        in_flight.append((calls[kind].future(body, timeout=600), records, observations))
    while in_flight:
        settle()
    acked[2] = int(time.process_time() * 1e6)
    acked[3] = 1


def _progress(
    senders: list[Any], gateways: list[Any], total: int, interval: float
) -> dict[str, Any]:
    """Watch the send until every sender is done; the samples and the load averages."""
    samples: list[tuple[float, int, int]] = []
    loads: list[float] = []
    start = time.monotonic()
    cpu0 = sum(cpu_seconds(p.pid) for p in gateways)
    last_print, last = start, (0, 0)
    while True:
        time.sleep(1.0)  # a sampling period, not synchronisation: the loop reads counters
        now = time.monotonic()
        records = sum(a[0] for a, _ in senders)
        observations = sum(a[1] for a, _ in senders)
        samples.append((now - start, records, observations))
        loads.append(os.getloadavg()[0])
        finished = all(a[3] for a, _ in senders)
        failed = [p.exitcode for _, p in senders if p.exitcode not in (None, 0)]
        if failed:
            raise RuntimeError(f"a sender failed: exit codes {failed}")
        if now - last_print >= interval or finished:
            span = now - last_print
            cpu = sum(cpu_seconds(p.pid) for p in gateways) - cpu0
            print(
                f"  {now - start:7.0f} s: {records:,}/{total:,} input records, "
                f"{observations:,} observations acknowledged; last {span:.0f} s: "
                f"{(records - last[0]) / span:,.0f} records/s, "
                f"{(observations - last[1]) / span:,.0f} obs/s; overall "
                f"{records / (now - start):,.0f} records/s; gateway CPU {cpu:,.0f} s; "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            last_print, last = now, (records, observations)
        if finished:
            return {"samples": samples, "loads": loads, "gateway_cpu": cpu}


def _steady(samples: list[tuple[float, int, int]], total: int) -> tuple[float, float, float]:
    """(records/s, observations/s, seconds) between 10 % and 90 % of the input."""
    inside = [s for s in samples if 0.1 * total <= s[1] <= 0.9 * total]
    if len(inside) < 2:
        inside = [samples[0], samples[-1]]
    (t0, r0, o0), (t1, r1, o1) = inside[0], inside[-1]
    took = max(t1 - t0, 1e-9)
    return (r1 - r0) / took, (o1 - o0) / took, took


def _counts(url: str, runs: list[str]) -> dict[str, int]:
    """Rows stored for ``runs``: observations (and distinct ids), spans, log records, and each
    run's (gateway's) observations."""
    from otel_bridge.store import connect

    with connect(url) as conn:
        out = {}
        for table, column in (
            ("ob_observations", "count(*)"),
            ("ob_observations", "count(DISTINCT (host_id, id))"),
            ("ob_spans", "count(*)"),
            ("ob_logs", "count(*)"),
        ):
            row = conn.execute(
                f"SELECT {column} FROM {table} WHERE run_id = ANY(%s)", (runs,)
            ).fetchone()
            name = table if column == "count(*)" else "distinct_observations"
            out[name] = int(row[0]) if row else 0
        for run, n in conn.execute(  # each gateway's share
            "SELECT run_id, count(*) FROM ob_observations WHERE run_id = ANY(%s) GROUP BY 1",
            (runs,),
        ).fetchall():
            out[f"observations of {run}"] = int(n)
    return out


def _read_graph(url: str, run: str, timeout: float) -> dict[str, Any]:
    """``otel-bridge graph --db URL --run RUN --json`` timed (a subprocess, as a user runs it);
    past ``timeout`` seconds it is stopped and only the timeout is reported."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    t = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "otel_bridge", "graph", "--db", url, "--run", run, "--json"],
            env=env,
            capture_output=True,
            check=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"seconds": float("inf"), "nodes": -1, "edges": -1}
    took = time.perf_counter() - t
    doc = json.loads(done.stdout)
    return {"seconds": took, "nodes": len(doc.get("nodes", ())), "edges": len(doc.get("edges", ()))}


def _generate_all(args: argparse.Namespace, tmp: str) -> tuple[list[str], dict[str, float]]:
    paths = [os.path.join(tmp, f"agent-{a:04d}.bin") for a in range(args.agents)]
    jobs = [
        (a, args.spans // args.agents, args.os_events // args.agents, args.batch, paths[a])
        for a in range(args.agents)
    ]
    t = time.perf_counter()
    with mp.get_context("spawn").Pool(args.generators) as pool:
        parts = pool.starmap(generate, jobs)
    totals = {k: sum(p[k] for p in parts) for k in parts[0]}
    totals["wall"] = time.perf_counter() - t
    return paths, totals


def _send_all(
    args: argparse.Namespace, paths: list[str], gateways: list[tuple[Any, int]], total: int
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready, go = ctx.Queue(), ctx.Event()
    senders = []
    for a, path in enumerate(paths):
        acked = ctx.Array("q", 4, lock=False)
        port = gateways[a % len(gateways)][1]
        senders.append((acked, ctx.Process(target=_sender, args=(port, path, acked, ready, go))))
    for _, s in senders:
        s.start()
    for _ in senders:
        ready.get(timeout=120)
    go.set()
    watched = _progress(senders, [p for p, _ in gateways], total, args.progress)
    for _, s in senders:
        s.join()
    watched["sender_cpu"] = sum(a[2] for a, _ in senders) / 1e6
    return watched


def run(args: argparse.Namespace, url: str, data: str | None, tmp: str) -> dict[str, Any]:
    """Generate, send, stop, check, measure (the module docstring); ``data`` is the server's
    data directory (None: its CPU is not measured)."""
    paths, made = _generate_all(args, tmp)
    total = int(made["spans"] + made["os_events"])
    print(
        f"generated: {made['spans']:,.0f} spans, {made['os_events']:,.0f} OS events, "
        f"{made['observations']:,.0f} observations in {made['requests']:,.0f} requests "
        f"({made['bytes'] / 2**30:.2f} GiB), {made['cpu']:,.0f} s CPU, {made['wall']:,.0f} s wall",
        flush=True,
    )
    port = free_port() if args.gateways > 1 else 0
    tag = f"{int(time.time())}"
    dirs = [Path(tmp) / f"scale-{tag}-gw{g}" for g in range(args.gateways)]
    server0 = server_cpu(data) if data else 0.0
    gateways = [start_gateway(d, port, url, args.flush_interval) for d in dirs]
    try:
        t = time.monotonic()
        watched = _send_all(args, paths, gateways, total)
        sent = time.monotonic() - t
        for p, _ in gateways:
            p.send_signal(signal.SIGINT)
        for p, _ in gateways:
            p.wait(timeout=3600)
        stopped = time.monotonic() - t
        gateway_cpu = watched["gateway_cpu"]
    finally:
        for p, _ in gateways:
            if p.poll() is None:
                p.kill()
                p.wait()
    server = server_cpu(data) - server0 if data else float("nan")
    runs = [d.name for d in dirs]
    counts = _counts(url, runs)
    rate, obs_rate, steady = _steady(watched["samples"], total)
    largest = max(runs, key=lambda r: counts.get(f"observations of {r}", 0))
    return {
        "made": made,
        "total": total,
        "sent_s": sent,
        "stopped_s": stopped,
        "steady": (rate, obs_rate, steady),
        "gateway_cpu": gateway_cpu,
        "server_cpu": server,
        "sender_cpu": watched["sender_cpu"],
        "loads": watched["loads"],
        "counts": counts,
        "runs": runs,
        "largest": largest,
        "sizes": sizes(url),
        "read": _read_graph(url, largest, args.read_timeout),
    }


def report(args: argparse.Namespace, r: dict[str, Any]) -> bool:
    """Print the figures; True when everything was stored exactly once."""
    made, counts, total = r["made"], r["counts"], r["total"]
    obs = made["observations"]
    loads = r["loads"]
    rate, obs_rate, steady = r["steady"]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average (1 min) during the send: min "
        f"{min(loads):.1f}, mean {sum(loads) / len(loads):.1f}, max {max(loads):.1f}"
    )
    print(
        f"input: {made['spans']:,.0f} spans + {made['os_events']:,.0f} OS events "
        f"({obs:,.0f} observations) from {args.agents} agents, {args.gateways} gateway(s)"
        + (" behind one port (reuse_port)" if args.gateways > 1 else "")
    )
    print(
        f"sustained (10-90 %, {steady:,.0f} s): {rate:,.0f} input records/s, "
        f"{obs_rate:,.0f} observations/s; whole send {total / r['sent_s']:,.0f} records/s "
        f"({r['sent_s']:,.0f} s; gateways stopped after {r['stopped_s']:,.0f} s)"
    )
    print(
        f"CPU per input record: gateways {r['gateway_cpu'] / total * 1e6:.1f} us, PostgreSQL "
        f"server {r['server_cpu'] / total * 1e6:.1f} us, senders "
        f"{r['sender_cpu'] / total * 1e6:.1f} us; "
        f"generation (not in the run) {made['cpu'] / total * 1e6:.1f} us"
    )
    print(
        f"CPU per observation: gateways {r['gateway_cpu'] / obs * 1e6:.1f} us, server "
        f"{r['server_cpu'] / obs * 1e6:.1f} us"
    )
    once: bool = (
        counts["ob_observations"] == obs
        and counts["distinct_observations"] == obs
        and counts["ob_spans"] == made["spans"]
        and counts["ob_logs"] == made["os_events"]
    )
    print(f"stored: {json.dumps(counts)}; exactly once: {'yes' if once else 'NO'}")
    print_sizes(r["sizes"], total)
    read = r["read"]
    print(
        f"otel-bridge graph --db URL --run {r['largest']} (the largest run): "
        f"{read['seconds']:,.1f} s "
        f"({read['nodes']:,} nodes, {read['edges']:,} edges)",
        flush=True,
    )
    return once


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (``argv``: ``sys.argv[1:]`` by default)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spans", type=int, default=1_000_000)
    p.add_argument("--os-events", type=int, default=5_000_000)
    p.add_argument("--agents", type=int, default=8, help="simulated agents (hosts)")
    p.add_argument("--gateways", type=int, default=1, help=">1: behind one port (reuse_port)")
    p.add_argument("--batch", type=int, default=300, help="records per agent batch")
    p.add_argument("--generators", type=int, default=2, help="generation processes")
    p.add_argument("--flush-interval", default="1s", help="postgres graph upserts")
    p.add_argument("--progress", type=float, default=30.0, help="seconds between lines")
    p.add_argument("--read-timeout", type=float, default=1800.0, help="graph read limit (s)")
    p.add_argument("--db", help="an existing database (its server's CPU is then not measured)")
    p.add_argument(
        "--keep", action="store_true", help="leave the private server running at the end"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print; 1 when something was not stored exactly once."""
    args = parse_args(argv)
    url, stop = (args.db, None) if args.db else start_server()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: server {url}", flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="otel-bridge-scale-") as tmp:
            result = run(args, url, getattr(stop, "data", None), tmp)
        once = report(args, result)
    finally:
        if stop is not None and args.keep:
            print(f"kept: {url}; stop it with: {stop.command}", flush=True)
        elif stop is not None:
            stop()  # the data directory is removed with it
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}: done", flush=True)
    return 0 if once else 1


if __name__ == "__main__":
    sys.exit(main())
