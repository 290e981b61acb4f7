"""``observe`` against hostile workloads and a hard kill (issue 13, reproductions 1 and 4).

Each test runs the real ``python -m otel_bridge observe`` on a real workload.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from cli_support import run_cli
from waiting import wait_until

from otel_bridge import rundir
from otel_bridge.strings import RAW_KEY, REPLACED_KEY, REPLACEMENT

_OBSERVE = (sys.executable, "-m", "otel_bridge", "observe", "--no-progress")


def _observe(run: Path, *cmd: str | bytes, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv: list[str | bytes] = [*_OBSERVE, "-o", str(run), "--", *cmd]
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, errors="replace", timeout=120, check=False
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_file_name_and_argv_that_are_not_utf8_still_give_a_graph(tmp_path: Path) -> None:
    """A workload run with a Latin-1 argument that creates ``caf\\xe9.txt``: observe exits with
    its code, graph.json is written, verify says OK, and every stream is valid UTF-8 JSON with
    the invalid text replaced and flagged (raw bytes kept escaped), per docs/strings.md."""
    script = "import sys; open(sys.argv[1].encode('utf-8', 'surrogateescape'), 'w').write('x')"
    run = tmp_path / "run"
    result = _observe(run, sys.executable, "-c", script, b"caf\xe9.txt", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "caf\udce9.txt").exists()
    assert rundir.verify(str(run)) == []
    graph = json.loads((run / rundir.GRAPH).read_bytes().decode("utf-8"))
    assert graph["nodes"]
    for name in (rundir.OS_STREAM, rundir.SEM_STREAM, rundir.CORRELATED_STREAM):
        for line in (run / name).read_bytes().decode("utf-8").splitlines():
            json.loads(line)
    summary = json.loads((run / rundir.SUMMARY).read_text(encoding="utf-8"))
    assert summary["command"][-1] == f"caf{REPLACEMENT}.txt"
    os_text = (run / rundir.OS_STREAM).read_text(encoding="utf-8")
    assert REPLACED_KEY in os_text
    assert RAW_KEY in os_text
    assert "caf\\\\xe9.txt" in os_text  # the raw bytes, escaped, inside a JSON string
    assert f"caf{REPLACEMENT}.txt" in os_text


def test_a_fifo_the_workload_leaves_in_the_run_directory_never_hangs(tmp_path: Path) -> None:
    """The workload creates a FIFO inside its own run directory: observe finishes, the manifest
    records the FIFO and verify says OK."""
    run = tmp_path / "run"
    result = _observe(run, "sh", "-c", f"mkfifo '{run}/trap'", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((run / rundir.MANIFEST).read_text())
    assert manifest["entries"]["trap"]["kind"] == "fifo"
    assert rundir.verify(str(run)) == []


def test_existing_directory_is_refused_and_links_in_it_never_followed(tmp_path: Path) -> None:
    """-o an existing non-empty directory holding a link to a file outside: observe refuses
    (exit 2) before running anything; the outside file keeps its mode and bytes. --replace of
    an earlier run holding an os.jsonl link replaces the link, never writes its target."""
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    os.chmod(outside, 0o644)
    run = tmp_path / "run"
    run.mkdir()
    (run / "link").symlink_to(outside)
    marker = tmp_path / "ran"
    refused = _observe(run, "touch", str(marker), cwd=tmp_path)
    assert refused.returncode == 2
    assert "exists and is not empty" in refused.stderr
    assert not marker.exists()
    (run / rundir.MANIFEST).write_text("{}")
    (run / rundir.OS_STREAM).symlink_to(outside)
    argv = [*_OBSERVE, "-o", str(run), "--replace", "--", "true"]
    replaced = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert replaced.returncode == 0, replaced.stderr
    assert outside.read_text() == "precious\n"
    assert os.stat(outside).st_mode & 0o777 == 0o644
    assert not (run / rundir.OS_STREAM).is_symlink()
    assert rundir.verify(str(run)) == []


def test_observe_killed_with_sigkill_is_incomplete_and_takes_its_workload(tmp_path: Path) -> None:
    """kill -9 of observe: verify reports 'incomplete: ...' (not 'not a run directory') and the
    workload, a grandchild included, does not outlive it."""
    run = tmp_path / "run"
    pids = tmp_path / "pids"
    script = f"sleep 300 & echo $$ $! > '{pids}.tmp'; mv '{pids}.tmp' '{pids}'; wait"
    observer = subprocess.Popen(
        [*_OBSERVE, "-o", str(run), "--", "sh", "-c", script],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(pids.exists, timeout=60, message="the workload to start")
        shell, sleeper = (int(p) for p in pids.read_text().split())
        observer.send_signal(signal.SIGKILL)
        observer.wait(timeout=30)
        # the guard kills the workload's tree, the shell and its orphaned sleep, in no set order
        wait_until(
            lambda: not _alive(sleeper) and not _alive(shell),
            timeout=30,
            message="the shell and its orphaned sleep to die",
        )
    finally:
        if observer.poll() is None:
            observer.kill()
    [problem] = rundir.verify(str(run))
    assert problem.startswith("incomplete: run ")
    result = run_cli("verify", str(run), timeout=60)
    assert result.returncode == 1
    assert "incomplete:" in result.stderr
