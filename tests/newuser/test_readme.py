"""README.md as a new user reads it: the command table is one table naming every subcommand."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

from cli_support import run_cli

from otel_bridge.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


def _section(text: str, heading: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def test_command_table_is_one_table_with_every_subcommand() -> None:
    section = _section((ROOT / "README.md").read_text(encoding="utf-8"), "## Commands")
    rows = [i for i, line in enumerate(section) if line.startswith("|")]
    # One contiguous table: a row separated from the table renders as a stray line of text.
    assert rows == list(range(rows[0], rows[0] + len(rows)))
    named = {line.split("`")[1].split()[1] for line in section[rows[0] + 2 : rows[-1] + 1]}
    assert set(COMMANDS) <= named, sorted(set(COMMANDS) - named)


def test_no_table_row_outside_a_table() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("| `otel-bridge "):
            assert lines[i - 1].startswith("|"), f"README.md:{i + 1} is a table row outside a table"


def test_the_set_example_works_on_the_configuration_shown() -> None:
    """The README's ``--set`` example, applied to its own configuration snippet, validates and
    does what it says (its earlier example named a ``traces`` pipeline the snippet lacks)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = text.split("## Configuration\n\n```yaml\n", 1)[1].split("```", 1)[0]
    flat = " ".join(text.split())
    example = flat.split("validated with it: `", 1)[1].split("`", 1)[0]
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "readme.yaml"
        config.write_text(snippet, encoding="utf-8")
        done = run_cli("validate", str(config), *shlex.split(example), cwd=tmp)
    assert done.returncode == 0, done.stderr
    assert "exporters: graph, file" in done.stdout, done.stdout
    assert "warning" not in done.stderr, done.stderr
