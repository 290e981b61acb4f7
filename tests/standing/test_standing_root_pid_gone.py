"""``run`` with a ``root_pid`` that names no process refuses to start, saying so.

Met as a new user: ``otel-bridge run -c configs/local.yaml --set receivers.host.root_pid=999999``
started, said it was running, and observed nothing for as long as it ran, with no word of the
missing process. It now exits 2 with the key and the reason. A real ``run``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from standing_support import REPO, subprocess_env


def _free_pid() -> int:
    """A pid no process has now (beyond every running one)."""
    with open("/proc/sys/kernel/pid_max", encoding="ascii") as f:
        top = int(f.read())
    for pid in range(top - 1, 1, -1):
        if not Path(f"/proc/{pid}").exists():
            return pid
    raise AssertionError("no free pid")


def _each(flag: str, values: list[str]) -> list[str]:
    return [part for value in values for part in (flag, value)]


def test_a_root_pid_that_names_no_process_is_refused(tmp_path: Path) -> None:
    pid = _free_pid()
    sets = [
        f"receivers.host.root_pid={pid}",
        "receivers.otlp.protocols.grpc.endpoint=127.0.0.1:0",
        "receivers.otlp.protocols.http.endpoint=127.0.0.1:0",
    ]
    config = str(REPO / "configs" / "local.yaml")
    result = subprocess.run(
        [sys.executable, "-m", "otel_bridge", "run", "-c", config, *_each("--set", sets)],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert f"receiver host: root_pid {pid}: no such process" in result.stderr, result.stderr
    assert "running (pid" not in result.stderr
