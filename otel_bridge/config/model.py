"""The parsed, validated shape of a collector configuration."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_bridge.component import Factory

PIPELINE_TYPES: tuple[str, ...] = ("traces", "logs", "evidence")
"""Pipeline types: ``traces`` carries spans, ``logs`` log records, ``evidence`` everything."""

_TYPE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True, order=True)
class ComponentId:
    """A component id as written in a config: ``type`` or ``type/name``."""

    type: str
    name: str = ""

    @classmethod
    def parse(cls, text: str) -> ComponentId:
        """Parse ``type[/name]``; ValueError says what is wrong."""
        kind, sep, name = text.partition("/")
        if not _TYPE.match(kind):
            raise ValueError(
                f"invalid id {text!r}: the type must start with a letter and hold only "
                "letters, digits and _"
            )
        if sep and (not name or any(c.isspace() for c in name) or "/" in name):
            raise ValueError(f"invalid id {text!r}: the name after / must be non-empty, no spaces")
        return cls(kind, name)

    def __str__(self) -> str:
        return f"{self.type}/{self.name}" if self.name else self.type


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentConfig:
    """One configured component: its id, kind, factory and typed, validated config."""

    id: ComponentId
    kind: str
    factory: Factory[Any]
    config: Any


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineConfig:
    """One ``service.pipelines`` entry: component ids in order."""

    id: ComponentId
    """``type[/name]`` with ``type`` one of :data:`PIPELINE_TYPES`."""
    receivers: tuple[str, ...]
    processors: tuple[str, ...] = ()
    exporters: tuple[str, ...]

    @property
    def type(self) -> str:
        """The pipeline type: ``traces``, ``logs`` or ``evidence``."""
        return self.id.type


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectorConfig:
    """A whole validated configuration. Component maps are keyed by the id string."""

    receivers: Mapping[str, ComponentConfig] = field(default_factory=dict)
    processors: Mapping[str, ComponentConfig] = field(default_factory=dict)
    exporters: Mapping[str, ComponentConfig] = field(default_factory=dict)
    extensions: Mapping[str, Any] = field(default_factory=dict)
    pipelines: Mapping[str, PipelineConfig] = field(default_factory=dict)
    log_level: str | None = None
    """``service.telemetry.logs.level`` when given."""
    origin: str = "<dict>"
    """Where the configuration came from (a path, or ``<dict>``)."""
    warnings: tuple[str, ...] = ()
    """Things that are allowed but probably unintended (a component no pipeline uses)."""

    def summary(self) -> list[str]:
        """Human-readable lines: one per pipeline, listing its components."""
        lines = []
        for name, p in sorted(self.pipelines.items()):
            parts = [f"receivers: {', '.join(p.receivers)}"]
            if p.processors:
                parts.append(f"processors: {', '.join(p.processors)}")
            parts.append(f"exporters: {', '.join(p.exporters)}")
            lines.append(f"{name}: " + "; ".join(parts))
        return lines


@dataclass(frozen=True, slots=True, kw_only=True)
class ComponentAddition:
    """One component a :class:`ConfigOverlay` adds to a configuration, or adjusts in it.

    The component's settings become ``{**defaults, **<the file's settings>, **settings}``:
    ``settings`` win over the file, the file wins over ``defaults``.
    """

    section: str
    """``receivers``, ``processors`` or ``exporters``."""
    id: str
    """The component id, ``type`` or ``type/name``."""
    settings: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineAddition:
    """One pipeline a :class:`ConfigOverlay` adds (replacing one of the same id)."""

    id: str
    receivers: tuple[str, ...]
    processors: tuple[str, ...] = ()
    exporters: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigOverlay:
    """Typed additions applied by the loader on top of a configuration file (or of nothing).

    ``observe`` adds its run wiring this way, so ``observe -c FILE`` reads FILE with the same
    loader and checks as ``validate`` and the result is validated as one configuration.
    """

    components: tuple[ComponentAddition, ...] = ()
    pipelines: tuple[PipelineAddition, ...] = ()

    def apply(self, mapping: Mapping[str, Any] | None) -> dict[str, Any]:
        """A new configuration mapping: ``mapping`` (not modified) with the additions."""
        out: dict[str, Any] = dict(mapping or {})
        for add in self.components:
            section = _section_copy(out, add.section)
            current = section.get(add.id)
            existing = dict(current) if isinstance(current, Mapping) else {}
            section[add.id] = {**add.defaults, **existing, **add.settings}
        if self.pipelines:
            service = out["service"] = dict(_as_mapping(out.get("service")))
            pipelines = service["pipelines"] = dict(_as_mapping(service.get("pipelines")))
            for p in self.pipelines:
                body: dict[str, Any] = {"receivers": list(p.receivers)}
                if p.processors:
                    body["processors"] = list(p.processors)
                body["exporters"] = list(p.exporters)
                pipelines[p.id] = body
        return out


def _as_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _section_copy(out: dict[str, Any], section: str) -> dict[str, Any]:
    copied = dict(_as_mapping(out.get(section)))
    out[section] = copied
    return copied


def component_ids(mapping: Mapping[str, Any] | None, section: str, type_name: str) -> list[str]:
    """The ids configured in ``section`` of a raw mapping whose type is ``type_name``, in order."""
    raw = _as_mapping((mapping or {}).get(section))
    found = []
    for key in raw:
        try:
            cid = ComponentId.parse(str(key))
        except ValueError:
            continue
        if cid.type == type_name:
            found.append(str(key))
    return found
