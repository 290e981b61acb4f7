"""``configs/agent.yaml`` and ``configs/gateway.yaml``: ``validate`` accepts them as shipped; the
fleet processors' settings from ``tests/testdata/<type>/`` (good ones load, bad ones, typos
included, name every problem).

Both read their endpoints, certificates and token from the environment; ``validate`` checks the
files exist, so the test makes real ones. Both also run as standing collectors in
``test_fleet_crosshost.py`` and ``test_fleet_restarts.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import run_cli
from fleet_support import CONFIGS, TOKEN, agent_env, gateway_env, subprocess_env

from otel_bridge.config import parse_config
from otel_bridge.errors import ConfigError
from otel_bridge.processors import crosshost
from otel_bridge.testing import double_registry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "otlp"))
from certs import make_certs


@pytest.mark.parametrize("config", ["agent.yaml", "gateway.yaml", "gateway-postgres.yaml"])
def test_validate_accepts_the_fleet_configs(tmp_path: Path, config: str) -> None:
    if config == "gateway-postgres.yaml":
        pytest.importorskip("psycopg", reason="needs the postgres extra")
    certs = make_certs(tmp_path)
    env = (
        agent_env("gateway.example:4317", certs.ca, tmp_path / "queue")
        if config == "agent.yaml"
        else gateway_env(tmp_path / "state", certs.server, certs.server_key)
    )
    env["OTEL_BRIDGE_DB_URL"] = "postgresql://otel_bridge@db.example:5432/otel_bridge"
    env["OTEL_BRIDGE_GATEWAY_RUN"] = "gateway-1"
    done = run_cli("validate", str(CONFIGS / config), env=subprocess_env(**env), timeout=60)
    assert done.returncode == 0, done.stderr


def test_validate_names_what_the_gateway_config_needs(tmp_path: Path) -> None:
    """Without its environment the gateway refuses to start: no certificate, no token."""
    done = run_cli("validate", str(CONFIGS / "gateway.yaml"), env=subprocess_env(), timeout=60)
    assert done.returncode != 0
    assert "OTEL_BRIDGE_GATEWAY_CERT" in done.stderr
    assert "OTEL_BRIDGE_GATEWAY_TOKEN" in done.stderr
    assert TOKEN not in done.stderr


TESTDATA = Path(__file__).resolve().parent.parent / "testdata"
FLEET_PROCESSORS = ("crosshost", "logs_to_evidence", "evidence_to_logs")


def _load(path: Path) -> None:
    kind = path.parent.name
    doc = {
        "receivers": {"list": None},
        "processors": {kind: yaml.safe_load(path.read_text())},
        "exporters": {"recording": None},
        "service": {
            "pipelines": {
                "evidence": {
                    "receivers": ["list"],
                    "processors": [kind],
                    "exporters": ["recording"],
                }
            }
        },
    }
    parse_config(doc, env={}, registry=double_registry(*crosshost.factories))


def _cases(prefix: str) -> list[Any]:
    return [
        pytest.param(path, id=f"{path.parent.name}/{path.stem}")
        for kind in FLEET_PROCESSORS
        for path in sorted((TESTDATA / kind).glob(f"{prefix}*.yaml"))
    ]


@pytest.mark.parametrize("path", _cases("good_"))
def test_good_processor_settings_load(path: Path) -> None:
    _load(path)


@pytest.mark.parametrize("path", _cases("bad_"))
def test_bad_processor_settings_name_every_problem(path: Path) -> None:
    expected = path.with_suffix(".expected").read_text().splitlines()
    with pytest.raises(ConfigError) as caught:
        _load(path)
    assert sorted(caught.value.problems) == sorted(expected)
