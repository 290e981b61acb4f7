"""`otel-bridge observe` end to end, its exit code, failure cleanup, and the run directory."""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psutil
import pytest
from observe_support import observe_argv
from waiting import wait_until

from otel_bridge import rundir
from otel_bridge.cli import main
from otel_bridge.commands import observe
from otel_bridge.component import Telemetry
from otel_bridge.config import parse_config

AGENT = textwrap.dedent(
    """
    import os, sys
    from opentelemetry import propagate, trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    if os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": "test-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("test")
    parent = propagate.extract({"traceparent": os.environ["TRACEPARENT"]})
    with tracer.start_as_current_span("agent.step", context=parent) as span:
        span.set_attribute("tool.args", "--token=abc123")
        with open("out.txt", "w") as f:
            f.write("done")
    provider.shutdown()
    sys.exit(3)
    """
)


def _observe(
    tmp_path: Path, *cmd: str, extra: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        observe_argv(tmp_path, *cmd, extra=extra),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_observe_end_to_end_with_otel_sdk(tmp_path: Path) -> None:
    """A real SDK span and the process lineage land in the run directory; exit code is CMD's."""
    (tmp_path / "agent.py").write_text(AGENT)
    result = _observe(tmp_path, sys.executable, "agent.py")
    assert result.returncode == 3, result.stderr
    run = tmp_path / "run"
    for name in (
        rundir.OS_STREAM,
        rundir.SEM_STREAM,
        rundir.CORRELATED_STREAM,
        rundir.GRAPH,
        rundir.SUMMARY,
        rundir.MANIFEST,
    ):
        assert (run / name).is_file(), name
    assert str(run / rundir.GRAPH) in result.stderr
    sem = (run / rundir.SEM_STREAM).read_text()
    assert "agent.step" in sem
    assert "otel-bridge observe" in sem  # observe's own root span
    assert "abc123" not in sem  # redacted before storage
    summary = json.loads((run / rundir.SUMMARY).read_text())
    assert summary["exit_code"] == 3
    assert summary["host_backend_name"] in ("linux", "ebpf", "strace", "portable")
    assert set(summary["collection"]) == {"process", "file", "network"}
    trace_ids = {
        s["traceId"]
        for r in _records(run / rundir.SEM_STREAM)
        for rs in r.get("resourceSpans", [])
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    }
    assert len(trace_ids) == 1  # the agent's span joined the run's trace via TRACEPARENT
    os_text = (run / rundir.OS_STREAM).read_text()
    assert "agent.py" in os_text
    graph = json.loads((run / rundir.GRAPH).read_text())
    assert graph["format"] == "otel-bridge.graph"
    assert main(["verify", str(run)]) == 0


def test_observe_exit_code_of_killed_command(tmp_path: Path) -> None:
    """A command killed by SIGKILL makes observe exit 137."""
    result = _observe(tmp_path, "sh", "-c", "kill -9 $$")
    assert result.returncode == 137, result.stderr


def test_observe_summary_redacts_command(tmp_path: Path) -> None:
    """The stored command line hides secrets."""
    result = _observe(tmp_path, "sh", "-c", "true", "sh", "--token=s3cr3tvalue")
    assert result.returncode == 0, result.stderr
    summary = (tmp_path / "run" / rundir.SUMMARY).read_text()
    assert "s3cr3tvalue" not in summary
    assert "[REDACTED]" in summary


def test_run_directory_modes(tmp_path: Path) -> None:
    """Run directories are 0700 and every file 0600, the manifest included."""
    result = _observe(tmp_path, "true")
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    for root, dirs, files in os.walk(run):
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o700
        for d in dirs:
            assert stat.S_IMODE(os.stat(os.path.join(root, d)).st_mode) == 0o700
        for f in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, f)).st_mode) == 0o600, f


