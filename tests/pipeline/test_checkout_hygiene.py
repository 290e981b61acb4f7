"""Running the product from a checkout leaves nothing git would pick up.

The README's first command (``otel-bridge observe -- python examples/plain_otel_agent.py`` from
the repository root) and a bundled config run standing in the checkout write their outputs to
the current directory. Every such default path must be ignored by git and none may be tracked:
run artifacts were committed by accident once (a graph spill file and the example agent's
notes).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
CONFIGS = REPO / "otel_bridge" / "configs"
EXAMPLE_OUTPUTS = ("agent-notes.txt", "agent-notes.bak", "otel-bridge-runs/x/graph.json")
"""What the examples' built-in script and ``observe`` write into the current directory."""


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False
    )


def _default_outputs() -> list[str]:
    """The ``./...`` defaults of the bundled configs' ``${env:VAR:-./path}`` references."""
    found: set[str] = set()
    for config in CONFIGS.glob("*.yaml"):
        found.update(re.findall(r"\$\{env:[A-Z_]+:-\./([^}]+)\}", config.read_text()))
    return sorted(found)


@pytest.fixture
def checkout() -> None:
    if shutil.which("git") is None or _git("rev-parse", "--is-inside-work-tree").returncode:
        pytest.skip("not a git checkout")


@pytest.mark.usefixtures("checkout")
def test_default_outputs_are_ignored_and_untracked() -> None:
    """Each default output path is ignored by .gitignore and no tracked file is one."""
    outputs = [*_default_outputs(), *EXAMPLE_OUTPUTS]
    assert "otel-bridge-graph.spill" in outputs  # the parse found the bundled defaults
    ignored = _git("check-ignore", "--no-index", *outputs).stdout.split()
    assert sorted(ignored) == sorted(outputs)
    tracked = _git("ls-files", "--", *outputs).stdout.split()
    assert tracked == []
