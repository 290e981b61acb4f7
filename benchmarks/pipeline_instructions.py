"""Machine instructions per span through the pipeline: a measure the shared machine cannot move.

Wall time and CPU time on this machine move by a tenth or more from one minute to the next
(``BENCHMARKS.md``). The number of instructions the collector executes per span does not: this
benchmark runs the real pipeline in one process under valgrind's ``cachegrind`` (no cache
simulation) and reports instructions per span, repeatable to about 0.1 %. It is how changes to
the decode, normalize and graph code are compared; ``pipeline_throughput.py`` remains the measure
of throughput (instructions are not time: cache misses and allocation are not in this count).

The same requests as ``pipeline_throughput.py`` (its ``build_requests``) are fed as raw bytes to
the ``otlp`` receiver's delivery path (``decode_traces`` then ``deliver_spans``) of a collector
built from the benchmark's configuration, without gRPC. Each stage is measured twice, after one
warm-up pass over every distinct request, with 0 and with ``--spans`` spans: the difference
divided by the spans leaves out start-up and imports.

Usage::

    python benchmarks/pipeline_instructions.py
    python benchmarks/pipeline_instructions.py --spans 32768 --stage decode normalize full
    python benchmarks/pipeline_instructions.py --stage graph-os --spans 16000  # per OS event
    python benchmarks/pipeline_instructions.py --stage graph-os-normalized --spans 16000
    python benchmarks/pipeline_instructions.py --stage graph-os-snapshot --spans 50000
    python benchmarks/pipeline_instructions.py --stage grpc --spans 131072  # real gRPC senders
    python benchmarks/pipeline_instructions.py --stage json-decode --spans 8192  # OTLP/JSON
    python benchmarks/pipeline_instructions.py --stage full full-distinct --cache  # and misses
    python benchmarks/pipeline_instructions.py --stage grpc full --branches  # mispredictions

Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

STAGES = ("decode", "normalize", "full", "graph")
EXTRA_STAGES = (
    "full-distinct",
    "graph-os",
    "graph-os-plain",
    "graph-os-normalized",
    "graph-os-snapshot",
    "graph-os-snapshot-plain",
    "grpc",
    "json-decode",
)
"""``full-distinct``: ``full`` on new spans (requests built with their own random trace and
span ids, as many as the measured part sends, in both runs; the graph exporter's default
redelivery window), so every span adds nodes as an agent's real traffic does, where ``full``
sends the warm-up's spans again as new sightings of known nodes. ``graph-os``: the graph
accumulator alone on the synthetic OS events of
``graph_materialization.py`` (``opened`` relations with fresh entities, typed facts and keys, per
event rather than per span; not run by default). ``graph-os-normalized``: the accumulator alone
on what the ``normalize`` processor makes of host-receiver ``file.open`` records (one process,
files cycling over ``graph_materialization.RESOURCE_CAP`` paths), normalized before the measured
part: the same records for every version of the code, each version's own normalizer output.
``graph-os-snapshot``: the snapshot (``GraphAccumulator.to_dict()``, runtime-read fold included)
of a graph built from ``--spans`` such events (built and applied in both runs), per event of
the graph (``-plain``: events without facts or keys). ``grpc``: the collector of
``pipeline_throughput.py`` whole, gRPC receive included, fed by that benchmark's four sender
processes over real gRPC (the senders run outside valgrind; only the
collector's process is counted), per span. ``json-decode``: ``decode`` for the same requests
written as OTLP/JSON (by ``json_codec.encode_traces``, before the measured part): body bytes to
typed spans through ``json_codec.decode_traces``, as the receiver calls it for ``/v1/traces``."""
"""``decode``: bytes to typed spans; ``normalize``: and the normalizer; ``full``: the whole
pipeline of ``pipeline_throughput.py`` (memory_limiter, batch, normalize, graph); ``graph``: the
graph accumulator alone (``apply_many`` of the normalized observations of each request, normalized
before the measured part in both runs, so the difference is the accumulator's own work)."""
_REQUEST_SPANS = 512
_TOTAL = re.compile(r"I\s+refs:\s+([\d,]+)")
_HERE = str(Path(__file__).resolve().parent)


def pipeline_step(stage: str, workdir: str) -> tuple[Callable[[bytes], object], Callable[[], None]]:
    """What one serialized request goes through at ``stage``, and how to stop it."""
    from otel_bridge.model import Batch
    from otel_bridge.processors.normalize import Normalizer

    if stage == "json-decode":
        return json_decode(), lambda: None
    decode_traces = receiver_decode()
    if stage == "decode":
        return decode_traces, lambda: None
    if stage == "normalize":
        normalizer = Normalizer()
        return lambda raw: normalizer(Batch(spans=decode_traces(raw).records)), lambda: None
    from pipeline_throughput import collector_config

    from otel_bridge.pipeline import Collector

    config = collector_config(workdir, _REQUEST_SPANS, distinct=stage == "full-distinct")
    without_timers(config)
    collector = Collector(config)
    collector.start()
    receiver: Any = collector.component("otlp")
    return lambda raw: receiver.deliver_spans(decode_traces(raw)), collector.shutdown


def receiver_decode() -> Callable[[bytes], Any]:
    """``decode_traces`` as the ``otlp`` receiver calls it: with the request's transport peer,
    made per request (a tree without transport peers: without)."""
    from otel_bridge.otlp.proto_codec import decode_traces

    try:
        from otel_bridge.receivers.otlp.peer import transport_peer
    except ImportError:  # a base tree from before the transport peer
        return decode_traces

    def decode(raw: bytes) -> Any:
        return decode_traces(raw, transport_peer("grpc", "127.0.0.1", 54321, 4317))

    return decode


def json_decode() -> Callable[[bytes], Any]:
    """``json_codec.decode_traces`` as the ``otlp`` receiver calls it for an OTLP/JSON body."""
    from otel_bridge.otlp import json_codec
    from otel_bridge.receivers.otlp.peer import transport_peer

    def decode(raw: bytes) -> Any:
        return json_codec.decode_traces(raw, transport_peer("http/json", "127.0.0.1", 54321, 4318))

    return decode


def as_json(raw: bytes) -> bytes:
    """The OTLP/JSON body of the serialized protobuf request ``raw`` (the same spans)."""
    import json

    from otel_bridge.otlp import json_codec
    from otel_bridge.otlp.proto_codec import decode_traces

    document = json_codec.encode_traces(decode_traces(raw).records)
    return json.dumps(document, separators=(",", ":")).encode()


def without_timers(config: Any) -> None:
    """Give the ``full`` stage's timers an hour, so that none fires inside the measured part.

    The memory limiter's periodic check (every 100 ms) and the batch processor's timeout
    (200 ms) run on wall time, and a process under cachegrind runs some fifty times slower, at
    a speed that moves with the machine's load: left as configured, their work per span moved
    ``full`` by 2.6 % between two runs of the same code (88,731 and 91,081 per span; psutil's
    reading of /proc, thread switches). Batches are still sent on size, one per request, and the
    memory limiter still reads memory inline as its consume path does.
    """
    config.processors["memory_limiter"].config.check_interval = 3600.0
    config.processors["batch"].config.timeout = 3600.0


def settle() -> None:
    """Collect, then move everything alive (the prepared input) out of the collector's sight.

    The accumulator stages build their whole input before the measured part; in the pipeline
    those objects stream through and are freed. Left tracked, every full collection the
    measured part triggers would traverse tens of thousands of prepared objects, and whether
    one falls inside the measured part depends on object counts unrelated to the code under
    test (hundreds of instructions per event either way). Frozen, a collection costs what the
    accumulator's own objects cost it.
    """
    gc.collect()
    gc.freeze()


def graph_work(spans: int, prepared: int) -> None:
    """The ``graph`` stage: normalize ``prepared`` spans' worth of requests afresh (each its own
    objects, as the pipeline delivers them; both runs prepare the same amount), warm up, then
    apply the first ``spans`` spans' worth to the accumulator of the graph exporter's defaults."""
    from pipeline_throughput import _DISTINCT_REQUESTS, build_requests

    from otel_bridge.graph import GraphAccumulator
    from otel_bridge.model import Batch
    from otel_bridge.otlp.proto_codec import decode_traces
    from otel_bridge.processors.normalize import Normalizer

    per_sender = [build_requests(s, _REQUEST_SPANS) for s in range(4)]
    order = [reqs[i] for i in range(_DISTINCT_REQUESTS) for reqs in per_sender]
    normalizer = Normalizer()

    def normalized(raw: bytes) -> Any:
        out = normalizer(Batch(spans=decode_traces(raw).records))
        return out.observations if out is not None else ()

    warm = [normalized(raw) for raw in order]
    batches = [normalized(order[i % len(order)]) for i in range(prepared // _REQUEST_SPANS)]
    settle()
    accumulator = GraphAccumulator(retain_support=True)
    for observations in warm:
        accumulator.apply_many(observations)
    for observations in batches[: spans // _REQUEST_SPANS]:
        accumulator.apply_many(observations)
    sys.stdout.flush()
    os._exit(0)


def graph_os_work(events: int, prepared: int, *, facts: bool = True) -> None:
    """The ``graph-os`` stage: ``prepared`` synthetic OS events built in both runs, 2,000 applied
    as warm-up, then ``events`` more (``graph-os-plain``: events without facts or keys)."""
    from graph_materialization import synthetic_events

    from otel_bridge.graph import GraphAccumulator

    n = 2_000 + prepared
    built = synthetic_events(n) if facts else synthetic_events(n, facts=False)
    settle()
    accumulator = GraphAccumulator(retain_support=False)
    accumulator.apply_many(built[:2_000])
    accumulator.apply_many(built[2_000 : 2_000 + events])
    sys.stdout.flush()
    os._exit(0)


def graph_os_snapshot_work(events: int, prepared: int, *, facts: bool = True) -> None:
    """The ``graph-os-snapshot`` stage: ``prepared`` synthetic OS events applied in both runs;
    the measured run (``events`` > 0) then takes one snapshot."""
    from graph_materialization import synthetic_events

    from otel_bridge.graph import GraphAccumulator

    built = synthetic_events(prepared) if facts else synthetic_events(prepared, facts=False)
    settle()
    accumulator = GraphAccumulator(retain_support=False)
    accumulator.apply_many(built)
    if events:
        accumulator.to_dict()
    sys.stdout.flush()
    os._exit(0)


def os_records(n: int) -> list[Any]:
    """``n`` ``file.open`` records of one process as the host receiver writes them, over
    ``RESOURCE_CAP`` distinct paths (the workload of ``graph-os``, as OTLP log records)."""
    from graph_materialization import RESOURCE_CAP

    from otel_bridge.model import LogRecord, Resource, Scope

    resource = Resource(
        attributes={
            "evidence.channel": "os",
            "evidence.backend": "linux",
            "host.id": "bench-host",
            "otel_bridge.run.id": "bench",
        }
    )
    scope = Scope(name="otel_bridge.host")
    return [
        LogRecord(
            resource=resource,
            scope=scope,
            time_unix_nano=1_767_225_600_000_000_000 + i * 1_000,
            event_name="file.open",
            attributes={
                "evidence.record_id": f"linux:{i}",
                "evidence.attribution": "syscall",
                "evidence.causal": True,
                "process.pid": 4242,
                "process.creation.time": "2026-01-01T00:00:00.000Z",
                "file.path": f"/srv/data/file-{i % RESOURCE_CAP:05d}.bin",
                "file.open.flags": "O_RDONLY",
            },
        )
        for i in range(n)
    ]


def graph_os_normalized_work(events: int, prepared: int) -> None:
    """The ``graph-os-normalized`` stage: ``prepared`` records normalized in batches of 512 in
    both runs, 2,000 events applied as warm-up, then ``events`` more."""
    from otel_bridge.graph import GraphAccumulator
    from otel_bridge.model import Batch
    from otel_bridge.processors.normalize import Normalizer

    records = os_records(2_000 + prepared)
    normalizer = Normalizer()
    built: list[Any] = []
    for i in range(0, len(records), _REQUEST_SPANS):
        built.extend(normalizer(Batch(logs=tuple(records[i : i + _REQUEST_SPANS]))).observations)
    settle()
    accumulator = GraphAccumulator(retain_support=False)
    accumulator.apply_many(built[:2_000])
    accumulator.apply_many(built[2_000 : 2_000 + events])
    sys.stdout.flush()
    os._exit(0)


_SENDERS = 4


def _send(port: int, sender: int, spans: int) -> None:
    """A sender process (outside valgrind): ``spans`` spans of ``build_requests(sender)`` over
    gRPC, two requests in flight, as ``pipeline_throughput.py``'s senders do."""
    import grpc
    from pipeline_throughput import build_requests

    requests = build_requests(sender, _REQUEST_SPANS)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    call = channel.unary_unary(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export", None, None
    )
    grpc.channel_ready_future(channel).result(timeout=600)
    in_flight: list[Any] = []
    sent = i = 0
    while sent < spans or in_flight:
        while sent < spans and len(in_flight) < 2:
            in_flight.append(call.future(requests[i % len(requests)], timeout=600))
            i, sent = i + 1, sent + _REQUEST_SPANS
        in_flight.pop(0).result()
    channel.close()


def grpc_work(spans: int) -> None:
    """The ``grpc`` stage: a pass over every distinct request, then ``spans`` more, sent by
    :data:`_SENDERS` processes outside valgrind to this process's collector."""
    import time

    from pipeline_throughput import _DISTINCT_REQUESTS, as_console_collector, collector_config

    from otel_bridge.pipeline import Collector

    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # valgrind's preload

    def accepted() -> int:
        # ``counters()`` reads the same in this code and in the base 42b1673
        return int(counters().get("receiver.otlp.spans_accepted", 0))

    def send_all(each: int) -> None:
        senders = [
            subprocess.Popen(
                [sys.executable, __file__, "--send", str(port), str(k), str(each)], env=env
            )
            for k in range(_SENDERS)
        ]
        target = accepted() + each * _SENDERS
        while accepted() < target:
            time.sleep(0.05)
        for proc in senders:
            if proc.wait() != 0:
                raise RuntimeError(f"a sender failed with exit code {proc.returncode}")

    with tempfile.TemporaryDirectory() as workdir:
        config = collector_config(workdir, _REQUEST_SPANS)
        without_timers(config)
        as_console_collector()
        collector = Collector(config)
        collector.start()
        receiver: Any = collector.component("otlp")
        port: int = receiver.grpc_port
        counters = collector.host.telemetry.counters
        send_all(_DISTINCT_REQUESTS * _REQUEST_SPANS)
        per_sender = spans // _SENDERS // _REQUEST_SPANS * _REQUEST_SPANS
        if per_sender:
            send_all(per_sender)
        sys.stdout.flush()
        os._exit(0)


def measured_requests(stage: str, order: list[bytes], prepared: int) -> list[bytes]:
    """The requests the measured part cycles over: the warm-up's (``order``), or for
    ``full-distinct`` ``prepared`` spans' worth of new ones (built in both runs)."""
    if stage != "full-distinct":
        return order
    from pipeline_throughput import build_requests

    return [build_requests(i % 4, _REQUEST_SPANS, 1)[0] for i in range(prepared // _REQUEST_SPANS)]


def work(stage: str, spans: int, prepared: int) -> None:
    """Warm up, then push ``spans`` spans through ``stage`` (the measured child's job)."""
    if stage == "graph":
        graph_work(spans, prepared)
    if stage == "graph-os":
        graph_os_work(spans, prepared)
    if stage == "graph-os-plain":
        graph_os_work(spans, prepared, facts=False)
    if stage == "graph-os-normalized":
        graph_os_normalized_work(spans, prepared)
    if stage == "graph-os-snapshot":
        graph_os_snapshot_work(spans, prepared)
    if stage == "graph-os-snapshot-plain":
        graph_os_snapshot_work(spans, prepared, facts=False)
    if stage == "grpc":
        grpc_work(spans)
    from pipeline_throughput import _DISTINCT_REQUESTS, build_requests

    per_sender = [build_requests(s, _REQUEST_SPANS) for s in range(4)]
    order = [reqs[i] for i in range(_DISTINCT_REQUESTS) for reqs in per_sender]
    if stage == "json-decode":
        order = [as_json(raw) for raw in order]
    measured = measured_requests(stage, order, prepared)
    with tempfile.TemporaryDirectory() as workdir:
        step, _ = pipeline_step(stage, workdir)
        for raw in order:
            step(raw)
        for i in range(spans // _REQUEST_SPANS):
            step(measured[i % len(measured)])
        # Leave without shutting the collector down: its drain and graph.json write are the
        # same for both runs and would only add noise to the difference.
        sys.stdout.flush()
        os._exit(0)


CACHE = ("--cache-sim=yes", "--D1=32768,8,64", "--LL=1048576,16,64")
"""``--cache``: cachegrind's cache model set to this machine's level-1 data cache (32 KiB,
8-way) and its per-core level-2 cache (1 MiB, 16-way) as the last level: the last level
cache it reports misses of stands for the L2 (the machine's shared L3 is not modelled)."""
_MISSES = {
    "D1": re.compile(r"D1  misses:\s+([\d,]+)"),
    "LL": re.compile(r"LL misses:\s+([\d,]+)"),
}
BRANCHES = ("--branch-sim=yes",)
"""``--branches``: cachegrind's branch predictor model (conditional and indirect branches; the
interpreter's dispatch is mostly the latter). It is a generic predictor, not this machine's:
compare two codes' counts with each other, not with the hardware."""
_BRANCHES = {
    "BR": re.compile(r"Branches:\s+([\d,]+)"),
    "BM": re.compile(r"Mispredicts:\s+([\d,]+)"),
}


def cachegrind(
    script: str,
    args: list[str],
    env: dict[str, str] | None = None,
    *,
    cache: bool = False,
    branches: bool = False,
) -> dict[str, int]:
    """Instructions (``I``) executed by ``python script args...`` under cachegrind; with
    ``cache`` the simulated data-cache misses (``D1``, ``LL``: reads and writes) too, with
    ``branches`` the branches (``BR``) and simulated mispredictions (``BM``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cachegrind.out"
        model = (CACHE if cache else ("--cache-sim=no",)) + (BRANCHES if branches else ())
        proc = subprocess.run(
            [
                "valgrind",
                "--tool=cachegrind",
                *model,
                f"--cachegrind-out-file={out}",
                sys.executable,
                script,
                *args,
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        found = _TOTAL.search(proc.stderr)
        if proc.returncode != 0 or found is None:
            raise RuntimeError(f"valgrind run failed ({proc.returncode}): {proc.stderr[-2000:]}")
        counts = {"I": int(found.group(1).replace(",", ""))}
        wanted = {**(_MISSES if cache else {}), **(_BRANCHES if branches else {})}
        for name, pattern in wanted.items():
            found = pattern.search(proc.stderr)
            if found is None:
                raise RuntimeError(f"no {name} count in cachegrind's report: {proc.stderr[-2000:]}")
            counts[name] = int(found.group(1).replace(",", ""))
        return counts


def instructions(
    stage: str, spans: int, prepared: int, *, cache: bool = False, branches: bool = False
) -> dict[str, int]:
    """Counts (:func:`cachegrind`) of a child process that pushes ``spans`` spans through
    ``stage``."""
    path = os.pathsep.join(filter(None, [_HERE, os.environ.get("PYTHONPATH", "")]))
    # A fixed hash seed: dictionary and set layouts (and so probe counts) are the same in every
    # run, which keeps counts repeatable to a few instructions per span.
    env = dict(os.environ, PYTHONPATH=path, PYTHONHASHSEED="0")
    child = ["--child", stage, str(spans), str(prepared)]
    return cachegrind(__file__, child, env, cache=cache, branches=branches)


def per_span(
    stage: str, spans: int, *, cache: bool = False, branches: bool = False
) -> dict[str, float]:
    """Counts per span (per event for ``graph-os``) at ``stage``, start-up and warm-up
    subtracted: ``I`` instructions, with ``cache`` ``D1`` and ``LL`` misses, with ``branches``
    ``BR`` branches and ``BM`` mispredictions."""
    base = instructions(stage, 0, spans, cache=cache, branches=branches)
    loaded = instructions(stage, spans, spans, cache=cache, branches=branches)
    if stage == "grpc":
        measured = spans // _SENDERS // _REQUEST_SPANS * _REQUEST_SPANS * _SENDERS
    elif stage in EXTRA_STAGES:
        measured = spans
    else:
        measured = spans // _REQUEST_SPANS * _REQUEST_SPANS
    return {name: (loaded[name] - base[name]) / measured for name in loaded}


def main(argv: list[str] | None = None) -> int:
    """Print instructions per span for each requested stage."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spans", type=int, default=32_768)
    parser.add_argument("--stage", nargs="+", choices=STAGES + EXTRA_STAGES, default=list(STAGES))
    parser.add_argument(
        "--child", nargs=3, metavar=("STAGE", "SPANS", "PREPARED"), help=argparse.SUPPRESS
    )
    parser.add_argument("--send", nargs=3, type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--cache",
        action="store_true",
        help="also count simulated data-cache misses (slower; see CACHE)",
    )
    parser.add_argument(
        "--branches",
        action="store_true",
        help="also count branches and simulated mispredictions (slower; see BRANCHES)",
    )
    args = parser.parse_args(argv)
    if args.send:
        sys.path.insert(0, _HERE)
        _send(*args.send)
        return 0
    if args.child:
        sys.path.insert(0, _HERE)
        work(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    if shutil.which("valgrind") is None:
        print("needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    print(f"instructions per span (cachegrind, in process, {args.spans:,} spans after warm-up)")
    previous = 0.0
    for stage in args.stage:
        counts = per_span(stage, args.spans, cache=args.cache, branches=args.branches)
        value = counts["I"]
        chained = previous and stage not in {"graph", *EXTRA_STAGES}
        added = f"  (+{value - previous:,.0f} over the previous stage)" if chained else ""
        misses = ""
        if args.cache:
            misses = f"  D1 misses {counts['D1']:,.1f}  LL misses {counts['LL']:,.1f}"
        if args.branches:
            misses += f"  branches {counts['BR']:,.1f}  mispredicted {counts['BM']:,.1f}"
        print(f"{stage:>10}: {value:>9,.0f}{added}{misses}")
        previous = value
    return 0


if __name__ == "__main__":
    sys.exit(main())