def test_collector_start_failure_never_runs_the_command(tmp_path: Path) -> None:
    """When the collector cannot start, the gated workload is killed before CMD runs."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    config = tmp_path / "c.yaml"
    config.write_text(
        "receivers:\n  otlp:\n    protocols:\n      http:\n"
        f"        endpoint: 127.0.0.1:{port}\n"
        "exporters: {}\nprocessors: {}\nservice:\n  pipelines: {}\n"
    )
    marker = tmp_path / "ran.marker"
    try:
        result = _observe(
            tmp_path, "sh", "-c", f"touch {marker}; sleep 30", extra=("-c", str(config))
        )
    finally:
        busy.close()
    assert result.returncode == 2
    assert "otel-bridge:" in result.stderr
    # No process that could still create the marker (the shell, or its touch) is alive, so the
    # marker not existing now means CMD never ran. (Checked in that order: no waiting needed.)
    leftovers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(marker) in " ".join(p.info["cmdline"] or [])
    ]
    assert leftovers == []
    assert not marker.exists()


def test_failure_while_running_kills_the_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If observing fails while CMD runs, CMD's whole process group is terminated."""
    pidfile = tmp_path / "pids"
    original = observe.Workload.exit_code

    def failing(self: observe.Workload) -> int:
        wait_until(
            lambda: pidfile.exists() and len(pidfile.read_text().split()) >= 2,
            10,
            "CMD and its background child to write their pids",
        )
        raise RuntimeError("collector failed")

    monkeypatch.setattr(observe.Workload, "exit_code", failing)
    args = argparse.Namespace(
        config=None,
        output=str(tmp_path / "run"),
        backend="portable",
        no_progress=True,
        replace=False,
        no_forward=True,
        keep_runtime_reads=False,
        command=["--", "sh", "-c", f"sleep 30 & echo $! >> {pidfile}; echo $$ >> {pidfile}; wait"],
    )
    with pytest.raises(RuntimeError, match="collector failed"):
        observe.run(args)
    monkeypatch.setattr(observe.Workload, "exit_code", original)
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2
    wait_until(lambda: all(_gone(pid) for pid in pids), 10, f"the workload {pids} to be killed")


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (exited, or a zombie nobody reaped yet)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_build_overlay_adds_run_wiring_to_user_config(tmp_path: Path) -> None:
    """With a user config its pipelines stay and the run's exporters and pipelines are added."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    user: dict[str, Any] = {
        "receivers": {
            "otlp/agents": {"protocols": {"grpc": {"endpoint": "127.0.0.1:0"}}},
            "host/mine": {"backend": "portable"},
        },
        "exporters": {"file/mine": {"path": str(tmp_path / "mine.jsonl")}},
        "service": {
            "pipelines": {"traces/mine": {"receivers": ["otlp/agents"], "exporters": ["file/mine"]}}
        },
    }
    overlay, wiring = observe.build_overlay(run, "rid", backend="strace", user=user)
    assert wiring == observe.Wiring(otlp="otlp/agents", host="host/mine")
    mapping = overlay.apply(user)
    assert mapping["receivers"]["host/mine"] == {
        "backend": "strace",
        "run_id": "rid",
        "watch_paths": [os.getcwd()],
    }
    assert "otlp" not in mapping["receivers"]
    assert "traces/mine" in mapping["service"]["pipelines"]
    assert mapping["exporters"]["graph/run"]["output"] == run.file(rundir.GRAPH)
    assert user["receivers"]["host/mine"] == {"backend": "portable"}  # not modified
    config = parse_config(user, overlay=overlay)
    assert {"traces/mine", "evidence/run", "logs/run_os"} <= set(config.pipelines)
    assert config.pipelines["evidence/run"].receivers == ("otlp/agents", "host/mine")


def test_build_overlay_without_a_file_is_the_bundled_config(tmp_path: Path) -> None:
    """With no -c the overlay alone is a whole configuration: OTLP on loopback port 0, host."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    overlay, wiring = observe.build_overlay(run, "rid")
    assert wiring == observe.Wiring(otlp="otlp", host="host")
    config = parse_config(None, overlay=overlay)
    otlp = config.receivers["otlp"].config.protocols
    assert (otlp.grpc.endpoint, otlp.http.endpoint) == ("127.0.0.1:0", "127.0.0.1:0")
    assert config.receivers["host"].config.run_id == "rid"


