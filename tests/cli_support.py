"""Running the ``otel-bridge`` command line in a child process, as a user does.

One runner for the tests that call a command and read its exit status and output: this
interpreter's ``python -m otel_bridge``, output captured as text, the exit status returned (never
raised), a timeout so a hung command fails the test instead of the session.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def run_cli(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = 120.0,
) -> subprocess.CompletedProcess[str]:
    """``python -m otel_bridge ARGS``, finished.

    ``cwd``: its working directory (None: this process's); ``env``: its whole environment
    (None: this process's); ``timeout``: seconds before :class:`subprocess.TimeoutExpired`.
    """
    return subprocess.run(
        [sys.executable, "-m", "otel_bridge", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def same_imports_env() -> dict[str, str]:
    """This process's environment with its import path as ``PYTHONPATH``: the child imports the
    package these tests import (this checkout's), not another installed copy."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def observed_run(
    cwd: Path, *command: str, options: tuple[str, ...] = (), timeout: float = 300.0
) -> Path:
    """``otel-bridge observe --no-review OPTIONS -o cwd/run -- COMMAND`` run in ``cwd`` with
    no ``OTEL_*`` variable set (a user's shell that sets none); asserts it exited 0 and
    returns the run directory."""
    run = cwd / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = run_cli(
        "observe", "--no-review", *options, "-o", str(run), "--", *command,
        cwd=cwd, env=env, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return run
