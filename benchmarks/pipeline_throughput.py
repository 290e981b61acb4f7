"""Pipeline throughput: real OTLP/gRPC clients -> ``otlp`` receiver -> normalize -> ``graph``.

The collector runs in its own process pinned to one core (``os.sched_setaffinity``); several
sender processes, pinned to the other cores, send pre-built ``ExportTraceServiceRequest``s over
gRPC (raw bytes, two calls in flight each, retrying ``UNAVAILABLE``). The pipeline is the real
one, built by ``otel_bridge.config.parse_config`` and run by ``otel_bridge.pipeline.Collector``::

    evidence: receivers [otlp] -> processors [memory_limiter, batch, normalize] -> exporters [graph]

Spans look like an agent's: ``invoke_agent``, ``chat`` and ``execute_tool`` spans with GenAI
attributes under a resource with ``service.name``, ``process.pid`` and ``host.id``. Each sender
cycles through a fixed set of distinct spans, so the graph's size is fixed and what grows with
``--spans`` is only the input stream: peak RSS at two input sizes then shows whether memory is
bounded by configuration (batch size, memory limiter, caches) rather than by input size. A span
sent again is a copy (same ids, same times) that reaches the graph as a new sighting of its
nodes and edges (:data:`REDELIVERY_WINDOW`).

``--distinct`` builds as many distinct requests as a sender sends instead (random trace and
span ids), so every span is a new one, as in an agent's real traffic: the graph grows with the
input (the memory limiter's limit is raised to hold it) and the graph exporter keeps its
default redelivery window.

Usage::

    python benchmarks/pipeline_throughput.py --spans 200000 800000
    python benchmarks/pipeline_throughput.py --spans 100000 --profile /tmp/collector.prof
    python benchmarks/pipeline_throughput.py --spans 100000 400000 --stages 100000
    python benchmarks/pipeline_throughput.py --spans 400000 --repeat 5
    python benchmarks/pipeline_throughput.py --spans 200000 --distinct
    python benchmarks/pipeline_throughput.py --spans 400000 --default-window

Prints, per input size: spans/s end to end (first request sent -> everything accepted, and
including the final drain and graph.json write), the collector process's CPU time per span
(user + system; unlike wall time it does not depend on what else runs on a shared machine) and
its peak RSS. ``--stages N`` adds each stage's CPU per span (parse, decode, normalize, graph),
measured in one thread without gRPC, so the cost of the transport is the difference.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

_DISTINCT_REQUESTS = 8
"""Distinct pre-built requests per sender (each ``--batch`` spans)."""
SEND_BATCH_SIZE = 512
"""The ``batch`` processor's ``send_batch_size``: the OpenTelemetry SDK's default export batch,
so one request is one batch and a span stays in the CPU cache from decode through the graph.
``--send-batch-size 2048`` merges four requests and costs about a tenth more CPU per span
(``BENCHMARKS.md``)."""


@dataclass(frozen=True)
class Result:
    """One measured run."""

    spans: int
    seconds_ingest: float
    seconds_total: float
    peak_rss_mib: float
    observations: int
    cpu_seconds: float
    """CPU time (user + system) the collector process spent from start to finish."""
    sys_seconds: float
    """The system (kernel) part of ``cpu_seconds``: socket I/O, thread switches."""
    gc_seconds: float = 0.0
    """CPU time of the collector's threads inside the cyclic garbage collector."""
    gc_collections: int = 0
    """How many collections (of any generation) ran in the collector."""

    @property
    def ingest_rate(self) -> float:
        """Spans per second until the receiver had accepted every span."""
        return self.spans / self.seconds_ingest

    @property
    def total_rate(self) -> float:
        """Spans per second including the final drain through normalize and graph."""
        return self.spans / self.seconds_total

    @property
    def cpu_us_per_span(self) -> float:
        """Collector CPU time per span, in microseconds (independent of other load)."""
        return self.cpu_seconds / self.spans * 1e6


