"""The package installs as docs/architecture.md describes: components under ``otel_bridge.``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ("run", "validate", "observe", "graph", "verify", "export")


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The file names inside a wheel built from this checkout."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("src") / "otel-bridge"
    # Build from a copy so the build never writes into the working tree.
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", "*.egg-info", ".*_cache", "__pycache__", ".hypothesis"
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(source),
            "--no-deps",
            "-q",
            "-w",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("otel_bridge-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


@pytest.mark.slow
def test_wheel_holds_components_under_the_namespace(wheel_names: list[str]) -> None:
    """Receivers, processors, exporters and configs install inside otel_bridge/."""
    names = set(wheel_names)
    for expected in (
        "otel_bridge/receivers/__init__.py",
        "otel_bridge/receivers/otlp/__init__.py",
        "otel_bridge/receivers/host/__init__.py",
        "otel_bridge/processors/__init__.py",
        "otel_bridge/processors/batch.py",
        "otel_bridge/processors/memory_limiter.py",
        "otel_bridge/exporters/__init__.py",
        "otel_bridge/exporters/file/__init__.py",
        "otel_bridge/exporters/file/codec.py",
        "otel_bridge/configs/local.yaml",
        "otel_bridge/schemas/graph.schema.json",
        "otel_bridge/config/__init__.py",
        "otel_bridge/pipeline.py",
        "otel_bridge/testing.py",
        "otel_bridge/py.typed",
    ):
        assert expected in names, expected


@pytest.mark.slow
def test_wheel_has_no_bare_top_level_packages(wheel_names: list[str]) -> None:
    """Nothing installs as a bare receivers/, processors/, exporters/ or configs/ package."""
    tops = {n.split("/", 1)[0] for n in wheel_names if "/" in n}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"otel_bridge"}


@pytest.mark.slow
def test_every_package_folder_is_listed(wheel_names: list[str]) -> None:
    """Every folder with an __init__.py under otel_bridge/ is in the wheel (found, not listed)."""
    names = set(wheel_names)
    for init in (ROOT / "otel_bridge").rglob("__init__.py"):
        rel = init.relative_to(ROOT)
        assert rel.as_posix() in names, f"{rel} missing from the wheel"


def test_console_script_help_lists_commands() -> None:
    """``otel-bridge --help`` runs and lists every command."""
    exe = shutil.which("otel-bridge")
    cmd = [exe] if exe else [sys.executable, "-m", "otel_bridge"]
    result = subprocess.run(
        [*cmd, "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    for command in COMMANDS:
        assert command in result.stdout
