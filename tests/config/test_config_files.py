"""Table-driven configuration tests over ``tests/testdata/<type>/*.yaml``.

``tests/testdata/config/`` holds whole configurations; the other folders hold the body of one
component (the folder name is its type), which the test places in a minimal configuration. A
``bad_*.yaml`` file has a sibling ``.expected`` listing every problem line the loader must report
(in any order, nothing more); a ``good_*.yaml`` file must load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from otel_bridge.config import CollectorConfig, load_config, parse_config
from otel_bridge.errors import ConfigError
from otel_bridge.exporters import file as file_exporter
from otel_bridge.processors import batch, memory_limiter
from otel_bridge.registry import Registry
from otel_bridge.testing import double_registry

TESTDATA = Path(__file__).resolve().parent.parent / "testdata"
MINE = ("config", "batch", "memory_limiter", "file")
ENV = {
    "OTEL_BRIDGE_TEST_FLAG": "true",
    "OTEL_BRIDGE_TEST_SIZE": "100",
    "OTEL_BRIDGE_TEST_DIR": "/tmp",
}
KIND_SECTION = {"batch": "processors", "memory_limiter": "processors", "file": "exporters"}


def registry() -> Registry:
    """The doubles plus the runtime engineer's real components."""
    return double_registry(batch.factory, memory_limiter.factory, file_exporter.factory)


def cases(prefix: str) -> list[Any]:
    """Every ``<prefix>*.yaml`` under the folders this file covers, as pytest params."""
    return [
        pytest.param(path, id=f"{path.parent.name}/{path.stem}")
        for folder in MINE
        for path in sorted((TESTDATA / folder).glob(f"{prefix}*.yaml"))
    ]


def load_case(path: Path) -> CollectorConfig:
    """Load one testdata file, wrapping a component body in a minimal configuration."""
    kind = path.parent.name
    if kind == "config":
        return load_config(path, env=ENV, registry=registry())
    body = yaml.safe_load(path.read_text())
    section = KIND_SECTION[kind]
    doc: dict[str, Any] = {"receivers": {"list": None}, section: {kind: body}}
    exporters = [kind] if section == "exporters" else ["recording"]
    processors = [kind] if section == "processors" else []
    if section != "exporters":
        doc["exporters"] = {"recording": None}
    doc["service"] = {
        "pipelines": {
            "evidence": {"receivers": ["list"], "processors": processors, "exporters": exporters}
        }
    }
    return parse_config(doc, env=ENV, registry=registry(), origin=str(path))


def test_testdata_is_complete() -> None:
    """Every bad file has an expected-problems file and every folder has good and bad cases."""
    for folder in MINE:
        files = sorted((TESTDATA / folder).glob("*.yaml"))
        assert any(f.name.startswith("good_") for f in files), folder
        assert any(f.name.startswith("bad_") for f in files), folder
        for f in files:
            if f.name.startswith("bad_"):
                assert f.with_suffix(".expected").exists(), f


@pytest.mark.parametrize("path", cases("good_"))
def test_good_config_loads(path: Path) -> None:
    """A good testdata file loads into a config with at least one pipeline."""
    config = load_case(path)
    assert config.pipelines
    for pipeline in config.pipelines.values():
        assert pipeline.receivers
        assert pipeline.exporters


@pytest.mark.parametrize("path", cases("bad_"))
def test_bad_config_reports_every_problem(path: Path) -> None:
    """A bad testdata file raises one ConfigError listing exactly the expected problems."""
    expected = [
        line for line in path.with_suffix(".expected").read_text().splitlines() if line.strip()
    ]
    with pytest.raises(ConfigError) as info:
        load_case(path)
    got = [p.replace(str(path), path.name) for p in info.value.problems]
    assert sorted(got) == sorted(expected)
