"""``otel-bridge components``: list every component type this installation can run.

As the OpenTelemetry Collector's ``components`` command: each registered receiver, processor and
exporter type with the module that provides it (``built-in``, or the entry point's module), its
pipeline types and declared counters, then any plug-in module of the ``otel_bridge.components``
entry-point group that failed to load.
"""

from __future__ import annotations

import argparse
import sys

from otel_bridge.component import EXPORTER, PROCESSOR, RECEIVER
from otel_bridge.registry import BUILTIN_MODULES, ENTRY_POINT_GROUP, Registry, default_registry

_SECTIONS = ((RECEIVER, "receivers"), (PROCESSOR, "processors"), (EXPORTER, "exporters"))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``components`` command."""
    parser = subparsers.add_parser(
        "components",
        help="list every receiver, processor and exporter type available",
        description=(
            "List every registered receiver, processor and exporter type with the module that "
            f"provides it (built-in, or a plug-in of the {ENTRY_POINT_GROUP!r} entry-point "
            "group), and every plug-in module that failed to load. Exits 1 if one failed."
        ),
    )
    parser.add_argument(
        "--counters", action="store_true", help="also list each type's declared counters"
    )
    parser.set_defaults(func=run)


def lines(registry: Registry, *, counters: bool = False) -> list[str]:
    """The listing, one line per type (plus one per counter with ``counters``)."""
    out: list[str] = []
    for kind, section in _SECTIONS:
        out.append(f"{section}:")
        table = registry.table(kind)
        for name, factory in sorted(table.items()):
            module = registry.origins.get((kind, name), "")
            origin = "built-in" if module in BUILTIN_MODULES else f"entry point {module}"
            signals = ", ".join(sorted(factory.signals))
            out.append(f"  {name:16} {origin}  [{signals}]")
            if counters:
                for spec in factory.counters:
                    family = " (by label)" if spec.labeled else ""
                    out.append(
                        f"      {kind}.{name}.{spec.name} {spec.unit}{family}: {spec.description}"
                    )
    if registry.problems:
        out.append("problems:")
        out.extend(f"  {problem}" for problem in registry.problems)
    return out


def run(args: argparse.Namespace) -> int:
    """Print the listing; 1 when a plug-in module failed to load."""
    registry = default_registry()
    for line in lines(registry, counters=bool(args.counters)):
        print(line)
    if registry.problems:
        print(
            f"otel-bridge: {len(registry.problems)} component module(s) failed to load",
            file=sys.stderr,
        )
        return 1
    return 0
