"""Config tests for the host receiver and redact processor: the tables of tests/testdata, and
each numeric host key's bounds through the loader and the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import run_cli, same_imports_env

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
    if path.parent.name == "host":
        return load_body(host=body, origin=str(path))
    return load_body(redact=body, origin=str(path))


def load_body(
    *, host: Any = None, redact: Any = None, origin: str = "test.yaml"
) -> CollectorConfig:
    """A host receiver body (and a redact processor body, when given) in a minimal logs
    pipeline, parsed by the loader ``run`` and ``validate`` use."""
    receivers: dict[str, Any] = {"host": {} if host is None else host}
    processors: dict[str, Any] = {} if redact is None else {"redact": redact}
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
    return parse_config(doc, env={}, origin=origin)


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


BETWEEN = "must be between 0 and 60 seconds"
NOT_A_DURATION = "invalid duration 'soon' (expected e.g. 200ms, 3s, 1m30s; units ns us ms s m h)"


def _nested(key: str, value: Any) -> dict[str, Any]:
    """``{"capture": {"max_bytes": value}}`` for ``capture.max_bytes``."""
    head, _, rest = key.partition(".")
    return {head: _nested(rest, value) if rest else value}


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("file_merge_window", -1, BETWEEN),
        ("file_merge_window", 61, BETWEEN),
        ("file_merge_window", "2m", BETWEEN),
        ("file_merge_window", "soon", NOT_A_DURATION),
        ("file_merge_window", True, "expected a number or a duration such as 3s, got boolean true"),
        ("file_merge_window", [1], "expected a number or a duration such as 3s, got a list"),
        ("network_poll_interval", 0, "must be at least 1ms"),
        ("network_poll_interval", "500us", "must be at least 1ms"),
        ("batch_interval", 0, "must be > 0"),
        ("batch_interval", -1, "must be > 0"),
        ("startup_timeout", 0, "must be > 0"),
        ("startup_timeout", "soon", NOT_A_DURATION),
        ("root_pid", -1, "must be >= 0"),
        ("root_pid", 1.5, "expected an integer, got number 1.5"),
        ("capture.max_bytes", -1, "must be >= 0"),
    ],
)
def test_a_numeric_host_key_out_of_bounds_is_refused_with_its_key_path(
    key: str, value: Any, problem: str
) -> None:
    """Each bound of a numeric host key (and a value that is no number) is one problem naming
    the key's path, as ``run`` and ``validate`` report it."""
    with pytest.raises(ConfigError) as info:
        load_body(host=_nested(key, value))
    assert list(info.value.problems) == [f"receivers.host.{key}: {problem}"]


@pytest.mark.parametrize(
    ("key", "value", "seconds"),
    [
        ("file_merge_window", 0, 0.0),
        ("file_merge_window", 60, 60.0),
        ("file_merge_window", "500ms", 0.5),
        ("network_poll_interval", "1ms", 0.001),
        ("batch_interval", "1ms", 0.001),
        ("startup_timeout", "2m", 120.0),
    ],
)
def test_a_numeric_host_key_within_bounds_loads_in_seconds(
    key: str, value: Any, seconds: float
) -> None:
    """The bounds themselves are accepted; a duration becomes seconds."""
    host = load_body(host={key: value}).receivers["host"].config
    assert isinstance(host, HostConfig)
    assert getattr(host, key) == pytest.approx(seconds)


_RUN_CONFIG = """receivers:
  host:
    file_merge_window: {window}
exporters:
  file:
    path: out.jsonl
service:
  pipelines:
    logs:
      receivers: [host]
      exporters: [file]
"""


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize(
    ("window", "problem"),
    [
        pytest.param("-1", BETWEEN, id="negative"),
        pytest.param("61", BETWEEN, id="over-60"),
        pytest.param("soon", NOT_A_DURATION, id="not-a-number"),
    ],
)
def test_the_command_line_refuses_a_bad_file_merge_window(
    tmp_path: Path, command: str, window: str, problem: str
) -> None:
    """``otel-bridge validate`` and ``run`` exit 2 with the problem under its key path, and
    ``run`` starts nothing (no output file)."""
    config = tmp_path / "collector.yaml"
    config.write_text(_RUN_CONFIG.format(window=window))
    argv = ["validate", str(config)] if command == "validate" else ["run", "-c", str(config)]
    done = run_cli(*argv, cwd=tmp_path, env=same_imports_env(), timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "otel-bridge: invalid configuration:",
        f"  receivers.host.file_merge_window: {problem}",
    ]
    assert done.stdout == ""
    assert list(tmp_path.iterdir()) == [config]
