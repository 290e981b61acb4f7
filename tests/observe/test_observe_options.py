"""``observe``'s command line read without ``argparse`` (the warm client's parser,
``otel_bridge/commands/observe_options.py``) gives exactly what ``argparse`` gives, or declines
and leaves the command line to ``argparse``."""

from __future__ import annotations

from typing import Any

import pytest

from otel_bridge.cli import build_parser
from otel_bridge.commands.observe_options import OPTIONS, parse


def with_argparse(argv: list[str]) -> dict[str, Any]:
    args = build_parser(argv).parse_args(argv)
    return {k: v for k, v in vars(args).items() if not callable(v)}


READ = [
    ["observe", "--", "true"],
    ["observe", "true"],
    ["observe", "-o", "run", "--no-progress", "--", "sh", "-c", "exit 3"],
    ["observe", "-o", "run", "true", "--no-review", "-o", "x"],  # after CMD: CMD's
    ["observe", "--no-review", "--", "-x", "--"],
    ["--log-level", "DEBUG", "observe", "--", "a"],
    ["--log-level=info", "observe", "a"],
    ["--log-level", "observe", "observe", "a"],
    ["observe", "--set", "a=b", "--set=c=d", "--", "t"],
    ["observe", "-c", "cfg.yaml", "--backend", "linux", "--replace", "--", "t"],
    ["observe", "--backend=strace", "--output=out dir", "--", "t"],
    ["observe", "--review-transcript", "a.jsonl", "--review-transcript", "b", "--", "t"],
    ["observe", "--review-model", "http://127.0.0.1:1/v1", "--view", "--hash-files", "t"],
    ["observe", "--no-forward", "--keep-runtime-reads", "--no-warm", "--", "t"],
    ["observe", "--warm-server"],
    ["observe", "-o", "", "--", "t"],
    ["observe"],
    ["observe", "--"],
]


@pytest.mark.parametrize("argv", READ, ids=" ".join)
def test_what_it_reads_argparse_reads_the_same(argv: list[str]) -> None:
    assert parse(argv) == with_argparse(argv)


DECLINED = [
    ["observe", "--no-rev", "--", "t"],  # an abbreviation argparse accepts
    ["observe", "-oDIR", "--", "t"],
    ["observe", "-o=DIR", "--", "t"],
    ["observe", "--output=", "--", "t"],
    ["observe", "-o", "-x", "--", "t"],  # argparse: expected one argument
    ["observe", "--backend", "psutil", "--", "t"],  # not a choice
    ["observe", "--no-review=1", "--", "t"],
    ["observe", "-h"],
    ["observe", "--unknown", "t"],
    ["observe", "-o"],
    ["--version", "observe", "t"],
    ["-h", "observe"],
    ["observe", "--log-level", "DEBUG", "t"],  # the top level's option after the command
]


@pytest.mark.parametrize("argv", DECLINED, ids=" ".join)
def test_what_it_does_not_read_exactly_goes_to_argparse(argv: list[str]) -> None:
    assert parse(argv) is None


def test_every_registered_option_is_in_the_table() -> None:
    """The table is the parser: argparse's ``observe`` sets no option the table lacks."""
    dests = set(with_argparse(["observe", "t"]))
    table = {option.dest for option in OPTIONS}
    assert dests - table == {"set", "log_level", "command", "exit_when_done"}
