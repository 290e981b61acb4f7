"""Memory flood: does the memory limiter hold its hard limit, and recover once the flood stops?

    python benchmarks/memory_flood.py [--seconds 20] [--clients 8] [--headroom 96]
                                      [--grow [--max-nodes N]]
    python benchmarks/memory_flood.py --graph-bytes

A real collector (``python -m otel_bridge run``: OTLP/HTTP -> memory_limiter -> normalize ->
graph) is started once to read its resting RSS, then again with ``limit_mib`` set to that RSS
plus ``--headroom`` MiB (spike limit a quarter of the headroom). ``--clients`` threads post
1,000-span OTLP/protobuf bodies as fast as they are answered, honouring 429 + Retry-After, for
``--seconds``; the collector's RSS is sampled every 10 ms from outside (psutil). Bodies cycle
through a fixed pool of two (2,000 distinct spans), so the graph stays a fixed size and what
presses on memory is the data in flight. After the flood, one more request must be accepted
(recovery).

``--grow`` makes every body 1,000 new spans, so the graph itself grows with the flood; with
``--max-nodes N`` the graph exporter is bounded (``bounds.max_nodes``) and spills the rest to
``graph.spill``, and the other state kept per span is bounded alike (``normalize``'s
``span_cache_size`` and the graph's ``occurrence_window`` set to N); without it the graph grows
past the hard limit.

Prints the limits, the peak RSS against the hard limit, requests accepted and refused (429).

``--graph-bytes`` instead measures the graph's bytes per node and edge (``tracemalloc``) at two
realistic shapes, the figures ``docs/exporters.md`` sizes the bundled bounds with.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]

from waiting import Stderr, wait_until  # noqa: E402

from otel_bridge.otlp.proto_codec import encode_traces  # noqa: E402
from otel_bridge.testing import free_port, make_span  # noqa: E402

CONFIG = """
receivers:
  otlp:
    protocols:
      http: {endpoint: "127.0.0.1:${env:PORT}"}
processors:
  memory_limiter:
    limit_mib: ${env:LIMIT}
    spike_limit_mib: ${env:SPIKE}
    check_interval: 1s
  normalize:
    span_cache_size: ${env:SPAN_CACHE}
exporters:
  graph:
    output: "${env:WORK}/graph.json"
    flush_interval: 0
    occurrence_window: ${env:WINDOW}
    bounds:
      max_nodes: ${env:MAX_NODES}
      spill: "${env:WORK}/graph.spill"
service:
  pipelines:
    traces: {receivers: [otlp], processors: [memory_limiter, normalize], exporters: [graph]}
"""
MIB = 1024 * 1024


def _start(
    work: Path, limit: int, spike: int, max_nodes: int = 0
) -> tuple[subprocess.Popen[str], int]:
    port = free_port()
    env = {**os.environ, "PORT": str(port), "LIMIT": str(limit), "SPIKE": str(spike)}
    env["MAX_NODES"] = str(max_nodes)
    # bounded: the other state the pipeline keeps per span is bounded alike (docs/exporters.md)
    env["SPAN_CACHE"] = str(max_nodes or 100_000)
    env["WINDOW"] = str(max_nodes or 200_000)
    env["WORK"] = str(work)
    (work / "flood.yaml").write_text(CONFIG)
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge", "run", "-c", str(work / "flood.yaml")],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    Stderr(proc, timeout=60).wait_for(r"running \(pid")
    return proc, port


def _post(port: int, body: bytes) -> tuple[int, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        headers = {"Content-Type": "application/x-protobuf"}
        conn.request("POST", "/v1/traces", body, headers)
        response = conn.getresponse()
        response.read()
        return response.status, float(response.getheader("Retry-After") or 0)
    finally:
        conn.close()


def _body(b: int) -> bytes:
    """1,000 distinct spans (the ``b``-th thousand) with a 100-byte attribute each."""
    spans = [make_span(b * 1000 + i, attributes={"pad": "x" * 100}) for i in range(1000)]
    return bytes(encode_traces(spans).SerializeToString())


def _bodies(n: int) -> list[bytes]:
    return [_body(b) for b in range(n)]


def _high_water_mark(pid: int) -> int:
    """The kernel's peak RSS of ``pid`` in bytes (``VmHWM``), 0 where /proc has none."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _graph_summary(work: Path) -> dict[str, object]:
    try:
        summary: dict[str, object] = json.loads((work / "graph.json").read_text())["summary"]
    except (OSError, ValueError, KeyError):
        return {}
    return summary


def _traced_bytes(batches: list[tuple[Any, ...]]) -> tuple[int, int, int]:
    """``tracemalloc`` bytes the graph exporter's accumulator (its defaults) keeps after applying
    ``batches``, with its node and edge counts."""
    from otel_bridge.graph import GraphAccumulator

    gc.collect()
    tracemalloc.start()
    accumulator = GraphAccumulator(retain_support=True)
    base = tracemalloc.get_traced_memory()[0]
    for observations in batches:
        accumulator.apply_many(observations)
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return used, accumulator.node_count, accumulator.edge_count