def _pin(cores: set[int]) -> None:
    available = os.sched_getaffinity(0)
    chosen = cores & available or available
    os.sched_setaffinity(0, chosen)


# --------------------------------------------------------------------------------------------
# Collector process
# --------------------------------------------------------------------------------------------


REDELIVERY_WINDOW = 1024
"""The graph exporter's ``redelivery_window`` here. The benchmark sends its distinct requests
over and over, so a span comes again with its ids and times: a copy, which the graph exporter's
default window (200,000 observations) would drop before the graph. One pass over the requests
(8 per sender; at the defaults, 4 senders and 512 spans per request, 40,896 observations) is
longer than this window, so every pass reaches the graph as new sightings of known nodes and
edges, as distinct spans would, and the window's look-ups are still made and measured.
``--default-window`` keeps the default instead, as ``otel-bridge run`` has it: every copy is then
dropped before the graph (code without the window, as the base 42b1673, applies them all)."""


DISTINCT_LIMIT_MIB = 8192
"""The memory limiter's ``limit_mib`` under ``--distinct``, where the graph grows with the input."""


def collector_config(
    workdir: str,
    send_batch_size: int = SEND_BATCH_SIZE,
    *,
    distinct: bool = False,
    default_window: bool = False,
) -> Any:
    """The measured collector's configuration: gRPC on a free port, graph.json in ``workdir``;
    with ``distinct``, the default redelivery window and room for a growing graph; with
    ``default_window``, the default redelivery window (as ``otel-bridge run`` has it)."""
    from otel_bridge.config import parse_config
    from otel_bridge.exporters.graph import GraphExporterConfig

    graph: dict[str, Any] = {"output": os.path.join(workdir, "graph.json"), "flush_interval": 0}
    fields = GraphExporterConfig.__dataclass_fields__
    if "redelivery_window" in fields and not (distinct or default_window):  # not in older code
        graph["redelivery_window"] = REDELIVERY_WINDOW
    limit = DISTINCT_LIMIT_MIB if distinct else 1024
    return parse_config(
        {
            "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": "127.0.0.1:0"}}}},
            "processors": {
                "memory_limiter": {"check_interval": "100ms", "limit_mib": limit},
                "batch": {"send_batch_size": send_batch_size, "timeout": "200ms"},
                "normalize": None,
            },
            "exporters": {"graph": graph},
            "service": {
                "pipelines": {
                    "evidence": {
                        "receivers": ["otlp"],
                        "processors": ["memory_limiter", "batch", "normalize"],
                        "exporters": ["graph"],
                    }
                }
            },
        },
        env={},
    )


def _collector_main(  # noqa: PLR0917 (the spawned process's arguments)
    conn: Connection,
    expected: int,
    core: int,
    workdir: str,
    profile: str | None,
    send_batch_size: int,
    distinct: bool = False,
    default_window: bool = False,
) -> None:
    _pin({core})
    from otel_bridge.pipeline import Collector

    config = collector_config(
        workdir, send_batch_size, distinct=distinct, default_window=default_window
    )
    as_console_collector()
    profilers: list[Any] = []
    if profile:
        import cProfile
        import threading

        def start_thread_profiler(*_: Any) -> None:
            # Called once in each new thread (gRPC workers included); enabling a profiler
            # replaces this hook for that thread.
            profiler = cProfile.Profile()
            profilers.append(profiler)
            profiler.enable()

        threading.setprofile(start_thread_profiler)
        start_thread_profiler()
    collector = Collector(config)
    gc_clock = _GcClock()
    cpu_start, sys_start = _cpu_seconds()
    collector.start()
    receiver: Any = collector.component("otlp")
    conn.send(receiver.grpc_port)
    telemetry = collector.host.telemetry
    accepted = _accepted_spans(telemetry)
    while accepted() < expected:
        time.sleep(0.002)
    ingest_done = time.monotonic()
    collector.shutdown()
    done = time.monotonic()
    if profile:
        import pstats

        for profiler in profilers:
            profiler.disable()
        pstats.Stats(*profilers).dump_stats(profile)
    graph: Any = collector.component("graph")
    observations = int(graph.accumulator.observations)
    cpu_end, sys_end = _cpu_seconds()
    cpu = (cpu_end - cpu_start, sys_end - sys_start)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    gc_clock.stop()
    gc = (gc_clock.seconds, gc_clock.collections)
    conn.send((ingest_done, done, peak_kib / 1024.0, observations, telemetry.counters(), cpu, gc))


