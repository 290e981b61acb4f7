"""``validate`` of a bundled fleet config before its variables are set: one problem per key.

``configs/agent.yaml`` reads its gateway CA and token from ``${env:...}``. Unset, each key was
reported twice: the unset variable, then ``no such file '${env:OTEL_BRIDGE_GATEWAY_CA}'`` (the
reference text judged as a file name). The unset variable is the one problem.
"""

from __future__ import annotations

import os
from pathlib import Path

from cli_support import run_cli

CONFIGS = Path(__file__).resolve().parent.parent.parent / "otel_bridge" / "configs"


def test_an_unset_variable_is_the_only_problem_of_its_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_BRIDGE_")}
    done = run_cli("validate", str(CONFIGS / "agent.yaml"), cwd=tmp_path, env=env, timeout=60)
    assert done.returncode == 2
    problems = [line.strip() for line in done.stderr.splitlines()[1:]]
    assert problems == [
        "exporters.otlp/gateway.tls.ca_file: environment variable "
        "OTEL_BRIDGE_GATEWAY_CA is not set",
        "exporters.otlp/gateway.headers.authorization: environment variable "
        "OTEL_BRIDGE_GATEWAY_TOKEN is not set",
    ]
