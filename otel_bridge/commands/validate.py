"""``otel-bridge validate FILE`` (or ``--config FILE``): check a configuration, start nothing."""

from __future__ import annotations

import argparse
import sys

from otel_bridge.config import load_config
from otel_bridge.errors import ComponentError, ConfigError, OtelBridgeError
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
    parser.add_argument("file", metavar="FILE", nargs="?", help="the YAML configuration to check")
    parser.add_argument(
        "-c", "--config", metavar="FILE", help="the configuration to check (same as FILE)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Validate ``args.file``; raise ConfigError (exit 2 via the CLI) on problems."""
    if args.file and args.config and args.file != args.config:
        raise OtelBridgeError("validate: give FILE or --config FILE, not two different files")
    path = args.file or args.config
    if not path:
        raise OtelBridgeError("validate: no configuration given (otel-bridge validate FILE)")
    config = load_config(path)
    try:
        collector = Collector(config)
    except ComponentError as exc:
        raise ConfigError([str(exc)]) from exc
    collector.shutdown()
    components = sum(
        len(table) for table in (config.receivers, config.processors, config.exporters)
    )
    print(f"{path}: OK ({len(config.pipelines)} pipelines, {components} components)")
    for line in config.summary():
        print(f"  {line}")
    for warning in config.warnings:
        print(f"  warning: {warning}", file=sys.stderr)
    return 0