def as_console_collector() -> None:
    """What the console ``otel-bridge run`` sets in its process before it builds the collector:
    :func:`otel_bridge.gcpause.set_for_collector` (the base 42b1673 sets nothing)."""
    import otel_bridge
    from otel_bridge import gcpause

    # A base tree run with PYTHONPATH next to this repository's editable install finds the
    # installed module when its own has none: only the tree's own module counts.
    mine = Path(gcpause.__file__).parent == Path(otel_bridge.__file__).parent
    setting = getattr(gcpause, "set_for_collector", None)
    if mine and setting is not None:
        setting()


def _accepted_spans(telemetry: Any) -> Any:
    """How to read the ``otlp`` receiver's accepted spans (a base tree from before the typed
    counters reads them by their full name: ``--distinct`` runs one benchmark file on both)."""
    if not hasattr(telemetry, "value"):
        return lambda: telemetry.counters().get("receiver.otlp.spans_accepted", 0)
    from otel_bridge.component import RECEIVER

    return lambda: telemetry.value("spans_accepted", kind=RECEIVER, id="otlp")


class _GcClock:
    """The thread CPU time spent inside the cyclic garbage collector, and its collections."""

    def __init__(self) -> None:
        import gc

        self.seconds = 0.0
        self.collections = 0
        self._began: dict[int, float] = {}
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        import threading

        del info
        me = threading.get_ident()
        if phase == "start":
            self._began[me] = time.thread_time()
        elif me in self._began:
            self.seconds += time.thread_time() - self._began.pop(me)
            self.collections += 1

    def stop(self) -> None:
        import gc

        gc.callbacks.remove(self._callback)


def _cpu_seconds() -> tuple[float, float]:
    """(user + system, system) CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_stime


# --------------------------------------------------------------------------------------------
# Sender processes
# --------------------------------------------------------------------------------------------


def build_requests(sender: int, batch: int, count: int = _DISTINCT_REQUESTS) -> list[bytes]:
    """``count`` serialized requests of ``batch`` agent-like spans each, distinct per sender."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    def kv(out: Any, key: str, value: object) -> None:
        attr = out.add()
        attr.key = key
        if isinstance(value, int):
            attr.value.int_value = value
        else:
            attr.value.string_value = str(value)

    requests = []
    base_time = 1_700_000_000_000_000_000
    for r in range(count):
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        for key, value in (
            ("service.name", f"agent-{sender}"),
            ("process.pid", 1000 + sender),
            ("host.id", "bench-host"),
            ("telemetry.sdk.language", "python"),
        ):
            kv(rs.resource.attributes, key, value)
        ss = rs.scope_spans.add()
        ss.scope.name = "opentelemetry.instrumentation.openai_agents"
        ss.scope.version = "0.1"
        trace_id = bytes([sender + 1, (r + 1) % 256]) + os.urandom(14)
        root_id = os.urandom(8)
        for i in range(batch):
            span = ss.spans.add()
            span.trace_id = trace_id
            span.span_id = root_id if i == 0 else os.urandom(8)
            span.start_time_unix_nano = base_time + i * 1000
            span.end_time_unix_nano = base_time + i * 1000 + 500
            span.kind = 1  # type: ignore[assignment]
            if i == 0:
                span.name = "invoke_agent planner"
                kv(span.attributes, "gen_ai.operation.name", "invoke_agent")
                kv(span.attributes, "gen_ai.agent.name", "planner")
                kv(span.attributes, "gen_ai.agent.id", f"agent-{sender}")
                continue
            span.parent_span_id = root_id
            if i % 2:
                span.name = "chat gpt-4o"
                span.kind = 3  # type: ignore[assignment]
                kv(span.attributes, "gen_ai.operation.name", "chat")
                kv(span.attributes, "gen_ai.provider.name", "openai")
                kv(span.attributes, "gen_ai.request.model", "gpt-4o")
                kv(span.attributes, "gen_ai.response.id", f"resp-{sender}-{r}-{i}")
                kv(span.attributes, "gen_ai.usage.input_tokens", 100 + i)
                kv(span.attributes, "gen_ai.usage.output_tokens", 20 + i)
            else:
                span.name = "execute_tool shell"
                kv(span.attributes, "gen_ai.operation.name", "execute_tool")
                kv(span.attributes, "gen_ai.tool.name", "shell")
                kv(span.attributes, "gen_ai.tool.call.id", f"call-{sender}-{r}-{i}")
                kv(span.attributes, "gen_ai.tool.call.arguments", '{"command": "ls -la /tmp"}')
        requests.append(request.SerializeToString())
    return requests


