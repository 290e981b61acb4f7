"""Table-driven configuration tests of the normalize processor and graph exporter over
``tests/testdata/{normalize,graph}/*.yaml`` (good files load; bad files list every problem)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_bridge.config import CollectorConfig, parse_config
from otel_bridge.errors import ConfigError
from otel_bridge.exporters import graph
from otel_bridge.processors import normalize
from otel_bridge.testing import double_registry

TESTDATA = Path(__file__).resolve().parent.parent / "testdata"
MINE = {"normalize": "processors", "graph": "exporters"}
ENV = {"OTEL_BRIDGE_TEST_DIR": "/tmp"}


def cases(prefix: str) -> list[Any]:
    """Every ``<prefix>*.yaml`` in this component's folders."""
    return [
        pytest.param(path, id=f"{path.parent.name}/{path.stem}")
        for folder in MINE
        for path in sorted((TESTDATA / folder).glob(f"{prefix}*.yaml"))
    ]


def load_case(path: Path) -> CollectorConfig:
    """Place the component body in a minimal evidence pipeline and load it."""
    kind = path.parent.name
    section = MINE[kind]
    body = yaml.safe_load(path.read_text())
    doc: dict[str, Any] = {"receivers": {"list": None}, section: {kind: body}}
    if section == "processors":
        doc["exporters"] = {"recording": None}
    pipeline = {
        "receivers": ["list"],
        "processors": [kind] if section == "processors" else [],
        "exporters": [kind] if section == "exporters" else ["recording"],
    }
    doc["service"] = {"pipelines": {"evidence": pipeline}}
    registry = double_registry(normalize.factory, graph.factory)
    return parse_config(doc, env=ENV, registry=registry, origin=str(path))


def test_testdata_is_complete() -> None:
    """Each folder has good and bad files, and every bad file its expected problems."""
    for folder in MINE:
        files = sorted((TESTDATA / folder).glob("*.yaml"))
        assert any(f.name.startswith("good_") for f in files)
        assert any(f.name.startswith("bad_") for f in files)
        assert all(f.with_suffix(".expected").exists() for f in files if f.name.startswith("bad_"))


@pytest.mark.parametrize("path", cases("good_"))
def test_good_config_loads(path: Path) -> None:
    """A good file loads."""
    assert load_case(path).pipelines


@pytest.mark.parametrize("path", cases("bad_"))
def test_bad_config_reports_every_problem(path: Path) -> None:
    """A bad file raises one ConfigError listing exactly the expected problems."""
    expected = [
        line for line in path.with_suffix(".expected").read_text().splitlines() if line.strip()
    ]
    with pytest.raises(ConfigError) as info:
        load_case(path)
    got = [p.replace(str(path), path.name) for p in info.value.problems]
    assert sorted(got) == sorted(expected)


def test_good_values_arrive_typed() -> None:
    """Durations, rules and run metadata arrive as typed values."""
    config = load_case(TESTDATA / "graph" / "good_all.yaml")
    exporter_config = config.exporters["graph"].config
    assert isinstance(exporter_config, graph.GraphExporterConfig)
    assert exporter_config.flush_interval == 0.5
    assert exporter_config.output == "/tmp/graph.json"
    assert exporter_config.run == {"id": "run-1", "agent": "planner"}
    rules = load_case(TESTDATA / "normalize" / "good_rules.yaml").processors["normalize"].config
    assert isinstance(rules, normalize.NormalizeConfig)
    assert rules.channel_rules[1].match.scope.name == "acme\\.runtime(\\..*)?"
    assert rules.default_rules is False
