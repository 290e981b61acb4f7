"""The registry of component factories, one table per kind.

A component module exposes a module-level ``factory`` (or ``factories``, a sequence). Modules are
found through the ``otel_bridge.components`` entry-point group, so a third-party package adds a
receiver, processor or exporter by declaring, in its own ``pyproject.toml``::

    [project.entry-points."otel_bridge.components"]
    "processors.mine" = "my_package.my_processor"

The components that ship with otel-bridge are also listed in :data:`BUILTIN_MODULES`, so a source
tree that was never installed (no package metadata) still has them. Loading has no import-time
registration side effects: nothing is registered until :func:`default_registry` runs.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from otel_bridge.component import EXPORTER, PROCESSOR, RECEIVER, Factory

ENTRY_POINT_GROUP = "otel_bridge.components"
"""The entry-point group that names component modules."""

BUILTIN_MODULES: tuple[str, ...] = (
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
    "otel_bridge.exporters.debug",
    "otel_bridge.exporters.postgres",
)

_log = logging.getLogger("otel_bridge.registry")


@dataclass(slots=True)
class Registry:
    """Factories by kind and type name."""

    receivers: dict[str, Factory[Any]] = field(default_factory=dict)
    processors: dict[str, Factory[Any]] = field(default_factory=dict)
    exporters: dict[str, Factory[Any]] = field(default_factory=dict)
    origins: dict[tuple[str, str], str] = field(default_factory=dict)
    """``(kind, type name) -> module`` that provided the factory."""
    problems: list[str] = field(default_factory=list)
    """Component modules that could not be loaded, one line each (shown by ``components``)."""

    def add(self, factory: Factory[Any], origin: str = "") -> None:
        """Register ``factory`` under its kind and type name; duplicates are refused."""
        table = self.table(factory.kind)
        if factory.type_name in table:
            raise ValueError(
                f"duplicate {factory.kind} type {factory.type_name!r} "
                f"(from {origin or '?'}; already from "
                f"{self.origins.get((factory.kind, factory.type_name), '?')})"
            )
        table[factory.type_name] = factory
        self.origins[(factory.kind, factory.type_name)] = origin

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


def factories_of(module: object) -> tuple[Factory[Any], ...]:
    """The factories a component module exposes (``factories`` or ``factory``)."""
    found = getattr(module, "factories", None)
    if found is None:
        single = getattr(module, "factory", None)
        if single is None:
            raise TypeError(f"{getattr(module, '__name__', module)}: no `factory` or `factories`")
        found = (single,)
    out = tuple(found)
    for f in out:
        if not isinstance(f, Factory):
            raise TypeError(f"{getattr(module, '__name__', module)}: {f!r} is not a Factory")
    return out


def component_modules() -> list[str]:
    """Module names to load: the built-in ones, then each entry point of the group."""
    names = list(BUILTIN_MODULES)
    seen = set(names)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.value not in seen:
            seen.add(ep.value)
            names.append(ep.value)
    return names


def build_registry(modules: Iterable[str]) -> Registry:
    """A registry of the factories in ``modules``.

    A built-in module that fails to import is a bug and raises. A third-party module that fails
    is recorded in :attr:`Registry.problems` and logged, so one broken plug-in does not stop the
    collector; a configuration naming its type is then refused as an unknown type.
    """
    registry = Registry()
    for name in modules:
        try:
            module = importlib.import_module(name)
            found = factories_of(module)
            for factory in found:
                registry.add(factory, origin=name)
        except Exception as exc:
            if name in BUILTIN_MODULES:
                raise
            problem = f"component module {name!r} could not be loaded: {exc}"
            registry.problems.append(problem)
            _log.warning("%s", problem)
    return registry


def default_registry() -> Registry:
    """A registry of every component installed: built-in and third-party (entry points)."""
    return build_registry(component_modules())
