"""Graph materialization benchmark (ExecWeave section VII-D, Table V).

Synthetic canonical events (``opened`` relations from one process to files, shaped exactly as
the normalizer emits OS events: fresh entities with typed facts and stable keys, source and
attributes per record, shared evidence; ``--no-facts`` leaves facts and keys out) are applied
at 100, 1,000, 5,000, 10,000 and 50,000 events with unique resources capped at 10,000,
``retain_support`` off, five repetitions per scale. Timers separately measure event
application, ``GraphAccumulator.to_dict()`` (the snapshot) and JSON encoding of that snapshot;
disk, network and rendering are excluded. Reported figures are medians.

Wall-clock medians are the primary figures (as in the paper); the process CPU time
(``time.process_time``) of apply and of snapshot + JSON is printed next to them for every scale,
because a shared, busy machine inflates wall time. The garbage collector stays enabled
throughout; before each repetition (outside the timers) ``gc.collect()`` clears the garbage of
the previous repetition, so every repetition starts from the same collector state and pays for
the collections its own allocations trigger.

Run: ``python benchmarks/graph_materialization.py`` (``--reps N``, ``--scales 100,1000``,
``--no-facts``).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time

from otel_bridge.graph import GraphAccumulator, encode
from otel_bridge.identity import file_id, file_key, process_id
from otel_bridge.model import (
    Attribution,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    FileFacts,
    Observation,
    ProcessFacts,
    RelationKind,
    Source,
)

SCALES = (100, 1_000, 5_000, 10_000, 50_000)
RESOURCE_CAP = 10_000
EVIDENCE = Evidence(attribution=Attribution.SYSCALL, causal=True)


def synthetic_events(n: int, cap: int = RESOURCE_CAP, *, facts: bool = True) -> list[Observation]:
    """``n`` canonical ``opened`` observations over at most ``cap`` distinct files; with
    ``facts``, entities carry typed facts and stable keys as the normalizer builds them (new
    records per event: the process as a file event states it, the file by path)."""
    pid, start_ms = 4242, 1_767_225_600_000
    proc_id = process_id("bench-host", pid, start_ms)
    proc_key = ""  # a file event states only the process's identity: no stable key
    out: list[Observation] = []
    for i in range(n):
        path = f"/srv/data/file-{i % cap:05d}.bin"
        record = f"linux:{i}"
        proc_facts = file_facts = None
        if facts:
            proc_facts = ProcessFacts(
                host_id="bench-host", pid=pid, start_time_ms=start_ms, executable_name="worker"
            )
            file_facts = FileFacts(path=path)
        out.append(
            Observation(
                id=f"{record}#0",
                time_unix_nano=1_767_225_600_000_000_000 + i * 1_000,
                source=Source(channel=Channel.OS, backend="linux", record_id=record),
                subject=Entity(
                    kind=EntityKind.PROCESS,
                    id=proc_id,
                    label=f"worker ({pid})",
                    attrs={"process.pid": pid, "process.executable.name": "worker"},
                    facts=proc_facts,
                    key=proc_key,
                ),
                relation=RelationKind.OPENED,
                object=Entity(
                    kind=EntityKind.FILE,
                    id=file_id(path),
                    label=path,
                    attrs={"file.path": path},
                    facts=file_facts,
                    key=(file_key(path) or "") if facts else "",
                ),
                evidence=EVIDENCE,
                occurrence=record,
                attrs={"event.name": "file.open", "file.open.flags": "O_RDONLY"},
            )
        )
    return out


def _repetition(
    events: list[Observation],
) -> tuple[float, float, float, float, float, int, int, int]:
    """One timed repetition: wall apply, snapshot, JSON; CPU apply, snapshot + JSON; sizes.

    Everything it builds is freed when it returns, so no repetition pays for freeing the
    previous one's snapshot.
    """
    gc.collect()
    acc = GraphAccumulator(retain_support=False)
    c0, t0 = time.process_time(), time.perf_counter()
    acc.apply_many(events)
    c1, t1 = time.process_time(), time.perf_counter()
    doc = acc.to_dict()
    t2 = time.perf_counter()
    data = encode(doc)
    c3, t3 = time.process_time(), time.perf_counter()
    sizes = (acc.node_count, acc.edge_count, len(data))
    return (t1 - t0, t2 - t1, t3 - t2, c1 - c0, c3 - c1, *sizes)


def measure(n: int, reps: int, *, facts: bool = True) -> dict[str, float]:
    """Median apply/snapshot/JSON times (seconds) and sizes over ``reps`` repetitions."""
    events = synthetic_events(n, facts=facts)
    runs = [_repetition(events) for _ in range(reps)]
    apply_s, snap_s, json_s, apply_cpu, total_cpu = ([r[i] for r in runs] for i in range(5))
    nodes, edges, size = runs[-1][5:]
    return {
        "events": n,
        "resources": min(n, RESOURCE_CAP),
        "nodes": nodes,
        "edges": edges,
        "apply": statistics.median(apply_s),
        "snapshot": statistics.median(snap_s),
        "json": statistics.median(json_s),
        "bytes": size,
        "apply_cpu": statistics.median(apply_cpu),
        "serialize_cpu": statistics.median(total_cpu),
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a Table V-style table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions per scale (default 5)")
    parser.add_argument("--scales", default=",".join(map(str, SCALES)), help="event counts")
    parser.add_argument(
        "--no-facts", action="store_true", help="entities without typed facts and stable keys"
    )
    args = parser.parse_args(argv)
    scales = [int(s) for s in args.scales.split(",") if s]
    print(
        f"graph materialization, medians of {args.reps} repetitions, retain_support off, "
        f"{'no facts or keys' if args.no_facts else 'entities with facts and keys'}"
    )
    print("wall-clock times; the CPU columns are process CPU time of the same repetitions")
    print(
        f"python {platform.python_version()} on {platform.machine()} {platform.system()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start"
    )
    header = (
        "Events",
        "Resources",
        "Nodes",
        "Edges",
        "Apply",
        "Snapshot",
        "JSON",
        "Bytes",
        "Apply CPU",
        "Snapshot+JSON CPU",
    )
    rows = []
    last: dict[str, float] = {}
    for n in scales:
        last = measure(n, args.reps, facts=not args.no_facts)
        rows.append(
            (
                f"{n:,}",
                f"{last['resources']:,}",
                f"{last['nodes']:,}",
                f"{last['edges']:,}",
                f"{last['apply'] * 1e3:.2f} ms",
                f"{last['snapshot'] * 1e3:.2f} ms",
                f"{last['json'] * 1e3:.2f} ms",
                f"{int(last['bytes']):,}",
                f"{last['apply_cpu'] * 1e3:.2f} ms",
                f"{last['serialize_cpu'] * 1e3:.2f} ms",
            )
        )
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |")
    print("| " + " | ".join("-" * w for w in widths) + " |")
    for row in rows:
        print("| " + " | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) + " |")
    if last:
        rate = last["events"] / last["apply"]
        total = (last["snapshot"] + last["json"]) * 1e3
        cpu_rate = last["events"] / last["apply_cpu"]
        print(
            f"at {int(last['events']):,} events: apply {rate:,.0f} events/s; "
            f"snapshot + JSON {total:.1f} ms for {int(last['nodes']):,} nodes (wall)"
        )
        print(
            f"  process CPU time: apply {cpu_rate:,.0f} events/s; snapshot + JSON "
            f"{last['serialize_cpu'] * 1e3:.1f} ms (wall and CPU differ when the machine is busy)"
        )
        print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
