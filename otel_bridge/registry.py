"""The registry of component factories, one table per kind.

A component module exposes a module-level ``factory`` (or ``factories``, a sequence). Modules are
found through the ``otel_bridge.components`` entry-point group, so a third-party package adds a
receiver, processor or exporter by declaring, in its own ``pyproject.toml``::

    [project.entry-points."otel_bridge.components"]
    "processors.mine" = "my_package.my_processor"

The components that ship with otel-bridge are also listed in :data:`BUILTIN_MODULES`, so a source
tree that was never installed (no package metadata) still has them. Loading has no import-time
registration side effects: nothing is registered until :func:`default_registry` runs.

**Lazy loading.** Importing every component module (gRPC, protobuf, every host backend) costs
more than a third of a second, and a configuration names only a few types. So
:func:`default_registry` imports nothing: it knows the type names of the built-in modules from
:data:`BUILTIN_TYPES` and imports a module the first time :meth:`Registry.get` asks for one of its
types. Entry points are read (and their modules imported) only when a type is asked for that no
built-in module provides, or when the whole table is listed (:meth:`Registry.table`, the
``components`` command). ``tests/pipeline/test_registry_lazy.py`` checks that
:data:`BUILTIN_TYPES` matches what the modules really register.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable
from typing import Any

from otel_bridge.component import EXPORTER, PROCESSOR, RECEIVER, Factory

ENTRY_POINT_GROUP = "otel_bridge.components"
"""The entry-point group that names component modules."""

BUILTIN_TYPES: dict[tuple[str, str], str] = {
    (RECEIVER, "otlp"): "otel_bridge.receivers.otlp",
    (RECEIVER, "host"): "otel_bridge.receivers.host",
    (PROCESSOR, "normalize"): "otel_bridge.processors.normalize",
    (PROCESSOR, "redact"): "otel_bridge.processors.redact",
    (PROCESSOR, "correlate"): "otel_bridge.processors.correlate",
    (PROCESSOR, "grade"): "otel_bridge.processors.grade",
    (PROCESSOR, "enrich"): "otel_bridge.processors.enrich",
    (PROCESSOR, "evidence_to_logs"): "otel_bridge.processors.crosshost",
    (PROCESSOR, "logs_to_evidence"): "otel_bridge.processors.crosshost",
    (PROCESSOR, "crosshost"): "otel_bridge.processors.crosshost",
    (PROCESSOR, "memory_limiter"): "otel_bridge.processors.memory_limiter",
    (PROCESSOR, "batch"): "otel_bridge.processors.batch",
    (EXPORTER, "graph"): "otel_bridge.exporters.graph",
    (EXPORTER, "otlp"): "otel_bridge.exporters.otlp",
    (EXPORTER, "otlp_grpc"): "otel_bridge.exporters.otlp",
    (EXPORTER, "otlphttp"): "otel_bridge.exporters.otlp",
    (EXPORTER, "otlp_http"): "otel_bridge.exporters.otlp",
    (EXPORTER, "file"): "otel_bridge.exporters.file",
    (EXPORTER, "postgres"): "otel_bridge.exporters.postgres",
    (EXPORTER, "debug"): "otel_bridge.exporters.debug",
}
"""``(kind, type name) -> built-in module`` providing it: what :func:`default_registry` knows
without importing anything."""

BUILTIN_MODULES: tuple[str, ...] = tuple(dict.fromkeys(BUILTIN_TYPES.values()))
"""The built-in component modules, in registration order."""

_log = logging.getLogger("otel_bridge.registry")


class Registry:
    """Factories by kind and type name, imported on first use (see the module docstring).

    ``receivers``, ``processors`` and ``exporters`` are the complete tables (reading one imports
    every module not imported yet); :meth:`get` and :meth:`names` import only what they need.
    """

    def __init__(
        self, pending: dict[tuple[str, str], str] | None = None, *, discover: bool = False
    ) -> None:
        self._tables: dict[str, dict[str, Factory[Any]]] = {
            RECEIVER: {},
            PROCESSOR: {},
            EXPORTER: {},
        }
        self.origins: dict[tuple[str, str], str] = {}
        """``(kind, type name) -> module`` that provided the factory."""
        self.problems: list[str] = []
        """Component modules that could not be loaded, one line each (shown by ``components``)."""
        self.pending: dict[tuple[str, str], str] = dict(pending or {})
        """``(kind, type name) -> module`` known but not imported yet."""
        self.discover = discover
        """True while the entry-point group has not been read (third-party modules not loaded)."""

    @property
    def receivers(self) -> dict[str, Factory[Any]]:
        """Every receiver factory (imports every module not imported yet)."""
        return self.table(RECEIVER)

    @property
    def processors(self) -> dict[str, Factory[Any]]:
        """Every processor factory (imports every module not imported yet)."""
        return self.table(PROCESSOR)

    @property
    def exporters(self) -> dict[str, Factory[Any]]:
        """Every exporter factory (imports every module not imported yet)."""
        return self.table(EXPORTER)

    def add(self, factory: Factory[Any], origin: str = "") -> None:
        """Register ``factory`` under its kind and type name; duplicates are refused."""
        table = self._table(factory.kind)
        key = (factory.kind, factory.type_name)
        owner = self.pending.get(key)
        if factory.type_name in table or (owner is not None and owner != origin):
            raise ValueError(
                f"duplicate {factory.kind} type {factory.type_name!r} "
                f"(from {origin or '?'}; already from "
                f"{self.origins.get(key, owner or '?')})"
            )
        table[factory.type_name] = factory
        self.origins[key] = origin
        self.pending.pop(key, None)

    def get(self, kind: str, type_name: str) -> Factory[Any] | None:
        """The factory of ``type_name``, importing its module if needed; None if unknown."""
        table = self._table(kind)
        found = table.get(type_name)
        if found is not None:
            return found
        module = self.pending.get((kind, type_name))
        if module is not None:
            self.load_module(module)
        elif self.discover:
            self._discover()
        return table.get(type_name)

    def names(self, kind: str) -> list[str]:
        """Every type name of ``kind`` (third-party ones included), importing no built-in."""
        if self.discover:
            self._discover()
        pending = (name for (k, name) in self.pending if k == kind)
        return sorted({*self._table(kind), *pending})

    def table(self, kind: str) -> dict[str, Factory[Any]]:
        """The complete table of one kind (imports every module not imported yet)."""
        self.load_all()
        return self._table(kind)

    def load_all(self) -> None:
        """Import every known module and read the entry points."""
        for module in dict.fromkeys(self.pending.values()):
            self.load_module(module)
        if self.discover:
            self._discover()

    def all(self) -> list[Factory[Any]]:
        """Every registered factory, receivers then processors then exporters, by name."""
        self.load_all()
        return [f for table in self._tables.values() for _, f in sorted(table.items())]

    def _table(self, kind: str) -> dict[str, Factory[Any]]:
        return self._tables[kind]

    def load_module(self, name: str) -> None:
        """Import module ``name`` and register its factories (see :func:`build_registry`)."""
        try:
            module = importlib.import_module(name)
            for factory in factories_of(module):
                self.add(factory, origin=name)
        except Exception as exc:
            if name in BUILTIN_MODULES:
                raise
            problem = f"component module {name!r} could not be loaded: {exc}"
            self.problems.append(problem)
            _log.warning("%s", problem)
        finally:
            for key in [k for k, m in self.pending.items() if m == name]:
                del self.pending[key]

    def _discover(self) -> None:
        self.discover = False
        loaded = set(BUILTIN_MODULES) | set(self.origins.values())
        for name in component_modules():
            if name not in loaded:
                self.load_module(name)


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
    from importlib.metadata import entry_points  # noqa: PLC0415 (30-80 ms; only to discover)

    names = list(BUILTIN_MODULES)
    seen = set(names)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.value not in seen:
            seen.add(ep.value)
            names.append(ep.value)
    return names


def build_registry(modules: Iterable[str]) -> Registry:
    """A registry of the factories in ``modules``, every one imported now.

    A built-in module that fails to import is a bug and raises. A third-party module that fails
    is recorded in :attr:`Registry.problems` and logged, so one broken plug-in does not stop the
    collector; a configuration naming its type is then refused as an unknown type.
    """
    registry = Registry()
    for name in modules:
        registry.load_module(name)
    return registry


def default_registry() -> Registry:
    """A registry of every component installed, built-in and third-party (entry points),
    importing each module only when one of its types is first asked for."""
    return Registry(BUILTIN_TYPES, discover=True)
