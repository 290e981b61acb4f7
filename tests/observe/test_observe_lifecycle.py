"""observe's process lifecycle: signals forwarded, outliving descendants, env handed to CMD."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest
from observe_support import observe_argv
from waiting import wait_until

from otel_bridge import rundir


def _start(tmp_path: Path, *cmd: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        observe_argv(tmp_path, *cmd),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, timeout: float = 30) -> None:
    wait_until(path.exists, timeout, f"{path} to appear")


@pytest.mark.slow
def test_sigint_is_forwarded_and_run_dir_still_written(tmp_path: Path) -> None:
    """SIGINT to observe reaches CMD; observe still writes a verifiable run dir and exits 130."""
    started = tmp_path / "started"
    # Short sleeps: a SIGINT landing between a fork and its exec can be lost by the child, and
    # sh runs its trap only once the foreground child ends (at most 0.1 s here, not 30 s).
    loop = f"trap 'exit 130' INT; touch {started}; while :; do sleep 0.1; done"
    with _start(tmp_path, "sh", "-c", loop) as proc:
        try:
            _wait_for(started)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130, err
    run = tmp_path / "run"
    summary = json.loads((run / rundir.SUMMARY).read_text())
    assert summary["exit_code"] == 130
    assert summary["signals_forwarded"] == ["SIGINT"]
    assert rundir.verify(str(run)) == []


@pytest.mark.slow
def test_observe_returns_when_root_exits_without_fabricating_exits(tmp_path: Path) -> None:
    """A background child outliving CMD does not delay observe nor get a fabricated exit."""
    pidfile = tmp_path / "bg.pid"
    cmd = f"sleep 20 >/dev/null 2>&1 & echo $! > {pidfile}; exit 0"
    with _start(tmp_path, "sh", "-c", cmd) as proc:
        try:
            _, err = proc.communicate(timeout=30)
            bg = int(pidfile.read_text())
            assert psutil.pid_exists(bg)
        finally:
            if pidfile.exists():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert proc.returncode == 0, err
    os_stream = (tmp_path / "run" / rundir.OS_STREAM).read_text()
    exits = []
    for line in os_stream.splitlines():
        for rl in json.loads(line)["resourceLogs"]:
            for sl in rl["scopeLogs"]:
                for rec in sl["logRecords"]:
                    attrs = {a["key"]: a["value"] for a in rec.get("attributes", [])}
                    if rec.get("eventName") == "process.exit":
                        exits.append(int(attrs["process.pid"]["intValue"]))
    assert bg not in exits


def test_cmd_gets_otlp_env_traceparent_and_run_id(tmp_path: Path) -> None:
    """CMD sees the collector endpoint, http/protobuf, a TRACEPARENT and the run id."""
    out = tmp_path / "env.txt"
    script = (
        f"echo $OTEL_EXPORTER_OTLP_ENDPOINT $OTEL_EXPORTER_OTLP_PROTOCOL $TRACEPARENT "
        f"$OTEL_BRIDGE_RUN_ID ${{OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:-unset}} > {out}"
    )
    env = dict(os.environ, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://elsewhere:4318")
    result = subprocess.run(
        observe_argv(tmp_path, "sh", "-c", script),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    endpoint, protocol, traceparent, run_id, traces = out.read_text().split()
    assert endpoint.startswith("http://127.0.0.1:")
    assert protocol == "http/protobuf"
    assert traceparent.startswith("00-")
    assert len(traceparent.split("-")[1]) == 32
    summary = json.loads((tmp_path / "run" / rundir.SUMMARY).read_text())
    assert run_id == summary["run"]["id"]
    assert traces == "unset"


def test_unknown_command_exits_127(tmp_path: Path) -> None:
    """A command that does not exist exits 127, like a shell, and the run dir is written."""
    result = subprocess.run(
        observe_argv(tmp_path, "no-such-command-otel-bridge"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 127
    assert (tmp_path / "run" / rundir.MANIFEST).exists()
