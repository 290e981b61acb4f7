"""Arm first, build later (issue 11, "observe that feels free"): ``observe`` lets its command run
once the kernel sources are attached and the OTLP port is bound, and builds the collector while
the command already runs. Nothing the command does meanwhile may be lost or mislabelled: a
command that forks short children, writes files and sends spans over HTTP/JSON, gRPC and
HTTP/protobuf from its first instructions is recorded whole."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from observe_support import observe_argv

from otel_bridge import rundir
from otel_bridge.exporters.file.codec import read_batch
from otel_bridge.identity import start_ms_from_ticks
from otel_bridge.model import Batch
from otel_bridge.receivers.host.execreader import parse_fork, parse_line

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the gRPC exporter")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")

CHILDREN = 12

EARLY = textwrap.dedent(
    """
    import json, os, subprocess, sys, urllib.request
    # first instructions: short children (exec'd and gone at once), each writing a file
    pids = {}
    for i in range(CHILDREN):
        child = subprocess.Popen(["/bin/sh", "-c", 'echo "$0" > "$0"', f"armed-{i}.txt"])
        child.wait()
        pids[f"armed-{i}.txt"] = child.pid
    # a span over HTTP/JSON before any SDK is imported
    span = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331",
            "name": "early-json", "kind": 1, "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    body = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    req = urllib.request.Request(
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] + "/v1/traces",
        data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    assert urllib.request.urlopen(req, timeout=30).status == 200
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Grpc
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Http
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    for name, exporter in (("early-grpc", Grpc()), ("early-http", Http())):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        with provider.get_tracer("t").start_as_current_span(name):
            pass
        provider.shutdown()
    with open("receipt.json", "w") as f:
        json.dump(pids, f)
    """
).replace("CHILDREN", str(CHILDREN))


def _os_records(run: Path) -> list[tuple[str, dict[str, Any]]]:
    batch: Batch = read_batch(run / rundir.OS_STREAM)
    return [(r.event_name, dict(r.attributes)) for r in batch.logs]


@pytest.mark.slow
def test_a_command_that_starts_before_the_collector_is_built_loses_nothing(
    tmp_path: Path,
) -> None:
    """Every short child is recorded with its own argv (or, if it was gone before its image
    could be read, with none, and the run says so) and exit, every file it wrote is attributed
    to it, and every span (HTTP/JSON, gRPC, HTTP/protobuf) is recorded, although the command ran
    them while the collector was still being built (the summary says it was armed).
    """
    (tmp_path / "early.py").write_text(EARLY)
    result = subprocess.run(
        observe_argv(tmp_path, sys.executable, "early.py"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    summary = json.loads((run / rundir.SUMMARY).read_text())
    if summary["host_backend_name"] != "linux":
        pytest.skip(f"the linux backend cannot run here: {summary['host_backend']}")
    assert summary["start"]["armed"] is True
    pids: dict[str, int] = json.loads((tmp_path / "receipt.json").read_text())
    records = _os_records(run)
    execs = {a["process.pid"]: a for n, a in records if n == "process.exec"}
    exits = {a["process.pid"] for n, a in records if n == "process.exit"}
    writes = {
        (a["process.pid"], Path(str(a["file.path"])).name) for n, a in records if n == "file.write"
    }
    unknown = []
    for name, pid in pids.items():
        assert pid in execs, f"{name}: no exec of pid {pid}"
        argv = execs[pid].get("process.command_args")
        if argv is None:  # gone before even the helper read it: said unknown (below), not guessed
            unknown.append(name)
        else:
            assert list(argv) == ["/bin/sh", "-c", 'echo "$0" > "$0"', name]
        assert pid in exits
        assert (pid, name) in writes, f"{name}: its write is not attributed to pid {pid}"
    assert len(unknown) < CHILDREN  # an image lost for every child is a defect, not a race
    assert summary["counters"].get("receiver.host.argv_unknown", 0) >= len(unknown)
    if unknown:
        process = summary["collection"]["process"]
        assert process.startswith("degraded"), process
        assert "argv could not be read" in process
    sem = (run / rundir.SEM_STREAM).read_text()
    for name in ("early-json", "early-grpc", "early-http"):
        assert name in sem
    otlp = summary["otlp"]
    assert otlp["spans_received"] == 3
    assert otlp["connections"]["grpc"] >= 1
    assert otlp["connections"]["http"] >= 2


FRONT_IMPORTS = """
import json, sys
import otel_bridge.arming, otel_bridge.cli, otel_bridge.commands.observe, otel_bridge.otlp.mux
print(json.dumps(sorted(sys.modules)))
"""

NOT_IN_THE_FRONT = (
    "msgspec",
    "yaml",
    "grpc",
    "google.protobuf",
    "otel_bridge.model",
    "otel_bridge.config",
    "otel_bridge.component",
    "otel_bridge.pipeline",
    "otel_bridge.commands.observe_run",
    "otel_bridge.receivers",
)


def test_what_runs_before_the_command_imports_no_collector_module() -> None:
    """The armed path (the CLI, observe's front, arming, the mux's listener) imports the standard
    library and a few small modules only: the collector is imported while the command runs."""
    done = subprocess.run(
        [sys.executable, "-c", FRONT_IMPORTS], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert not loaded & set(NOT_IN_THE_FRONT), sorted(loaded & set(NOT_IN_THE_FRONT))


RUN_IMPORTS = """
import json, sys
from otel_bridge.cli import main
code = main(["observe", "--no-progress", "--no-forward", "--no-review", "-o", sys.argv[1], "--",
             "true"])
print(json.dumps(sorted(sys.modules)))
sys.exit(code)
"""


def test_grpc_is_started_only_for_a_command_that_speaks_it(tmp_path: Path) -> None:
    """A command that sends nothing over gRPC costs no gRPC runtime: the receiver's gRPC server
    starts at the mux's first HTTP/2 connection (test_a_command_that_starts... covers that
    one)."""
    done = subprocess.run(
        [sys.executable, "-c", RUN_IMPORTS, str(tmp_path / "run")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout.splitlines()[-1]))
    assert "grpc" not in loaded
    summary = json.loads((tmp_path / "run" / rundir.SUMMARY).read_text())
    assert summary["otlp"]["warnings"]  # and the run says the command sent nothing


def test_helper_lines_carry_the_kernel_event_they_were_read_at() -> None:
    """An exec line's seventh field and a fork line (``F pid ticks ppid event_ns``) key what the
    helper read by the kernel event, so an event read late takes exactly that event's data."""
    exec_line = b"42 100 %s %s %s  987654321\n" % (
        b"/bin/cp".hex().encode(),
        b"cp\0a\0".hex().encode(),
        b"/w".hex().encode(),
    )
    parsed = parse_line(exec_line)
    assert parsed is not None
    assert parsed[0] == 42
    assert parsed[2].argv == ["cp", "a"]
    assert parsed[2].event_ns == 987654321
    assert parse_fork(b"F 43 100 42 123456789\n") == (43, start_ms_from_ticks(100), 42, 123456789)
    assert parse_fork(b"F 43 x 42 1\n") is None
    assert parse_fork(exec_line) is None
