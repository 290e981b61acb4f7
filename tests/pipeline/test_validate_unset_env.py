"""``validate`` of a bundled fleet config before its variables are set: one problem per key.

``configs/agent.yaml`` reads its gateway CA and token from ``${env:...}``. Unset, each key was
reported twice: the unset variable, then ``no such file '${env:OTEL_BRIDGE_GATEWAY_CA}'`` (the
reference text judged as a file name). The unset variable is the one problem.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CONFIGS = Path(__file__).resolve().parent.parent.parent / "otel_bridge" / "configs"


def test_an_unset_variable_is_the_only_problem_of_its_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_BRIDGE_")}
    done = subprocess.run(
        [sys.executable, "-m", "otel_bridge", "validate", str(CONFIGS / "agent.yaml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    problems = [line.strip() for line in done.stderr.splitlines()[1:]]
    assert problems == [
        "exporters.otlp/gateway.tls.ca_file: environment variable "
        "OTEL_BRIDGE_GATEWAY_CA is not set",
        "exporters.otlp/gateway.headers.authorization: environment variable "
        "OTEL_BRIDGE_GATEWAY_TOKEN is not set",
    ]
