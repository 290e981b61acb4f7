"""``--set KEY=VALUE`` overrides on run, validate and observe (issue 11, Collector conventions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_cli

from otel_bridge.config import apply_overrides, load_yaml, parse_config, parse_override
from otel_bridge.errors import ConfigError

_FILE = """receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:4318
exporters:
  file:
    path: ./out.jsonl
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
"""


def _mapping() -> object:
    return load_yaml(_FILE, "c.yaml")


def test_overrides_set_values_after_the_file() -> None:
    """Dotted and ``::`` paths set typed YAML values; later overrides win; the file's mapping
    is not modified."""
    mapping = _mapping()
    config = parse_config(
        mapping,
        env={},
        overrides=[
            "exporters.file.flush_interval=250ms",
            "exporters::file::path=./first.jsonl",
            "exporters.file.path=./second.jsonl",
            "exporters.file.signals=[spans]",
        ],
    )
    file_config = config.exporters["file"].config
    assert file_config.flush_interval == 0.25
    assert file_config.path == "./second.jsonl"
    assert file_config.signals == ["spans"]
    assert parse_config(mapping, env={}, overrides=[]).exporters["file"].config.path == (
        "./out.jsonl"
    )


def test_an_override_is_validated_like_the_file() -> None:
    """A wrong type or unknown key given by --set fails with its full key path."""
    with pytest.raises(ConfigError) as info:
        parse_config(
            _mapping(),
            env={},
            overrides=["exporters.file.flush_interval=.nan", "exporters.file.colour=red"],
        )
    assert "exporters.file.flush_interval: expected a finite number, got number nan" in (
        info.value.problems
    )
    assert any(p.startswith("exporters.file.colour: unknown key") for p in info.value.problems)


def test_missing_mappings_are_created() -> None:
    """An override below a section the file lacks creates it (here a whole new exporter)."""
    out = apply_overrides(
        {"a": 1}, ["exporters.file/two.path=./x", "exporters.file/two.append=true"]
    )
    assert out == {"a": 1, "exporters": {"file/two": {"path": "./x", "append": True}}}


def test_parse_override_splits_on_double_colon_when_given() -> None:
    """``::`` separates keys that hold dots; the value is YAML."""
    assert parse_override("service::telemetry::logs.x=[1, 2]") == (
        ["service", "telemetry", "logs.x"],
        [1, 2],
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no-equals-sign", "expected KEY=VALUE"),
        ("=value", "expected KEY=VALUE"),
        ("a..b=1", "empty key"),
        ("a.b=[unclosed", "invalid YAML"),
        ("exporters.file.path.deeper=1", "exporters.file.path is not a mapping"),
    ],
)
def test_malformed_overrides_are_config_errors(text: str, message: str) -> None:
    """A malformed --set is a ConfigError that quotes it."""
    with pytest.raises(ConfigError, match=message):
        apply_overrides({"exporters": {"file": {"path": "x"}}}, [text])


def test_validate_takes_set(tmp_path: Path) -> None:
    """validate FILE --set ...: the override is checked with the file (exit 2 naming the key)."""
    path = tmp_path / "c.yaml"
    path.write_text(_FILE)
    ok = run_cli("validate", str(path), "--set", "exporters.file.flush_interval=2s", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    bad = run_cli(
        "validate", str(path), "--set", "exporters.file.flush_interval=soon", cwd=tmp_path
    )
    assert bad.returncode == 2
    assert "exporters.file.flush_interval: invalid duration 'soon'" in bad.stderr


def test_observe_takes_set(tmp_path: Path) -> None:
    """observe --set reaches the run's own components: the host backend chosen by --set is the
    one the summary reports."""
    run = tmp_path / "run"
    result = run_cli(
        "observe",
        "--set",
        "receivers.host.backend=portable",
        "-o",
        str(run),
        "--no-progress",
        "--",
        "true",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["host_backend_name"] == "portable"
