"""``otel-bridge --log-level INFO run -c configs/local.yaml`` logs at INFO.

Met as a new user: the bundled configs set ``service.telemetry.logs.level`` (``warning`` unless
``OTEL_BRIDGE_LOG_LEVEL`` says otherwise), and ``run`` applied it over the command line's
``--log-level``, so the ``following pid N from now`` line ``docs/host.md`` tells the user to
look for never appeared. An explicit ``--log-level`` now wins; without it the configuration's
level applies as before. A real ``run`` of the embedded default and a real SDK agent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from standing_support import REPO, RunningCollector, run_agent

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the linux backend)")


def test_the_command_lines_log_level_wins_over_the_configs(tmp_path: Path) -> None:
    # the config's own level, as a user who set nothing has it; RunningCollector passes
    # --log-level INFO, and run_agent waits for the INFO line naming the follow
    env = {"OTEL_BRIDGE_LOG_LEVEL": "warning"}
    collector = RunningCollector(REPO / "configs" / "local.yaml", tmp_path, env)
    agent, out, _ = run_agent(collector, tmp_path, "http/protobuf")
    assert f"following pid {agent.pid} from now" in collector.output
    assert out.exists()