def test_verify_detects_tampering(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """verify passes an intact run dir and names modified, missing and unexpected files."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    run.write_json(rundir.SUMMARY, {"a": 1})
    (Path(run.file(rundir.OS_STREAM))).write_text("{}\n")
    run.write_manifest({"id": "x"})
    assert main(["verify", run.path]) == 0
    Path(run.file(rundir.OS_STREAM)).write_text('{"forged": 1}\n')
    os.unlink(run.file(rundir.SUMMARY))
    Path(run.file("extra.txt")).write_text("x")
    capsys.readouterr()
    assert main(["verify", run.path]) == 1
    err = capsys.readouterr().err
    assert "modified: os.jsonl" in err
    assert "missing: summary.json" in err
    assert "unexpected: extra.txt" in err


def test_verify_reports_a_temporary_left_after_the_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``.tmp-*`` file is not listed in the manifest, and verify names one found later."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    run.write_json(rundir.SUMMARY, {"a": 1})
    Path(run.file(".tmp-before")).write_text("x")
    run.write_manifest({"id": "x"})
    with open(run.file(rundir.MANIFEST), encoding="utf-8") as f:
        assert ".tmp-before" not in json.load(f)["files"]
    os.unlink(run.file(".tmp-before"))
    assert main(["verify", run.path]) == 0
    Path(run.file(".tmp-planted")).write_text("x")
    capsys.readouterr()
    assert main(["verify", run.path]) == 1
    assert "unexpected: .tmp-planted" in capsys.readouterr().err


def test_verify_rejects_a_non_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """verify on a directory without a manifest exits 2 with a one-line reason."""
    assert main(["verify", str(tmp_path)]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_no_command_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    """observe without a command exits 2 with a one-line reason."""
    assert main(["observe", "--no-progress", "--"]) == 2
    assert "no command given" in capsys.readouterr().err


def test_progress_line_counts() -> None:
    """The progress line reports spans, processes, files and connections by typed reads."""
    from otel_bridge.component import RECEIVER, CounterScope
    from otel_bridge.receivers.host.counters import COUNTERS as HOST
    from otel_bridge.receivers.otlp.receiver import COUNTERS as OTLP

    telemetry = Telemetry(strict=True)
    otlp = telemetry.scoped(CounterScope.of(RECEIVER, "otlp/agents", OTLP))
    host = telemetry.scoped(CounterScope.of(RECEIVER, "host", HOST))
    otlp.count("spans_accepted", 2)
    host.count("events", 3, label="process.start")
    host.count("events", 3, label="file.open")
    host.count("events", 1, label="file.write")
    host.count("events", 1, label="network.connect")
    host.count("events", 5, label="network.listen")
    line = observe.Progress(telemetry, enabled=False).line()
    assert line == "spans 2  processes 3  files 4  connections 1"


@pytest.mark.slow
def test_observe_with_grpc_only_user_config(tmp_path: Path) -> None:
    """With a -c config that only enables OTLP/gRPC, CMD is told to export over gRPC."""
    (tmp_path / "agent.py").write_text(AGENT)
    config = tmp_path / "grpc.yaml"
    config.write_text(
        "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:0\n"
        "processors: {}\nexporters: {}\nservice:\n  pipelines: {}\n"
    )
    result = _observe(tmp_path, sys.executable, "agent.py", extra=("-c", str(config)))
    assert result.returncode == 3, result.stderr
    assert "agent.step" in (tmp_path / "run" / rundir.SEM_STREAM).read_text()
