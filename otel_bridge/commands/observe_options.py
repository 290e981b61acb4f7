"""``observe``'s options, in one table: :func:`otel_bridge.commands.observe.register` builds its
``argparse`` parser from it, and the warm client (:mod:`otel_bridge.warm`) parses the common
command lines with :func:`parse` without importing ``argparse`` at all.

:func:`parse` accepts only what it reads exactly as ``argparse`` would (the options by their full
names, ``--name=value``, ``--`` and CMD); anything else (an abbreviation, ``-h``, a value that
starts with ``-``, a choice not offered, an option after CMD's first word is not one: that is
CMD's) makes it return None, and the command line goes to ``argparse``, which accepts it or
explains the error. ``tests/observe/test_observe_options.py`` checks both give the same
options.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not ``typing``'s: the warm client does not import ``typing``
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

FLAG = "flag"
VALUE = "value"
APPEND = "append"


class Option:
    """One option of ``observe``: its flags, destination, kind and help."""

    __slots__ = ("choices", "dest", "flags", "help", "kind", "metavar")

    def __init__(
        self,
        flags: tuple[str, ...],
        kind: str,
        help_text: str,
        *,
        metavar: str | None = None,
        choices: tuple[str, ...] | None = None,
    ) -> None:
        self.flags = flags
        self.dest = flags[-1].lstrip("-").replace("-", "_")
        self.kind = kind
        self.help = help_text
        self.metavar = metavar
        self.choices = choices

    def default(self) -> Any:
        """The value when the option is not given."""
        return False if self.kind == FLAG else [] if self.kind == APPEND else None


BACKENDS = ("auto", "linux", "ebpf", "strace", "portable")

OPTIONS: tuple[Option, ...] = (
    Option(("-c", "--config"), VALUE, "collector config to extend", metavar="FILE"),
    Option(
        ("-o", "--output"),
        VALUE,
        "run directory (default ./otel-bridge-runs/<run id>)",
        metavar="DIR",
    ),
    Option(
        ("--backend",),
        VALUE,
        "host observation backend (default: the config's, else auto)",
        choices=BACKENDS,
    ),
    Option(("--no-progress",), FLAG, "no live progress line"),
    Option(
        ("--verbose",),
        FLAG,
        "say each plane's observation in full at the end (default: one short line per plane; "
        "summary.json and report.md have the detail)",
    ),
    Option(
        ("--replace",),
        FLAG,
        "replace the previous run in -o DIR (default: refuse a non-empty directory)",
    ),
    Option(
        ("--no-forward",),
        FLAG,
        "do not forward CMD's telemetry to the OTEL_EXPORTER_OTLP_* destination already set",
    ),
    Option(
        ("--keep-runtime-reads",),
        FLAG,
        "keep interpreter and shared-library reads as file nodes in graph.json",
    ),
    Option(("--view",), FLAG, "serve the live viewer on 127.0.0.1 during the run"),
    Option(("--no-review",), FLAG, "do not review the run (docs/review.md)"),
    Option(
        ("--hash-files",),
        FLAG,
        "record the size and sha256 of each file CMD wrote (never the content; "
        "off by default: docs/host.md)",
    ),
    Option(
        ("--review-transcript",),
        APPEND,
        "the review also reads this Codex session transcript (rollout JSONL); repeatable",
        metavar="FILE",
    ),
    Option(
        ("--review-model",),
        VALUE,
        "the review asks this OpenAI-compatible base URL for proposals (off by default)",
        metavar="URL",
    ),
    Option(
        ("--warm-server",),
        FLAG,
        "serve observe runs of this user from a warm process (until SIGTERM/Ctrl-C): each "
        "observe then skips the start-up imports (docs/observe.md)",
    ),
    Option(
        ("--no-warm",),
        FLAG,
        "do not use a warm server even if one is listening (also: OTEL_BRIDGE_WARM=0)",
    ),
)
"""Every option ``observe`` registers (``--set``, which the command line adds to each command
that reads a configuration, and ``--log-level``, a top-level option, are :data:`EXTRA`)."""

EXTRA: tuple[Option, ...] = (Option(("--set",), APPEND, "", metavar="KEY=VALUE"),)
_TOP = Option(("--log-level",), VALUE, "")
_BY_FLAG = {flag: option for option in (*OPTIONS, *EXTRA) for flag in option.flags}
DEFAULTS: dict[str, Any] = {"log_level": None, "exit_when_done": True}
"""What the parser sets besides the options (the top level's, and ``observe``'s defaults)."""


def parse(argv: Sequence[str]) -> dict[str, Any] | None:
    """The options of ``[--log-level L] observe [OPTION...] [--] CMD...`` as ``argparse`` gives
    them (its namespace without ``func``; CMD under ``command``, ``--`` included), or None when
    ``argparse`` must read the command line."""
    values: dict[str, Any] = {**DEFAULTS}
    values.update((o.dest, o.default()) for o in (*OPTIONS, *EXTRA))
    args = list(argv)
    i = 0
    while i < len(args) and args[i] != "observe":  # the top level: --log-level only
        taken = _take(_TOP, args, i, values)
        if taken is None:
            return None
        i = taken
    i += 1
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        name = args[i].partition("=")[0]
        option = _BY_FLAG.get(name)
        if option is None:
            return None
        taken = _take(option, args, i, values)
        if taken is None:
            return None
        i = taken
    values["command"] = args[i:]
    return values


def _take(option: Option, args: list[str], i: int, values: dict[str, Any]) -> int | None:
    """Read ``option`` at ``args[i]`` into ``values``; the index after it (None: not exactly)."""
    arg = args[i]
    name, equals, attached = arg.partition("=")
    if name not in option.flags:
        return None
    if option.kind == FLAG:
        if equals:
            return None
        values[option.dest] = True
        return i + 1
    if equals:
        if not name.startswith("--") or not attached:  # ``-o=DIR``, ``--output=``: argparse's
            return None
        value, after = attached, i + 1
    elif i + 1 < len(args):
        value, after = args[i + 1], i + 2
    else:
        return None
    if (not equals and value.startswith("-")) or (option.choices and value not in option.choices):
        return None
    if option.kind == APPEND:
        values[option.dest] = [*values[option.dest], value]
    else:
        values[option.dest] = value
    return after
