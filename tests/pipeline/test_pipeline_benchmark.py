"""The pipeline throughput benchmark at small scale: real gRPC senders, real collector process."""

from __future__ import annotations

import multiprocessing as mp
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from pipeline_throughput import (
    DISTINCT_LIMIT_MIB,
    REDELIVERY_WINDOW,
    Result,
    _receive,
    build_requests,
    collector_config,
    run,
    stage_costs,
    summarize,
)


def test_small_run_ingests_every_span_and_measures_it() -> None:
    """Every span sent is accepted and normalized; the figures are consistent with each other."""
    result = run(total=2048, senders=2, batch=256)
    assert result.spans == 2048
    # invoke_agent roots yield one observation, chat spans two, execute_tool spans three
    assert result.observations >= 2 * result.spans
    assert 0 < result.seconds_ingest <= result.seconds_total
    assert result.cpu_seconds > 0
    assert 0 <= result.sys_seconds <= result.cpu_seconds
    assert result.peak_rss_mib > 10


def test_a_distinct_run_sends_every_span_once_and_applies_them_all(tmp_path: Path) -> None:
    """``--distinct``: more requests than a pass holds, none repeated, all of them applied, under
    the default redelivery window and a memory limit that holds the growing graph."""
    result = run(total=8 * 2 * 256 * 2, senders=2, batch=256, distinct=True)
    assert result.spans == 8192
    assert result.observations >= 2 * result.spans  # every span reached the graph: none a copy
    config = collector_config(str(tmp_path), distinct=True)
    graph = config.exporters["graph"].config
    assert graph.redelivery_window != REDELIVERY_WINDOW  # the default
    assert config.processors["memory_limiter"].config.limit_mib == DISTINCT_LIMIT_MIB


def test_requests_are_distinct_agent_spans() -> None:
    """Each sender's requests hold agent, chat and tool spans with distinct ids."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    requests = [ExportTraceServiceRequest.FromString(raw) for raw in build_requests(0, 16, 2)]
    spans = [s for r in requests for s in r.resource_spans[0].scope_spans[0].spans]
    assert len(spans) == 32
    assert len({s.span_id for s in spans}) == 32
    assert {s.name for s in spans} == {"invoke_agent planner", "chat gpt-4o", "execute_tool shell"}


def test_stage_costs_name_every_stage() -> None:
    """The in-process stage split reports a positive cost for each stage."""
    costs = stage_costs(1024, senders=1, batch=256, repeats=1)
    assert set(costs) == {"parse", "decode", "normalize", "graph"}
    assert all(us > 0 for us in costs.values())


def _exit_at_once() -> None:
    sys.exit(3)


def test_a_dead_collector_fails_the_run_instead_of_hanging() -> None:
    """When the collector process dies, the driver raises with its exit code."""
    ctx = mp.get_context("spawn")
    parent, _child = ctx.Pipe()
    process = ctx.Process(target=_exit_at_once)
    process.start()
    with pytest.raises(RuntimeError, match="exited with code 3 before sending its gRPC port"):
        _receive(parent, process, "its gRPC port")
    process.join()


def test_repeated_runs_are_summarized_by_median_and_best() -> None:
    """The summary of several runs names the median and the best of each figure."""
    runs = [
        Result(1000, 1.0, seconds, 10.0, 2500, cpu_seconds=cpu, sys_seconds=0.001)
        for seconds, cpu in ((2.0, 0.02), (1.0, 0.01), (4.0, 0.04))
    ]
    line = summarize(runs)
    assert "3 runs of 1,000 spans" in line
    assert "end-to-end median 500 spans/s, best 1,000" in line
    assert "collector CPU median 20.0 us/span, best 10.0" in line
