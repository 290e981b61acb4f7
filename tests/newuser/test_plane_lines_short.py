"""Each plane's line in ``observe``'s and ``run``'s output is short and plain.

The summary printed ``network:  degraded: linux: socket-table scans every 10ms and on each
fork/exec/exit: TCP connections closed between scans are recorded from sock_diag destroy
notifications only when ...`` (about 400 characters of backend detail), and the printed report
repeated it, which read as an alarm. Each plane's line now says its state, the backend that gave
it, what observes it and what it misses in a few words; the detail stays in summary.json
(``collection``), report.md and ``--verbose``. Real ``observe`` runs of a real command with each
backend that works here, and a real standing ``run``.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli, same_imports_env
from waiting import start_run

from otel_bridge.testing import free_port

LONGEST = 130
"""The most a plane's line may hold after its name (state, backend, what observes it and what
it misses); the full reasons run to 400 characters and more."""
PLANES = ("process", "file", "network")


def _plane_lines(stderr: str) -> dict[str, str]:
    """The printed summary's plane lines (``  network:  degraded: linux: ...``), by plane."""
    out = {}
    for line in stderr.splitlines():
        for plane in PLANES:
            prefix = f"  {plane + ':':9} "
            if line.startswith(prefix):
                out[plane] = line[len(prefix) :]
    return out


def _observe(tmp_path: Path, backend: str, *options: str) -> tuple[str, dict[str, Any], Path]:
    run = tmp_path / f"run-{backend}{''.join(options)}"
    done = run_cli(
        "observe", "--no-review", "--backend", backend, *options, "-o", str(run), "--",
        "sh", "-c", f"echo hi > {tmp_path / 'out.txt'}",
        cwd=tmp_path, env=same_imports_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr, json.loads((run / "summary.json").read_text()), run


def _backends() -> list[str]:
    return ["auto", "portable", *(["strace"] if shutil.which("strace") else [])]


@pytest.mark.parametrize("backend", _backends())
def test_observe_says_each_plane_in_one_short_line(tmp_path: Path, backend: str) -> None:
    stderr, summary, run = _observe(tmp_path, backend)
    full, brief = summary["collection"], summary["collection_brief"]
    lines = _plane_lines(stderr)
    assert lines == {p: brief[p] for p in PLANES}, stderr
    for plane, line in lines.items():
        state, owner, words = line.split(": ", 2)
        assert full[plane].startswith(f"{state}: {owner}: "), (line, full[plane])
        assert words, line
        assert len(line) <= LONGEST, line
    report = (run / "report.md").read_text()
    for plane in PLANES:
        if not full[plane].startswith("available"):  # the detail: in report.md, not printed
            assert f"the {plane} plane was {full[plane]};" in report, report
            if full[plane] != brief[plane]:
                assert full[plane] not in stderr, stderr
            # printed once, in the summary's line per plane, not again after the report
            assert f"the {plane} plane was" not in stderr, stderr
    verbose, summary, _ = _observe(tmp_path, backend, "--verbose")
    assert _plane_lines(verbose) == {p: summary["collection"][p] for p in PLANES}, verbose


def test_run_says_each_plane_in_one_short_line(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(
        "receivers:\n"
        "  otlp: {protocols: {http: {endpoint: '127.0.0.1:${env:HTTP_PORT}'}}}\n"
        "  host: {}\n"
        "exporters:\n  file: {path: ./records.jsonl}\n"
        "service:\n  pipelines:\n"
        "    evidence: {receivers: [otlp, host], exporters: [file]}\n"
    )
    for extra in ((), ("--verbose",)):
        proc, err = start_run(config, {"HTTP_PORT": str(free_port())}, *extra, cwd=tmp_path)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        log = err.log()
        banner = log.split("otel-bridge: running (pid", 1)[0].splitlines()
        planes = {
            plane: line.split(f"otel-bridge: receiver host: {plane}: ", 1)[1]
            for line in banner
            for plane in PLANES
            if line.startswith(f"otel-bridge: receiver host: {plane}: ")
        }
        assert set(planes) == set(PLANES), log
        (host,) = [x for x in banner if x.startswith("otel-bridge: receiver host: ")
                   and x.split(": ")[2] not in PLANES]  # fmt: skip
        if extra:  # every detail, as before
            assert any(len(s) > LONGEST for s in planes.values()), log
        else:
            assert all(len(s) <= LONGEST for s in planes.values()), log
            assert len(host) <= LONGEST, host
