"""Table-driven config tests for the host receiver and redact processor (tests/testdata)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_bridge.config import CollectorConfig, parse_config
from otel_bridge.errors import ConfigError
from otel_bridge.receivers.host import HostConfig

TESTDATA = Path(__file__).resolve().parent.parent / "testdata"
MINE = ("host", "redact")


def cases(prefix: str) -> list[Any]:
    """Every ``<prefix>*.yaml`` of the host and redact folders, as pytest params."""
    return [
        pytest.param(path, id=f"{path.parent.name}/{path.stem}")
        for folder in MINE
        for path in sorted((TESTDATA / folder).glob(f"{prefix}*.yaml"))
    ]


def load_case(path: Path) -> CollectorConfig:
    """Place one component body in a minimal logs pipeline and parse it."""
    body = yaml.safe_load(path.read_text())
    processors: dict[str, Any] = {}
    receivers: dict[str, Any] = {"host": {}}
    if path.parent.name == "host":
        receivers["host"] = body
    else:
        processors["redact"] = body
    doc = {
        "receivers": receivers,
        "processors": processors,
        "exporters": {"file": {"path": "/tmp/otel-bridge-test-unused.jsonl"}},
        "service": {
            "pipelines": {
                "logs": {
                    "receivers": ["host"],
                    "processors": list(processors),
                    "exporters": ["file"],
                }
            }
        },
    }
    return parse_config(doc, env={}, origin=str(path))


def test_testdata_is_complete() -> None:
    """Each folder has good and bad cases and every bad case lists its expected problems."""
    for folder in MINE:
        files = sorted((TESTDATA / folder).glob("*.yaml"))
        assert any(f.name.startswith("good_") for f in files), folder
        assert any(f.name.startswith("bad_") for f in files), folder
        for f in files:
            if f.name.startswith("bad_"):
                assert f.with_suffix(".expected").exists(), f


@pytest.mark.parametrize("path", cases("good_"))
def test_good_config_loads(path: Path) -> None:
    """A good file loads; durations such as 5ms become seconds."""
    config = load_case(path)
    host = config.receivers["host"].config
    assert isinstance(host, HostConfig)
    assert host.validate() == []
    if path.stem == "good_portable":
        assert host.poll_interval == pytest.approx(0.005)
    if path.stem == "good_tracers":
        assert host.startup_timeout == pytest.approx(30)


@pytest.mark.parametrize("path", cases("bad_"))
def test_bad_config_reports_every_problem(path: Path) -> None:
    """A bad file raises one ConfigError listing exactly the expected problems."""
    lines = path.with_suffix(".expected").read_text().splitlines()
    expected = [line for line in lines if line.strip()]
    with pytest.raises(ConfigError) as info:
        load_case(path)
    assert sorted(info.value.problems) == sorted(expected)