@dataclass(frozen=True)
class SenderJob:
    """What one sender process sends, and where."""

    port: int
    sender: int
    spans: int
    batch: int
    cores: frozenset[int]
    distinct: bool = False


def _sender_main(job: SenderJob, ready: Any, go: Any, done: Any) -> None:
    port, sender, spans, batch = job.port, job.sender, job.spans, job.batch
    _pin(set(job.cores))
    import grpc

    count = -(-spans // batch) if job.distinct else _DISTINCT_REQUESTS
    requests = build_requests(sender, batch, count)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    call = channel.unary_unary(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export", None, None
    )
    grpc.channel_ready_future(channel).result(timeout=10)
    ready.put(sender)
    go.wait()
    sent = 0
    in_flight: list[tuple[Any, bytes]] = []
    i = 0
    while sent < spans or in_flight:
        while sent < spans and len(in_flight) < 2:
            payload = requests[i % len(requests)]
            i += 1
            in_flight.append((call.future(payload, timeout=60), payload))
            sent += batch
        future, payload = in_flight.pop(0)
        while True:
            try:
                future.result()
                break
            except grpc.RpcError as err:
                if err.code() not in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                ):
                    raise
                time.sleep(0.05)
                future = call.future(payload, timeout=60)
    channel.close()
    done.put(sent)


# --------------------------------------------------------------------------------------------
# Per-stage CPU cost, in process
# --------------------------------------------------------------------------------------------


