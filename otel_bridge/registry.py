"""The registry of component factories, one table per kind.

Component modules expose a module-level ``factory``. They are listed here explicitly (no import-time
registration side effects): adding a component means adding its module path to ``_MODULES``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from otel_bridge.component import EXPORTER, PROCESSOR, RECEIVER, Factory

_MODULES: tuple[str, ...] = (
    "otel_bridge.receivers.otlp",
    "otel_bridge.receivers.host",
    "otel_bridge.processors.normalize",
    "otel_bridge.processors.redact",
    "otel_bridge.processors.correlate",
    "otel_bridge.processors.grade",
    "otel_bridge.processors.enrich",
    "otel_bridge.processors.memory_limiter",
    "otel_bridge.processors.batch",
    "otel_bridge.exporters.graph",
    "otel_bridge.exporters.otlp",
    "otel_bridge.exporters.file",
)


@dataclass(slots=True)
class Registry:
    """Factories by kind and type name."""

    receivers: dict[str, Factory[Any]] = field(default_factory=dict)
    processors: dict[str, Factory[Any]] = field(default_factory=dict)
    exporters: dict[str, Factory[Any]] = field(default_factory=dict)

    def add(self, factory: Factory[Any]) -> None:
        """Register ``factory`` under its kind and type name; duplicates are a bug."""
        table = self.table(factory.kind)
        if factory.type_name in table:
            raise ValueError(f"duplicate {factory.kind} type {factory.type_name!r}")
        table[factory.type_name] = factory

    def table(self, kind: str) -> dict[str, Factory[Any]]:
        """The table of one kind."""
        tables = {RECEIVER: self.receivers, PROCESSOR: self.processors, EXPORTER: self.exporters}
        return tables[kind]

    def all(self) -> list[Factory[Any]]:
        """Every registered factory, receivers then processors then exporters, by name."""
        return [
            f
            for table in (self.receivers, self.processors, self.exporters)
            for _, f in sorted(table.items())
        ]


def default_registry() -> Registry:
    """A registry of every component that ships with otel-bridge."""
    registry = Registry()
    for module_name in _MODULES:
        module = importlib.import_module(module_name)
        factories = getattr(module, "factories", None)
        if factories is None:
            factories = (module.factory,)
        for factory in factories:
            registry.add(factory)
    return registry