def graph_bytes() -> None:
    """Print the graph's bytes per node/edge at two realistic shapes (``docs/exporters.md``)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from pipeline_instructions import os_records
    from pipeline_throughput import build_requests

    from otel_bridge.model import Batch
    from otel_bridge.otlp.proto_codec import decode_traces
    from otel_bridge.processors.normalize import Normalizer

    normalizer = Normalizer()
    spans = [
        normalizer(Batch(spans=decode_traces(raw).records))
        for sender in range(4)
        for raw in build_requests(sender, 1000, 5)
    ]
    normalizer = Normalizer()
    records = os_records(20_000)
    logs = [
        normalizer(Batch(logs=tuple(records[i : i + 1000]))) for i in range(0, len(records), 1000)
    ]
    for name, outs in (("agent-like spans", spans), ("OS file.open records", logs)):
        used, nodes, edges = _traced_bytes([o.observations if o else () for o in outs])
        print(
            f"{name:22} {used / 1e6:.1f} MB for {nodes} nodes + {edges} edges: "
            f"{used / (nodes + edges):.0f} bytes per element"
        )


def main() -> int:
    """Run the flood; print the figures; exit 1 if the hard limit was passed or no recovery."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--headroom", type=int, default=96)
    parser.add_argument("--grow", action="store_true", help="every body 1,000 new spans")
    parser.add_argument("--max-nodes", type=int, default=0, help="bound the graph (0: none)")
    parser.add_argument(
        "--graph-bytes", action="store_true", help="measure bytes per graph element, no flood"
    )
    args = parser.parse_args()
    if args.graph_bytes:
        graph_bytes()
        return 0
    bodies = _bodies(2)
    with tempfile.TemporaryDirectory(prefix="otel-bridge-flood-") as tmp:
        work = Path(tmp)
        probe, port = _start(work, 100_000, 1000)
        _post(port, bodies[0])
        resting = psutil.Process(probe.pid).memory_info().rss // MIB
        probe.terminate()
        probe.wait(60)
        limit = resting + args.headroom
        spike = args.headroom // 4
        proc, port = _start(work, limit, spike, args.max_nodes)
        counts = {"accepted": 0, "refused": 0, "other": 0}
        peak = [0]
        stop = threading.Event()
        lock = threading.Lock()
        fresh = itertools.count(len(bodies))

        def sample() -> None:
            p = psutil.Process(proc.pid)
            while not stop.is_set():
                peak[0] = max(peak[0], p.memory_info().rss)
                stop.wait(0.01)  # the sampling period, not synchronisation

        def client(k: int) -> None:
            i = k
            body = bodies[i % len(bodies)]
            while not stop.is_set():
                status, retry = _post(port, body)
                key = {200: "accepted", 429: "refused"}.get(status, "other")
                with lock:
                    counts[key] += 1
                if status == 429:
                    stop.wait(retry)  # the client honours Retry-After, as an SDK does
                    continue  # and sends the same body again
                i += 1
                body = _body(next(fresh)) if args.grow else bodies[i % len(bodies)]

        threads = [threading.Thread(target=sample)]
        threads += [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        started = time.monotonic()
        for t in threads:
            t.start()
        stop.wait(args.seconds)  # the flood's duration
        stop.set()
        for t in threads:
            t.join(120)
        elapsed = time.monotonic() - started
        try:
            recovered = wait_until(lambda: _post(port, bodies[0])[0] == 200, 60, "recovery")
        except AssertionError:
            recovered = False
        after = psutil.Process(proc.pid).memory_info().rss // MIB
        hwm = _high_water_mark(proc.pid)
        proc.terminate()
        proc.wait(60)
        summary = _graph_summary(work)
    soft = limit - spike
    print(f"resting RSS                 {resting} MiB")
    print(f"limits (soft / hard)        {soft} / {limit} MiB")
    print(
        f"peak RSS during the flood   {peak[0] / MIB:.1f} MiB ({peak[0] / MIB / limit:.1%} of hard)"
    )
    print(f"peak RSS (kernel VmHWM)     {hwm / MIB:.1f} MiB ({hwm / MIB / limit:.1%} of hard)")
    print(f"requests accepted           {counts['accepted']} ({counts['accepted'] * 1000} spans)")
    print(f"requests refused (429)      {counts['refused']}")
    print(f"other answers               {counts['other']}")
    print(f"flood seconds               {elapsed:.0f} with {args.clients} clients")
    print(f"accepted after the flood    {bool(recovered)} (RSS then {after} MiB)")
    print(f"graph nodes / observations  {summary.get('nodes')} / {summary.get('observations')}")
    print(f"graph summary.bounded       {summary.get('bounded')}")
    return 0 if max(peak[0], hwm) <= limit * MIB and recovered and not counts["other"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
