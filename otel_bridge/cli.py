"""The ``otel-bridge`` command line.

Each subcommand lives in ``otel_bridge/commands/<name>.py`` and exposes ``register(subparsers)``,
which adds its parser and sets ``func`` to a callable taking the parsed arguments and returning an
exit code. Errors the user can fix are :class:`~otel_bridge.errors.OtelBridgeError`s: they print
as one line (a config error lists each problem) and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from otel_bridge import __version__
from otel_bridge.errors import ConfigError, OtelBridgeError

_COMMANDS: tuple[str, ...] = (
    "otel_bridge.commands.run",
    "otel_bridge.commands.validate",
    "otel_bridge.commands.observe",
    "otel_bridge.commands.graph",
    "otel_bridge.commands.verify",
    "otel_bridge.commands.export",
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="otel-bridge",
        description=(
            "Join agent traces (OpenTelemetry) with independent OS observation into one "
            "evidence-typed execution graph."
        ),
    )
    parser.add_argument("--version", action="version", version=f"otel-bridge {__version__}")
    parser.add_argument(
        "--log-level", default="WARNING", help="logging level (default: %(default)s)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in _COMMANDS:
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script. Returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code: int = args.func(args)
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
    return code


if __name__ == "__main__":
    sys.exit(main())
