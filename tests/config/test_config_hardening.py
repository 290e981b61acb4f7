"""A config loader that cannot be crashed (issue 13, reproduction 5).

Every hostile file is a ConfigError with a message naming where (line/column or key path),
never a traceback, and refused fast: no expansion, no unbounded recursion.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cli_support import run_cli

from otel_bridge.config import load_config, load_yaml, parse_config, read_config
from otel_bridge.config.loader import MAX_CONFIG_BYTES, MAX_DEPTH
from otel_bridge.errors import ConfigError

_BASE = """receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:4318
exporters:
  file:
    path: {path}
    flush_interval: {interval}
service:
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
"""


def _config(interval: str = "1s", path: str = "./out.jsonl") -> bytes:
    return _BASE.format(interval=interval, path=path).encode()


_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)

CASES: dict[str, tuple[bytes, str]] = {
    "invalid utf-8": (
        _config(path="./caf\xe9.jsonl").replace(b"\xc3\xa9", b"\xe9"),
        "not valid UTF-8",
    ),
    "truncated utf-16": ("\ufeffa: b\n".encode("utf-16")[:-1], "not valid UTF-16"),
    "!!float abc": (
        _config(interval="!!float abc"),
        "exporters.file.flush_interval: float value 'abc'",
    ),
    "!!set key": (b"? !!set {a}\n: 1\n", "a set cannot be a key"),
    "mapping key": (b"? {a: 1}\n: 1\n", "a dict cannot be a key"),
    "self-referencing alias": (
        b"receivers: &x {otlp: *x}\n",
        "receivers.otlp: an alias refers to itself",
    ),
    "deep flow nesting": (b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n", "nested deeper than"),
    "deep block nesting": (
        "".join(" " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5)).encode(),
        f"nested deeper than {MAX_DEPTH}",
    ),
    "400-digit duration": (
        _config(interval="9" * 400 + "s"),
        "exporters.file.flush_interval: invalid duration",
    ),
    "400-digit number": (
        _config(interval="9" * 400),
        "exporters.file.flush_interval: expected a finite number",
    ),
    "5000-digit integer": (
        _config(interval="9" * 5000),
        "exporters.file.flush_interval: int value",
    ),
    ".nan timeout": (
        _config(interval=".nan"),
        "exporters.file.flush_interval: expected a finite number",
    ),
    ".inf timeout": (
        _config(interval=".inf"),
        "exporters.file.flush_interval: expected a finite number",
    ),
    "NUL in a path": (
        _config(path='"./out\\0.jsonl"'),
        "exporters.file.path: contains a NUL character",
    ),
    "billion laughs": (_LAUGHS.encode(), "expands to more than"),
    "too large": (b"#" * (MAX_CONFIG_BYTES + 1), f"larger than {MAX_CONFIG_BYTES} bytes"),
    "python tag": (b"a: !!python/object:os.system {}\n", "could not determine a constructor"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_config_is_a_clean_error_fast(tmp_path: Path, name: str) -> None:
    """Each reproduction is one ConfigError whose message says where and what, within 5 s."""
    data, message = CASES[name]
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert time.monotonic() - started < 5.0
    assert any(message in p for p in info.value.problems), info.value.problems


def test_utf16_with_a_bom_is_read_as_yaml_allows(tmp_path: Path) -> None:
    """UTF-16 with a byte-order mark is valid YAML and loads like UTF-8."""
    path = tmp_path / "c.yaml"
    path.write_bytes(("\ufeff" + _config().decode()).encode("utf-16"))
    assert load_config(path, env={}).exporters["file"].config.flush_interval == 1.0


def test_an_environment_variable_of_5000_digits_stays_text() -> None:
    """${env:X} whose value YAML cannot read as a number is kept as text, not a crash."""
    mapping = load_yaml(_config(interval="${env:BIG}").decode(), "c.yaml")
    with pytest.raises(ConfigError, match=r"exporters\.file\.flush_interval: invalid duration"):
        parse_config(mapping, env={"BIG": "9" * 5000})


def test_an_unreadable_path_is_a_config_error(tmp_path: Path) -> None:
    """A directory, a missing file and a NUL in the file name are ConfigErrors."""
    for path in (str(tmp_path), str(tmp_path / "absent.yaml"), "bad\0name.yaml"):
        with pytest.raises(ConfigError, match="cannot read"):
            read_config(path)


def test_validate_prints_no_traceback(tmp_path: Path) -> None:
    """The command line answers a hostile file with exit 2 and the message, no traceback."""
    path = tmp_path / "laughs.yaml"
    path.write_text(_LAUGHS)
    result = run_cli("validate", str(path), timeout=60)
    assert result.returncode == 2
    assert "expands to more than" in result.stderr
    assert "Traceback" not in result.stderr
