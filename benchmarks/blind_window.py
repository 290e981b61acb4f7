"""Blind-window benchmark: the ExecWeave VII-B protocol against the host receiver's backends.

For each (backend, polling interval, requested child sleep) cell, one tracked root workload runs
``n`` repetitions. Each repetition waits a phase drawn uniformly from [0, interval) (seeded per
cell, so deterministic), launches a short-lived child (``sleep`` via ``posix_spawn``), and opens a
real TCP connection to a harness-owned loopback server held for the child's lifetime. The root
writes an independent receipt per repetition: child pid, requested sleep, parent-observed
launch-to-wait duration, the connection's local port, and the connected-socket duration.

A *process hit* needs a ``process.start`` record for the receipt's child pid whose parent is the
root (the root's own start cannot count). A *socket hit* needs a ``network.connect`` record to
the harness port from the receipt's local port. Hits are reported out of n with the empirical
probability and Wilson 95% intervals.

    python benchmarks/blind_window.py --quick                 # a small subset
    python benchmarks/blind_window.py --backends portable     # the full portable grid (n=30)
    python benchmarks/blind_window.py --backends linux,ebpf,strace --intervals 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from bench_support import Gate, Sink, start_host, wilson

from otel_bridge.receivers.host import HostConfig
from otel_bridge.testing import LoopbackServer

LIFETIMES_MS = (5, 10, 25, 50, 100, 250, 500, 1000)
INTERVALS_MS = (20, 25, 50, 100, 250, 500)

ROOT = r"""
import json, os, random, shutil, socket, sys, time
port, interval_ms, sleep_ms, reps, seed, receipt = sys.argv[1:7]
interval, sleep_s, rng = int(interval_ms) / 1000, int(sleep_ms) / 1000, random.Random(int(seed))
sleep_bin = shutil.which("sleep")
with open(receipt, "w") as out:
    for rep in range(int(reps)):
        time.sleep(rng.uniform(0, interval))
        t0 = time.perf_counter()
        pid = os.posix_spawn(sleep_bin, ["sleep", f"{sleep_s:.3f}"], os.environ)
        s = socket.create_connection(("127.0.0.1", int(port)))
        t_conn = time.perf_counter()
        os.waitpid(pid, 0)
        t1 = time.perf_counter()
        local = s.getsockname()[1]
        s.close()
        t2 = time.perf_counter()
        out.write(json.dumps({"rep": rep, "child_pid": pid, "requested_ms": int(sleep_ms),
                              "observed_ms": (t1 - t0) * 1000, "local_port": local,
                              "socket_ms": (t2 - t_conn) * 1000}) + "\n")
        out.flush()
        time.sleep(interval + 0.03)  # let the sampler see this repetition end before the next
