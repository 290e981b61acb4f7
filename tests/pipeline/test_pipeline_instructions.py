"""The instruction-count benchmark's stages run the real code (valgrind itself is not needed)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from pipeline_instructions import (
    STAGES,
    cachegrind,
    measured_requests,
    pipeline_step,
    without_timers,
)
from pipeline_throughput import build_requests, collector_config

from otel_bridge.model import Batch
from otel_bridge.otlp.proto_codec import Decoded


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_processes_the_benchmark_requests(stage: str, tmp_path: Path) -> None:
    (raw,) = build_requests(0, 8, 1)
    step, stop = pipeline_step(stage, str(tmp_path))
    try:
        result = step(raw)
    finally:
        stop()
    if stage == "decode":
        assert isinstance(result, Decoded)
        assert len(result.records) == 8
    elif stage == "normalize":
        assert isinstance(result, Batch)
        assert len(result.observations) >= 2 * 8
    else:  # shutdown drained the request through batch and normalize into graph.json
        graph = json.loads((tmp_path / "graph.json").read_text())
        kinds = {node["kind"] for node in graph["nodes"]}
        assert {"agent", "tool_call", "model"} <= kinds


def test_the_full_stage_has_no_timer_inside_the_measured_part(tmp_path: Path) -> None:
    """The memory limiter's check and the batch timeout wait an hour, the rest is unchanged."""
    config = collector_config(str(tmp_path), 512)
    without_timers(config)
    limiter = config.processors["memory_limiter"].config
    batch = config.processors["batch"].config
    assert (limiter.check_interval, batch.timeout) == (3600.0, 3600.0)
    assert (limiter.limit_mib, batch.send_batch_size) == (1024, 512)


def _span_ids(raws: list[bytes]) -> set[bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    requests = [ExportTraceServiceRequest.FromString(raw) for raw in raws]
    return {
        span.span_id
        for request in requests
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    }


def test_the_full_distinct_stage_measures_new_spans_only() -> None:
    """``full-distinct`` cycles over as many new requests as it sends, none of whose spans the
    warm-up sent; ``full`` sends the warm-up's requests again."""
    order = [raw for s in range(4) for raw in build_requests(s, 512)]
    assert measured_requests("full", order, 8192) is order
    fresh = measured_requests("full-distinct", order, 8192)
    assert len(fresh) == 8192 // 512
    assert len(_span_ids(fresh)) == 8192
    assert not _span_ids(fresh) & _span_ids(order)


def test_the_grpc_stage_runs_real_senders_to_the_end(tmp_path: Path) -> None:
    """The ``grpc`` stage's child (run here without valgrind): four sender processes send a
    pass over the distinct requests and then the measured spans over real gRPC; the child exits
    0 only when the collector has accepted every one of them."""
    import os
    import subprocess

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bench), str(bench.parent)])}
    proc = subprocess.run(
        [sys.executable, str(bench / "pipeline_instructions.py"), "--child", "grpc", "2048", "0"],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("stage", ["graph-os-snapshot", "graph-os-snapshot-plain"])
def test_the_snapshot_stages_build_apply_and_snapshot(stage: str, tmp_path: Path) -> None:
    """The snapshot stages' child (run here without valgrind) builds and applies the events in
    both runs and takes the snapshot only in the measured one, then exits 0."""
    import os
    import subprocess

    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bench), str(bench.parent)])}
    script = str(bench / "pipeline_instructions.py")
    for spans in ("0", "500"):
        proc = subprocess.run(
            [sys.executable, script, "--child", stage, spans, "500"],
            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind (CI installs it)")
def test_cachegrind_reads_instructions_misses_and_branches_from_a_real_run(tmp_path: Path) -> None:
    """The counts come from valgrind's own report: a script that does more work executes more
    instructions and branches, and every count the options ask for is read."""
    script = tmp_path / "work.py"
    script.write_text("import sys\nn = int(sys.argv[1])\nprint(sum(i * i for i in range(n)))\n")
    small = cachegrind(str(script), ["10"], cache=True, branches=True)
    large = cachegrind(str(script), ["200000"], cache=True, branches=True)
    assert set(small) == {"I", "D1", "LL", "BR", "BM"}
    assert large["I"] > small["I"] + 10_000_000  # ~100 instructions per iteration at least
    assert large["BR"] > small["BR"]
    assert 0 < small["BM"] < small["BR"] < small["I"]
    assert cachegrind(str(script), ["10"]).keys() == {"I"}
