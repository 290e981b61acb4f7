"""``configs/agent.yaml`` and ``configs/gateway.yaml``: ``validate`` accepts them as shipped.

Both read their endpoints, certificates and token from the environment; ``validate`` checks the
files exist, so the test makes real ones. Both also run as standing collectors in
``test_fleet_crosshost.py`` and ``test_fleet_restarts.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fleet_support import CONFIGS, TOKEN, agent_env, gateway_env, subprocess_env

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "otlp"))
from certs import make_certs


@pytest.mark.parametrize("config", ["agent.yaml", "gateway.yaml"])
def test_validate_accepts_the_fleet_configs(tmp_path: Path, config: str) -> None:
    certs = make_certs(tmp_path)
    env = (
        agent_env("gateway.example:4317", certs.ca, tmp_path / "queue")
        if config == "agent.yaml"
        else gateway_env(tmp_path / "state", certs.server, certs.server_key)
    )
    done = subprocess.run(
        [sys.executable, "-m", "otel_bridge", "validate", str(CONFIGS / config)],
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_validate_names_what_the_gateway_config_needs(tmp_path: Path) -> None:
    """Without its environment the gateway refuses to start: no certificate, no token."""
    done = subprocess.run(
        [sys.executable, "-m", "otel_bridge", "validate", str(CONFIGS / "gateway.yaml")],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "OTEL_BRIDGE_GATEWAY_CERT" in done.stderr
    assert "OTEL_BRIDGE_GATEWAY_TOKEN" in done.stderr
    assert TOKEN not in done.stderr
