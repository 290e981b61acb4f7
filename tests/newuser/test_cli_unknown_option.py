"""An unknown option of a command is refused with that command's usage, not the top level's.

A new user typed ``otel-bridge observe --bogus`` and got ``usage: otel-bridge [-h] [--version]
[--log-level LOG_LEVEL] COMMAND ...`` and ``otel-bridge: error: unrecognized arguments``:
argparse's subcommand parsers leave what they do not know to the top-level parser, which
prints its own usage. Every command (and ``db``'s actions) now refuses it with its own.
"""

from __future__ import annotations

import pytest
from cli_support import run_cli


@pytest.mark.parametrize(
    ("args", "prog"),
    [
        (("observe", "--bogus", "--", "true"), "otel-bridge observe"),
        (("compare", "--bogus", "a", "b"), "otel-bridge compare"),
        (("view", "--bogus"), "otel-bridge view"),
        (("validate", "--bogus"), "otel-bridge validate"),
        (("db", "status", "--db", "postgresql://x@y/z", "--bogus"), "otel-bridge db status"),
    ],
    ids=["observe", "compare", "view", "validate", "db status"],
)
def test_unknown_option_gets_the_commands_own_usage(args: tuple[str, ...], prog: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"usage: {prog} "), done.stderr
    assert f"{prog}: error: unrecognized arguments: --bogus" in done.stderr, done.stderr
    assert done.stdout == ""
