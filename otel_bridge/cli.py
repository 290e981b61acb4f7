r"""The ``otel-bridge`` command line.

Each subcommand lives in ``otel_bridge/commands/<name>.py`` and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` to a callable taking the parsed arguments and returning an
exit code. Only the module of the command being run is imported: the others get a placeholder
parser carrying their one-line help (:data:`COMMANDS`), so ``otel-bridge --help`` imports no
command's dependencies (gRPC, protobuf, networkx, the YAML loader). ``observe`` goes to the warm
client (:func:`otel_bridge.warm.client_main`) before ``argparse`` is even imported: a warm run
is that client's work only. Errors the user can fix are
:class:`~otel_bridge.errors.OtelBridgeError`\s: they print as one line (a config error lists each
problem) and exit 2.
"""

from __future__ import annotations

import os
import sys

from otel_bridge import __version__
from otel_bridge.errors import ConfigError, OtelBridgeError

TYPE_CHECKING = False  # not ``typing``'s: a warm ``observe`` does not import ``typing``
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("otel_bridge.commands.run", "run the collector until interrupted"),
    "validate": (
        "otel_bridge.commands.validate",
        "check a collector configuration without starting anything",
    ),
    "observe": (
        "otel_bridge.commands.observe",
        "launch and observe one command, write its run directory",
    ),
    "components": (
        "otel_bridge.commands.components",
        "list every receiver, processor and exporter type available",
    ),
    "graph": (
        "otel_bridge.commands.graph",
        "query a graph.json: filter nodes and edges, find bounded paths",
    ),
    "verify": ("otel_bridge.commands.verify", "check a run directory against its manifest"),
    "export": (
        "otel_bridge.commands.export",
        "convert a graph.json to W3C PROV-JSON, GraphML or normalized JSON",
    ),
    "compare": (
        "otel_bridge.commands.compare",
        "compare run directories: coverage, tool impact, provenance, joined graph",
    ),
    "view": (
        "otel_bridge.commands.view",
        "show a run, graph.json, review.json or compare.json in the browser",
    ),
    "review": (
        "otel_bridge.commands.review",
        "review the claims of a run's agent sessions against the observed evidence",
    ),
    "db": ("otel_bridge.commands.db", "the PostgreSQL evidence store: migrate, status, prune"),
}
"""Command name -> (module, one-line help shown by ``otel-bridge --help``)."""

