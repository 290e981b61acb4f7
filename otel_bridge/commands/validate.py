"""``otel-bridge validate FILE``: check a configuration without starting anything."""

from __future__ import annotations

import argparse
import sys

from otel_bridge.config import load_config
from otel_bridge.errors import ComponentError, ConfigError
from otel_bridge.pipeline import Collector


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``validate`` command."""
    parser = subparsers.add_parser(
        "validate",
        help="check a collector configuration without starting anything",
        description=(
            "Load FILE, substitute ${env:VAR} references, type-check every component's "
            "settings, check the pipelines' references and build (but not start) every "
            "component. Prints a summary and exits 0, or lists every problem and exits 2."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="the YAML configuration to check")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Validate ``args.file``; raise ConfigError (exit 2 via the CLI) on problems."""
    config = load_config(args.file)
    try:
        collector = Collector(config)
    except ComponentError as exc:
        raise ConfigError([str(exc)]) from exc
    collector.shutdown()
    components = sum(
        len(table) for table in (config.receivers, config.processors, config.exporters)
    )
    print(f"{args.file}: OK ({len(config.pipelines)} pipelines, {components} components)")
    for line in config.summary():
        print(f"  {line}")
    for warning in config.warnings:
        print(f"  warning: {warning}", file=sys.stderr)
    return 0
