"""What the observe tests share: the command line that runs ``otel-bridge observe``, and a run
of it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def observe_argv(tmp_path: Path, *cmd: str, extra: tuple[str, ...] = ()) -> list[str]:
    """``python -m otel_bridge observe`` writing its run directory to ``tmp_path/run``."""
    return [
        sys.executable,
        "-m",
        "otel_bridge",
        "observe",
        "-o",
        str(tmp_path / "run"),
        "--no-progress",
        *extra,
        "--",
        *cmd,
    ]


def observe_in(
    tmp_path: Path,
    *cmd: str,
    extra: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """:func:`observe_argv` run in ``tmp_path``, finished, its output captured as text (the
    exit status returned, never raised)."""
    return subprocess.run(
        observe_argv(tmp_path, *cmd, extra=extra),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