_TOP_OPTIONS_WITH_VALUE = ("--log-level",)
_SET_COMMANDS = ("run", "validate", "observe")
"""Commands that read a collector configuration and so take ``--set KEY=VALUE``."""
_COLLECTOR_COMMANDS = ("run", "observe")
"""The commands whose console process runs a collector: :func:`.gcpause.set_for_collector`."""


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first positional argument), None if none."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--":
            return None
        if arg in _TOP_OPTIONS_WITH_VALUE:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        return arg
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser.

    With ``argv``, only the command it names is imported and fully registered; without, every
    command is (for documentation tools and tests that inspect all parsers).
    """
    import argparse  # noqa: PLC0415 (a warm ``observe`` needs no parser: ``main``)
    import importlib  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="otel-bridge",
        description=(
            "Join agent traces (OpenTelemetry) with independent OS observation into one "
            "evidence-typed execution graph."
        ),
    )
    parser.add_argument("--version", action="version", version=f"otel-bridge {__version__}")
    parser.add_argument(
        "--log-level",
        default=None,
        help="logging level (default: WARNING; `run` takes its configuration's "
        "service.telemetry.logs.level unless this is given)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = chosen_command(argv) if argv is not None else None
    for name, (module_name, help_text) in COMMANDS.items():
        if argv is None or name == chosen:
            importlib.import_module(module_name).register(sub)
            if name in _SET_COMMANDS:
                sub.choices[name].add_argument(
                    "--set",
                    action="append",
                    default=[],
                    metavar="KEY=VALUE",
                    help="override one configuration value after the file, e.g. "
                    "exporters.file.path=./out.jsonl (repeatable; VALUE is YAML)",
                )
        else:
            sub.add_parser(name, help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script. Returns the process exit code.

    ``observe`` goes to the warm client first (:func:`otel_bridge.warm.client_main`), before
    any parser is built or ``argparse`` imported: when a warm server runs the command, that is
    all this process does. Otherwise the command line is parsed as for every command, and a
    cold ``observe`` learns why the warm server did not run it (``args.start_path``)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    start_path = None
    if chosen_command(args_list) == "observe":
        from otel_bridge.warm import client_main  # noqa: PLC0415 (standard library only)

        outcome = client_main(args_list, console=argv is None)
        if isinstance(outcome, int):
            if argv is None:  # the run directory is complete: skip interpreter finalization
                _exit_now(outcome)
            return outcome
        start_path = outcome
    return _parsed_main(args_list, console=argv is None, start_path=start_path)


def _parsed_main(args_list: list[str], *, console: bool, start_path: dict[str, str] | None) -> int:
    """:func:`main` with the command line parsed by ``argparse``."""
    import logging  # noqa: PLC0415

    parser = build_parser(args_list)
    args, unknown = parser.parse_known_args(args_list)
    if unknown:
        _innermost(parser, args, chosen_command(args_list)).error(
            f"unrecognized arguments: {' '.join(unknown)}"
        )
    if start_path is not None:
        args.start_path = start_path
    logging.basicConfig(
        level=getattr(logging, str(args.log_level or "WARNING").upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if console and chosen_command(args_list) in _COLLECTOR_COMMANDS:
        from otel_bridge.gcpause import set_for_collector  # noqa: PLC0415

        set_for_collector()
    try:
        code: int = _call(args)
        sys.stdout.flush()  # inside the try: a reader that left (``| head``) raises here
    except BrokenPipeError:
        return _reader_left()
    except ConfigError as exc:
        print("otel-bridge: invalid configuration:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    except OtelBridgeError as exc:
        print(f"otel-bridge: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if console and getattr(args, "exit_when_done", False):
        _exit_now(code)
    return code


def _innermost(
    parser: argparse.ArgumentParser, args: argparse.Namespace, chosen: object
) -> argparse.ArgumentParser:
    """The parser of the (sub)command chosen (``observe``, ``db status``; ``chosen`` names it
    among ``parser``'s commands): an option it does not know is refused with its usage, not
    the top level's, which argparse would print. (A command's own ``command`` argument, as
    ``observe``'s, shadows the top level's choice in ``args``: the caller names that one.)"""
    import argparse  # noqa: PLC0415 (already imported by ``build_parser``)

    def subcommands(
        p: argparse.ArgumentParser,
    ) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
        return next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)

    sub = subcommands(parser)
    if sub is None or not isinstance(chosen, str) or chosen not in sub.choices:
        return parser
    child = sub.choices[chosen]
    inner = subcommands(child)
    return _innermost(child, args, getattr(args, inner.dest, None) if inner else None)


def _call(args: argparse.Namespace) -> int:
    """Run the command, with its ``--set`` overrides in effect for every configuration read."""
    overrides = tuple(getattr(args, "set", None) or ())
    if not overrides:
        result: int = args.func(args)
        return result
    from otel_bridge.config import OVERRIDES  # noqa: PLC0415 (the YAML loader, only when used)

    token = OVERRIDES.set(overrides)
    try:
        result = args.func(args)
    finally:
        OVERRIDES.reset(token)
    return result


def _exit_now(code: int) -> None:
    """End the process without interpreter finalization (tearing down every imported module and
    the gRPC runtime takes longer than the work of a short command). Only for a command that sets
    ``exit_when_done`` after its own output is complete and closed, and only from the console
    entry point (``argv`` None), never for an in-process caller."""
    if "logging" in sys.modules:  # not imported by a warm ``observe``
        import logging  # noqa: PLC0415

        logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (a warm ``observe`` does without contextlib)
            stream.flush()
        except (BrokenPipeError, ValueError):
            pass
    os._exit(code)


def _reader_left() -> int:
    """The reader of stdout closed the pipe (``otel-bridge graph ... | head``): end quietly, as
    a command killed by SIGPIPE would (exit 141), with no traceback at interpreter exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + 13


if __name__ == "__main__":
    sys.exit(main())
