"""What the observe tests share: the command line that runs ``otel-bridge observe``."""

from __future__ import annotations

import sys
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