"""


def run_cell(
    backend: str, interval_ms: int, sleep_ms: int, reps: int, seed: int
) -> dict[str, object]:
    """Run one cell; returns hits, n, durations."""
    server = LoopbackServer()
    receipt = tempfile.mktemp(prefix="receipt-", suffix=".jsonl")
    gate = Gate(
        [
            sys.executable,
            "-c",
            ROOT,
            str(server.port),
            str(interval_ms),
            str(sleep_ms),
            str(reps),
            str(seed),
            receipt,
        ]
    )
    config = HostConfig(
        backend=backend, poll_interval=interval_ms / 1000, files=False, startup_timeout=60
    )
    sink = Sink()
    receiver = start_host(config, gate.pid, sink)
    gate.release()
    gate.wait()
    time.sleep(max(0.1, 2 * interval_ms / 1000))
    receiver.shutdown()
    server.close()
    with open(receipt) as f:
        rows = [json.loads(line) for line in f]
    os.unlink(receipt)
    starts: set[int] = set()
    local_ports: set[int] = set()
    unported = 0  # syscall backends see connect() but not the local port: count them per call
    for record in sink.logs:
        a = record.attributes  # type: ignore[attr-defined]
        name = record.event_name  # type: ignore[attr-defined]
        if name == "process.start" and a.get("process.parent_pid") == gate.pid:
            starts.add(a["process.pid"])
        elif (
            name == "network.connect"
            and a.get("network.peer.port") == server.port
            and a.get("process.pid") == gate.pid
        ):
            if "network.local.port" in a:
                local_ports.add(a["network.local.port"])
            else:
                unported += 1
    p_hits = sum(1 for r in rows if r["child_pid"] in starts)
    s_hits = sum(1 for r in rows if r["local_port"] in local_ports) + unported
    return {
        "backend": backend,
        "interval_ms": interval_ms,
        "sleep_ms": sleep_ms,
        "n": len(rows),
        "process_hits": p_hits,
        "socket_hits": min(s_hits, len(rows)),
        "median_observed_ms": statistics.median(r["observed_ms"] for r in rows),
        "median_socket_ms": statistics.median(r["socket_ms"] for r in rows),
    }


def measure_poll(interval_ms: float, seconds: float = 5.0) -> None:
    """Print the portable sampler's achieved period and CPU cost at ``interval_ms``."""
    from otel_bridge.receivers.host.portable import PortableBackend

    gate = Gate(["sleep", str(seconds + 1)])
    config = HostConfig(backend="portable", poll_interval=interval_ms / 1000, files=False)
    sink = Sink()
    cpu0 = time.process_time()
    t0 = time.monotonic()
    receiver = start_host(config, gate.pid, sink)
    gate.release()
    time.sleep(seconds)
    backend = receiver.backends[0]  # the running backend, to read its poll counters
    assert isinstance(backend, PortableBackend)
    polls, busy = backend.polls, backend.poll_seconds
    elapsed, cpu = time.monotonic() - t0, time.process_time() - cpu0
    receiver.shutdown()
    gate.wait()
    print(
        f"portable poll_interval={interval_ms:g}ms: {polls} polls in {elapsed:.2f}s "
        f"(achieved period {elapsed / polls * 1000:.2f}ms), mean poll {busy / polls * 1000:.3f}ms, "
        f"collector CPU {cpu / elapsed * 100:.1f}% of one core"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and print one row per cell."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--backends",
        default="portable,linux",
        help="comma-separated backends (default portable,linux)",
    )
    parser.add_argument("--intervals", help="comma-separated polling intervals in ms (portable)")
    parser.add_argument("--lifetimes", help="comma-separated requested child sleeps in ms")
    parser.add_argument("--reps", type=int, default=30, help="repetitions per cell (default 30)")
    parser.add_argument(
        "--event-interval",
        type=int,
        default=20,
        help="the one 'interval' setting for event-driven backends (ms)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="lifetimes 5,50,250; intervals 20,100,500; 10 reps"
    )
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument(
        "--measure-poll",
        type=float,
        metavar="MS",
        help="only measure the portable sampler's achieved period and CPU at MS",
    )
    args = parser.parse_args(argv)
    if args.measure_poll:
        measure_poll(args.measure_poll)
        return 0
    lifetimes: tuple[int, ...] = LIFETIMES_MS
    intervals: tuple[int, ...] = INTERVALS_MS
    reps = args.reps
    if args.quick:
        lifetimes, intervals, reps = (5, 50, 250), (20, 100, 500), min(reps, 10)
    if args.lifetimes:
        lifetimes = tuple(int(x) for x in args.lifetimes.split(","))
    if args.intervals:
        intervals = tuple(int(x) for x in args.intervals.split(","))
    rows = []
    print(
        f"{'backend':9} {'interval':>8} {'sleep':>6} {'med child':>10} {'P/S hits':>11} "
        f"{'P prob':>7} {'P Wilson 95%':>15} {'S Wilson 95%':>15}"
    )
    started = time.monotonic()
    for backend in args.backends.split(","):
        cell_intervals = intervals if backend == "portable" else (args.event_interval,)
        for interval in cell_intervals:
            for life in lifetimes:
                seed = interval * 10007 + life
                row = run_cell(backend, interval, life, reps, seed)
                rows.append(row)
                n = int(row["n"])  # type: ignore[call-overload]
                p, s = int(row["process_hits"]), int(row["socket_hits"])  # type: ignore[call-overload]
                plo, phi = wilson(p, n)
                slo, shi = wilson(s, n)
                print(
                    f"{backend:9} {interval:>6}ms {life:>4}ms {row['median_observed_ms']:>8.2f}ms "
                    f"{p:>4}/{s:<2}of{n:<3} {p / n:>7.3f} [{plo:.3f},{phi:.3f}]   "
                    f"[{slo:.3f},{shi:.3f}]",
                    flush=True,
                )
    print(f"elapsed {time.monotonic() - started:.1f}s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