def stage_costs(
    total: int,
    senders: int,
    batch: int,
    send_batch_size: int = SEND_BATCH_SIZE,
    repeats: int = 3,
) -> dict[str, float]:
    """Thread CPU time per span (µs) of each stage, the best of ``repeats`` runs.

    The same requests as the senders', in one thread without gRPC: protobuf parse (of the twin
    message the decoder reads first), decode to typed spans (without that parse), normalize
    (batches of ``send_batch_size`` spans, as the batch processor sends) and the graph
    accumulator, with default configurations. Thread CPU time is less inflated by other load on
    a shared machine than wall time, and the best of several runs drops cache and GC noise.
    """
    from otel_bridge.exporters.graph import GraphExporterConfig
    from otel_bridge.graph import GraphAccumulator
    from otel_bridge.model import Batch
    from otel_bridge.otlp.proto_codec import decode_traces
    from otel_bridge.otlp.wire import ScanTraceRequest
    from otel_bridge.processors.normalize import Normalizer

    per_sender = [build_requests(s, batch) for s in range(senders)]
    order = [reqs[i] for i in range(_DISTINCT_REQUESTS) for reqs in per_sender]
    clock = time.thread_time
    best: dict[str, float] = {}
    for _ in range(repeats):
        graph_config = GraphExporterConfig()
        normalizer = Normalizer()
        graph = GraphAccumulator(
            retain_support=graph_config.retain_support,
            support_limit=graph_config.support_limit,
            occurrence_window=graph_config.occurrence_window,
        )
        cost = dict.fromkeys(("parse", "decode", "normalize", "graph"), 0.0)
        done, pending, buffered = 0, [], 0
        for i in range(-(-total // batch)):
            raw = order[i % len(order)]
            t0 = clock()
            ScanTraceRequest.FromString(raw)
            t1 = clock()
            spans = decode_traces(raw).records  # parses once more, then decodes
            t2 = clock()
            cost["parse"] += t1 - t0
            cost["decode"] += (t2 - t1) - (t1 - t0)
            pending.append(Batch(spans=spans))
            buffered += len(spans)
            done += len(spans)
            if buffered >= send_batch_size or done >= total:
                merged = Batch.concat(pending)
                pending, buffered = [], 0
                t0 = clock()
                out = normalizer(merged)
                t1 = clock()
                graph.apply_many(out.observations)
                graph.apply_coverage(out.coverage)
                t2 = clock()
                cost["normalize"] += t1 - t0
                cost["graph"] += t2 - t1
        for stage, seconds in cost.items():
            best[stage] = min(best.get(stage, float("inf")), seconds / done * 1e6)
    return best


# --------------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------------


def _receive(conn: Connection, collector: Any, what: str) -> Any:
    """The collector process's next message; fails (instead of waiting forever) if it died."""
    while not conn.poll(0.5):
        if not collector.is_alive():
            raise RuntimeError(
                f"the collector process exited with code {collector.exitcode} before sending "
                f"{what} (is otel-bridge importable in a fresh interpreter?)"
            )
    return conn.recv()


def run(
    total: int,
    senders: int,
    batch: int,
    profile: str | None = None,
    send_batch_size: int = SEND_BATCH_SIZE,
    *,
    distinct: bool = False,
    default_window: bool = False,
) -> Result:
    """Measure one run of ``total`` spans (rounded up to whole batches per sender)."""
    ctx = mp.get_context("spawn")
    per_sender = -(-total // senders)
    per_sender = -(-per_sender // batch) * batch
    total = per_sender * senders
    cores = sorted(os.sched_getaffinity(0))
    collector_core = cores[0]
    sender_cores = set(cores[1:]) or {collector_core}
    parent, child = ctx.Pipe()
    with tempfile.TemporaryDirectory() as workdir:
        collector = ctx.Process(
            target=_collector_main,
            args=(
                child,
                total,
                collector_core,
                workdir,
                profile,
                send_batch_size,
                distinct,
                default_window,
            ),
        )
        collector.start()
        port = _receive(parent, collector, "its gRPC port")
        ready, go = ctx.Queue(), ctx.Event()
        done = ctx.Queue()
        procs = [
            ctx.Process(
                target=_sender_main,
                args=(
                    SenderJob(port, s, per_sender, batch, frozenset(sender_cores), distinct),
                    ready,
                    go,
                    done,
                ),
            )
            for s in range(senders)
        ]
        for p in procs:
            p.start()
        for _ in procs:  # each sender has built its requests and connected
            ready.get(timeout=600)
        started = time.monotonic()
        go.set()
        for p in procs:
            p.join()
            if p.exitcode != 0:
                collector.kill()
                raise RuntimeError(f"a sender failed with exit code {p.exitcode}")
        ingest_done, finished, peak_mib, observations, counters, cpu, gc = _receive(
            parent, collector, "its figures"
        )
        collector.join()
    refused = counters.get("receiver.otlp.spans_refused", 0)
    if refused:
        print(f"  (memory limiter refused {refused} spans; senders retried them)")
    return Result(
        total,
        ingest_done - started,
        finished - started,
        peak_mib,
        observations,
        cpu[0],
        cpu[1],
        gc_seconds=gc[0],
        gc_collections=gc[1],
    )


def summarize(results: list[Result]) -> str:
    """The median and the best of several runs of one size (a shared machine is noisy: the
    best run is the least disturbed, the median the typical one)."""
    rates = sorted(r.total_rate for r in results)
    cpus = sorted(r.cpu_us_per_span for r in results)
    return (
        f"  {len(results)} runs of {results[0].spans:,} spans: end-to-end median "
        f"{statistics.median(rates):,.0f} spans/s, best {rates[-1]:,.0f}; collector CPU median "
        f"{statistics.median(cpus):.1f} us/span, best {cpus[0]:.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark at each ``--spans`` size and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spans", type=int, nargs="+", default=[200_000, 800_000])
    parser.add_argument("--senders", type=int, default=4)
    parser.add_argument("--batch", type=int, default=512, help="spans per request")
    parser.add_argument(
        "--send-batch-size",
        type=int,
        default=SEND_BATCH_SIZE,
        help="the batch processor's send_batch_size",
    )
    parser.add_argument("--profile", help="write a cProfile of the collector process here")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per size; with more than one, also the median and best of them",
    )
    parser.add_argument(
        "--distinct",
        action="store_true",
        help="no span sent twice: the graph grows with the input",
    )
    parser.add_argument(
        "--default-window",
        action="store_true",
        help="repeated spans with the graph exporter's default redelivery window, as "
        "`otel-bridge run` has it: a copy is dropped before the graph (REDELIVERY_WINDOW)",
    )
    parser.add_argument(
        "--stages",
        type=int,
        metavar="SPANS",
        help="also measure each stage's CPU per span in process over SPANS spans",
    )
    args = parser.parse_args(argv)
    if not hasattr(os, "sched_setaffinity"):
        print("needs Linux (os.sched_setaffinity)", file=sys.stderr)
        return 2
    print(
        f"otlp(gRPC) -> memory_limiter -> batch -> normalize -> graph; collector pinned to one "
        f"core, {args.senders} sender processes, {args.batch} spans/request, "
        f"send_batch_size {args.send_batch_size}, "
        f"{'distinct spans' if args.distinct else 'spans repeated per pass'}, "
        f"{'default' if args.distinct or args.default_window else REDELIVERY_WINDOW} "
        "redelivery window, "
        f"{len(os.sched_getaffinity(0))} cores available"
    )
    for spans in args.spans:
        results = []
        for _ in range(args.repeat):
            result = run(
                spans,
                args.senders,
                args.batch,
                args.profile,
                args.send_batch_size,
                distinct=args.distinct,
                default_window=args.default_window,
            )
            results.append(result)
            print(
                f"spans={result.spans:>9,}  ingest {result.ingest_rate:>9,.0f} spans/s  "
                f"end-to-end {result.total_rate:>9,.0f} spans/s  "
                f"({result.seconds_total:.2f}s)  collector CPU {result.cpu_us_per_span:.1f} "
                f"us/span (sys {result.sys_seconds / result.spans * 1e6:.1f}; "
                f"= {1e6 / result.cpu_us_per_span:,.0f} spans/CPU-s)  "
                f"peak RSS {result.peak_rss_mib:,.0f} MiB  observations "
                f"{result.observations:,} ({result.observations / result.spans:.2f}/span)  "
                f"gc {result.gc_seconds:.2f} s ({result.gc_collections:,} collections)"
            )
        if len(results) > 1:
            print(summarize(results))
    if args.stages:
        costs = stage_costs(args.stages, args.senders, args.batch, args.send_batch_size)
        parts = "  ".join(f"{stage} {us:.1f}" for stage, us in costs.items())
        print(
            f"stage CPU per span, in process, best of 3 ({args.stages:,} spans, us): {parts}  "
            f"sum {sum(costs.values()):.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
