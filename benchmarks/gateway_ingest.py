"""Gateway ingest: what agents ship, through ``configs/gateway.yaml``, in records per second.

Each simulated agent (its own ``host.id``) owns a stream of OS events (process starts, file
opens, connections) that the real ``normalize`` processor turns into observations, which
``evidence_to_logs``'s encoding packs into evidence records; a request carries one agent batch:
its raw OS log records plus its evidence records, as ``configs/agent.yaml`` ships it. Sender
processes send the pre-built ``ExportLogsServiceRequest`` bytes over OTLP/gRPC (two calls in
flight each) to real gateway processes (``otel-bridge run`` with ``configs/gateway.yaml``'s
processors and exporters: ``logs_to_evidence`` with its key file, ``crosshost``, the graph with
its journal, the JSON-lines file). TLS and the token are left out (loopback): their cost is not
in the figures.

With ``--gateways 2`` the agents are split by host between two gateway processes, as the
Collector's load-balancing exporter routing by ``host.id`` would split them; with
``--shared-port`` every gateway binds one port (``reuse_port``, SO_REUSEPORT) and every agent
sends to it: the kernel assigns each agent's connection to a gateway. ``--store`` replaces the
gateways' exporters by ``postgres`` alone (one run per gateway process) into the given database,
or a private server (``store_ingest.start_server``); "applied once" then counts stored rows.

Usage::

    python benchmarks/gateway_ingest.py --observations 200000 --agents 4 --gateways 1 2
    python benchmarks/gateway_ingest.py --gateways --stages 20000
    python benchmarks/gateway_ingest.py --observations 20000 --gateways 1 2 --shared-port --store

Prints per run: observations and raw OS records accepted per second (first request sent ->
last acknowledged), the gateways' CPU time per observation (user + system, from ``/proc``; unlike
wall time it does not depend on what else runs on a shared machine), and checks that every
observation reached the graph once. ``--stages N`` adds each stage's CPU per observation, in one
thread without gRPC: the OTLP decode, the two processors, and what the ``file`` and ``graph``
exporters each add.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from otel_bridge.identity import iso_ms  # noqa: E402
from otel_bridge.model import AnyValue, Batch, LogRecord  # noqa: E402
from otel_bridge.otlp.proto_codec import encode_logs  # noqa: E402
from otel_bridge.processors.crosshost import wire  # noqa: E402
from otel_bridge.processors.normalize import Normalizer  # noqa: E402
from otel_bridge.testing import free_port, os_record  # noqa: E402

BATCH = 256
"""OS records per agent batch (the host receiver's default ``batch_size``)."""
_BANNER = re.compile(r"OTLP/grpc on [\d.]+:(\d+)")
_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


def _record(host: str, n: int, t: int) -> LogRecord:
    pid = 1000 + n // 8
    kind = n % 8
    attrs: dict[str, AnyValue]
    if kind == 0:
        name = "process.start"
        attrs = {
            "process.parent_pid": 1,
            "process.executable.path": "/usr/bin/python3",
            "process.executable.name": "python3",
            "process.command_args": ("python3", "tool.py", str(n)),
        }
    elif kind < 6:
        name = "file.open"
        attrs = {"file.path": f"/srv/work/{pid}/file{kind}.txt", "file.access": "read"}
    else:
        name = "network.connect"
        attrs = {
            "network.transport": "tcp",
            "network.local.address": "10.1.0.1",
            "network.local.port": 30000 + n % 30000,
            "network.peer.address": "10.2.0.1",
            "network.peer.port": 443,
        }
    start = iso_ms(t // 1_000_000 - 1000)
    return os_record(name, host, pid, t, attrs, start=start, backend="linux", rid=f"linux:{n}")


def agent_requests(agent: int, observations: int) -> tuple[list[bytes], int, int]:
    """(requests, observations, raw records) of one simulated agent."""
    host = f"bench-host-{agent:04d}"
    resource = wire.evidence_resource(host, f"bench-instance-{agent}")
    normalizer = Normalizer()
    out: list[bytes] = []
    n = obs_total = raw_total = 0
    t0 = time.time_ns()
    while obs_total < observations:
        logs = tuple(_record(host, n + i, t0 + (n + i) * 1000) for i in range(BATCH))
        n += BATCH
        batch = normalizer(Batch(logs=logs))
        evidence = wire.encode(resource, batch.observations, batch.coverage, 2048)
        out.append(encode_logs([*logs, *evidence]).SerializeToString())
        obs_total += len(batch.observations)
        raw_total += len(logs)
    return out, obs_total, raw_total


def _sender(port: int, requests: list[bytes], ready: Any, go: Any, done: Any) -> None:
    import grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    call = channel.unary_unary(_EXPORT, None, None)
    grpc.channel_ready_future(channel).result(timeout=30)
    ready.put(True)
    go.wait()
    pending = list(requests)
    in_flight: list[Any] = []
    while pending or in_flight:
        while pending and len(in_flight) < 2:
            in_flight.append(call.future(pending.pop(0), timeout=120))
        in_flight.pop(0).result()
    done.put(time.monotonic())


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _gateway_config(directory: Path, port: int, store: str, flush: str = "5s") -> Path:
    """configs/gateway.yaml with a plain loopback receiver (no TLS, no token) on ``port`` (0: a
    free one; else shared with ``reuse_port``) and its state in ``directory``; with ``store``
    (a PostgreSQL URL) the ``postgres`` exporter only (graph rows upserted every ``flush``), the
    run named after ``directory``."""
    from otel_bridge.config import read_config

    doc: dict[str, Any] = dict(read_config(str(REPO / "configs" / "gateway.yaml")))
    grpc: dict[str, Any] = {"endpoint": f"127.0.0.1:{port}"}
    if port:
        grpc["reuse_port"] = True
    doc["receivers"] = {"otlp": {"protocols": {"grpc": grpc}}}
    if store:
        doc["exporters"] = {
            "postgres": {"endpoint": store, "run_id": directory.name, "flush_interval": flush}
        }
        doc["service"]["pipelines"]["evidence"]["exporters"] = ["postgres"]
    path = directory / "gateway.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _drain(stream: Any) -> None:
    with stream:
        stream.read()


def start_gateway(
    directory: Path, port: int = 0, store: str = "", flush: str = "5s"
) -> tuple[subprocess.Popen[str], int]:
    directory.mkdir(parents=True)
    env = dict(os.environ, OTEL_BRIDGE_GATEWAY_STATE=str(directory), PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_bridge",
            "--log-level",
            "INFO",
            "run",
            "-c",
            str(_gateway_config(directory, port, store, flush)),
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        match = _BANNER.search(line)
        if match:
            # drained from now on, so the gateway never blocks on it; closed at its end
            threading.Thread(target=_drain, args=(proc.stderr,), daemon=True).start()
            return proc, int(match[1])
    raise RuntimeError("the gateway did not start")


def _send(
    procs: list[tuple[subprocess.Popen[str], int]],
    per_agent: list[tuple[list[bytes], int, int]],
    gateways: int,
) -> tuple[float, float, float]:
    """Send every agent's requests at once; (end, start, gateways' CPU seconds)."""
    ctx = mp.get_context("spawn")
    ready, go, done = ctx.Queue(), ctx.Event(), ctx.Queue()
    senders = [
        ctx.Process(target=_sender, args=(procs[a % gateways][1], reqs, ready, go, done))
        for a, (reqs, _, _) in enumerate(per_agent)
    ]
    for s in senders:
        s.start()
    for _ in senders:
        ready.get(timeout=120)  # every sender's channel is connected
    cpu0 = sum(cpu_seconds(p.pid) for p, _ in procs)
    start = time.monotonic()
    go.set()
    end = max(done.get(timeout=600) for _ in senders)
    cpu = sum(cpu_seconds(p.pid) for p, _ in procs) - cpu0
    for s in senders:
        s.join()
    return end, start, cpu


def _stored(store: str, runs: list[str]) -> list[int]:
    """Observations stored for each of ``runs``."""
    from otel_bridge.store import connect

    with connect(store) as conn:
        counts = dict(
            conn.execute(
                "SELECT run_id, count(*) FROM ob_observations WHERE run_id = ANY(%s) "
                "GROUP BY run_id",
                (runs,),
            ).fetchall()
        )
    return [int(counts.get(r, 0)) for r in runs]


def run(
    observations: int, agents: int, gateways: int, *, shared: bool = False, store: str = ""
) -> dict[str, Any]:
    """One measurement (see the module docstring)."""
    per_agent = [agent_requests(a, observations // agents) for a in range(agents)]
    total_obs = sum(p[1] for p in per_agent)
    total_raw = sum(p[2] for p in per_agent)
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port() if shared else 0
        tag = f"{time.monotonic_ns()}"
        dirs = [Path(tmp) / f"gw{g}-{tag}" for g in range(gateways)]
        procs = [start_gateway(d, port, store) for d in dirs]
        try:
            end, start, cpu = _send(procs, per_agent, gateways)
            applied = 0
            for d, (p, _) in zip(dirs, procs, strict=True):
                p.send_signal(2)
                p.wait(timeout=300)
                if not store:
                    graph = json.loads((d / "graph.json").read_text())
                    applied += graph["summary"]["observations"]
            shares = _stored(store, [d.name for d in dirs]) if store else []
            applied = sum(shares) if store else applied
        finally:
            for p, _ in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    elapsed = end - start
    return {
        "gateways": gateways,
        "endpoint": "one shared port (SO_REUSEPORT)" if shared else "one port per gateway",
        "exporters": "postgres" if store else "graph, file",
        "observations": total_obs,
        "raw_records": total_raw,
        "observations_per_s": total_obs / elapsed,
        "raw_records_per_s": total_raw / elapsed,
        "cpu_us_per_observation": cpu / total_obs * 1e6,
        "applied_once": float(applied == total_obs),
        "stored_per_gateway": shares,
    }


def stages(observations: int) -> dict[str, float]:
    """CPU per observation of each gateway stage, in one thread without gRPC: the OTLP decode,
    ``logs_to_evidence`` + ``crosshost``, and what each exporter adds (its final write
    included)."""
    from otel_bridge.config import parse_config
    from otel_bridge.otlp.proto_codec import decode_logs
    from otel_bridge.pipeline import Collector
    from otel_bridge.registry import default_registry
    from otel_bridge.testing import recording_exporter_factory

    requests, n, _ = agent_requests(0, observations)
    t0 = time.process_time()
    batches = [Batch(logs=tuple(decode_logs(r).records)) for r in requests]
    out = {"otlp_decode_us": (time.process_time() - t0) / n * 1e6}
    exporters: dict[str, Any] = {
        "recording": None,
        "file": {"path": "records.jsonl", "flush_interval": 0, "append": True},
        "graph": {"output": "graph.json", "journal": {"path": "graph.journal"}},
    }
    for name, template in exporters.items():
        with tempfile.TemporaryDirectory() as tmp:
            registry = default_registry()
            registry.add(recording_exporter_factory("recording"))
            settings = template
            if isinstance(template, dict):
                settings = {
                    k: (f"{tmp}/{v}" if k in ("path", "output") else v) for k, v in template.items()
                }
                if "journal" in settings:
                    settings["journal"] = {"path": f"{tmp}/graph.journal"}
            processors = ["logs_to_evidence", "crosshost"]
            doc = {
                "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": "127.0.0.1:0"}}}},
                "processors": {
                    "logs_to_evidence": {"dedupe": {"path": f"{tmp}/k"}},
                    "crosshost": None,
                },
                "exporters": {name: settings},
                "service": {
                    "pipelines": {
                        "evidence": {
                            "receivers": ["otlp"],
                            "processors": processors,
                            "exporters": [name],
                        }
                    }
                },
            }
            collector = Collector(parse_config(doc, env={}, registry=registry))
            collector.start()
            t0 = time.process_time()
            for batch in batches:
                collector.inject("otlp", batch)
            collector.shutdown()
            out[f"{name}_us"] = (time.process_time() - t0) / n * 1e6
    out["processors_us"] = out.pop("recording_us")
    out["file_us"] -= out["processors_us"]
    out["graph_us"] -= out["processors_us"]
    return out


def main() -> None:
    """Parse arguments, run, print one line per run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--observations", type=int, default=200_000)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--gateways", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--stages", type=int, default=0, metavar="N", help="stage CPU over N")
    parser.add_argument(
        "--shared-port",
        action="store_true",
        help="every gateway binds one port (reuse_port) and every agent sends to it",
    )
    parser.add_argument(
        "--store",
        nargs="?",
        const="private",
        default="",
        help="gateways export to PostgreSQL only (URL; no value: a private server)",
    )
    args = parser.parse_args()
    store, stop = args.store, None
    if store == "private":
        from store_ingest import start_server

        store, stop = start_server()
    try:
        for gateways in args.gateways:
            result = run(
                args.observations, args.agents, gateways, shared=args.shared_port, store=store
            )
            print(json.dumps(result), flush=True)
    finally:
        if stop is not None:
            stop()
    if args.stages:
        print(json.dumps(stages(args.stages)))


if __name__ == "__main__":
    main()
