"""Load a collector configuration: YAML, env substitution, typed overlay, cross-references."""

from __future__ import annotations

import codecs
import os
import re
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any

from otel_bridge.component import EXPORTER, PROCESSOR, RECEIVER
from otel_bridge.config.env import SUBSTITUTED_TEXT, join_path, substitute
from otel_bridge.config.model import (
    PIPELINE_TYPES,
    CollectorConfig,
    ComponentConfig,
    ComponentId,
    ConfigOverlay,
    PipelineConfig,
)
from otel_bridge.config.overlay import overlay, suggest
from otel_bridge.errors import ConfigError
from otel_bridge.registry import Registry, default_registry

_SECTIONS: dict[str, str] = {"receivers": RECEIVER, "processors": PROCESSOR, "exporters": EXPORTER}
_TOP_KEYS = ("receivers", "processors", "exporters", "extensions", "service")
_SERVICE_KEYS = ("pipelines", "telemetry", "extensions")
_PIPELINE_KEYS = ("receivers", "processors", "exporters")
_LOG_LEVELS = ("debug", "info", "warn", "warning", "error", "critical")


MAX_CONFIG_BYTES = 1 << 20
"""The largest configuration accepted (1 MiB; real ones are a few KiB)."""
MAX_NODES = 100_000
"""The most YAML nodes a configuration may expand to, aliases counted at every use."""
MAX_DEPTH = 64
"""The deepest nesting of mappings and lists a configuration may have."""


def load_yaml(text: str, origin: str) -> Any:
    """Parse YAML text; ConfigError with line and column when it is malformed (bounded: see
    :func:`otel_bridge.config.yamltext.load_yaml`; PyYAML is imported at the first call)."""
    from otel_bridge.config import yamltext  # noqa: PLC0415 (a run with no YAML skips PyYAML)

    return yamltext.load_yaml(text, origin)


def decode_text(data: bytes, origin: str) -> str:
    """Configuration bytes as text: UTF-8 (a BOM allowed), or UTF-16/32 with a BOM, as YAML
    allows; ConfigError naming the line and column of the first invalid byte."""
    boms = (
        (codecs.BOM_UTF32_LE, "utf-32"),
        (codecs.BOM_UTF32_BE, "utf-32"),
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    )
    codec = next((name for bom, name in boms if data.startswith(bom)), "utf-8")
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        column = exc.start - (before.rfind(b"\n") + 1) + 1
        name = codec.removesuffix("-sig").upper()
        raise ConfigError(
            [f"{origin}: line {line} column {column}: not valid {name} ({exc.reason})"]
        ) from None


def read_config(path: str | os.PathLike[str]) -> Any:
    """The YAML at ``path``, parsed with duplicate keys rejected (not yet validated).

    Raises :class:`~otel_bridge.errors.ConfigError` when it cannot be read or parsed.
    """
    origin = os.fspath(path)
    try:
        with open(origin, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError([f"{origin}: cannot read: {reason}"]) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError([f"{origin}: larger than {MAX_CONFIG_BYTES} bytes"])
    return load_yaml(decode_text(data, origin), origin)


# --- ``--set KEY=VALUE`` overrides
#
# ``--set key.path=value`` overrides, applied after the configuration file, as the Collector's.
#
# ``KEY`` is a key path through the configuration's mappings, separated by ``.`` or, when a key
# itself holds a dot, by ``::`` (``exporters::file/out::path=./x.jsonl``). ``VALUE`` is read as
# YAML by the same bounded loader as a file (``[otlp, host]`` is a list, ``2s`` a string, ``5`` an
# integer, nothing at all null). Missing mappings along the path are created. The result is
# validated like the file: an override naming an unknown key or a wrong type fails with that key's
# path. :data:`OVERRIDES` carries the command line's overrides to
# :func:`~otel_bridge.config.parse_config`, which applies them to every configuration it reads.

OVERRIDES: ContextVar[tuple[str, ...]] = ContextVar("otel_bridge_config_overrides", default=())
"""The ``--set`` overrides of the running command (set by the command line)."""


def parse_override(text: str) -> tuple[list[str], Any]:
    """``(key path, value)`` of one ``KEY=VALUE``; ConfigError when malformed."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    shown = f"--set {key or text!r}"
    if not sep or not key:
        raise ConfigError([f"{shown}: expected KEY=VALUE (e.g. exporters.file.path=./out.jsonl)"])
    parts = key.split("::") if "::" in key else key.split(".")
    if any(not p for p in parts):
        raise ConfigError([f"{shown}: empty key in the path {key!r}"])
    return parts, load_yaml(raw, shown)


def apply_overrides(mapping: Mapping[str, Any] | None, overrides: Iterable[str]) -> dict[str, Any]:
    """A new mapping: ``mapping`` (not modified) with each override set, in order."""
    out: dict[str, Any] = dict(mapping or {})
    for text in overrides:
        parts, value = parse_override(text)
        current = out
        for i, part in enumerate(parts[:-1]):
            below = current.get(part)
            if below is None:
                below = {}
            elif not isinstance(below, Mapping):
                where = ".".join(parts[: i + 1])
                raise ConfigError([f"--set {'.'.join(parts)}: {where} is not a mapping"])
            current[part] = dict(below)
            current = current[part]
        current[parts[-1]] = value
    return out


def load_config(
    path: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    registry: Registry | None = None,
    overlay: ConfigOverlay | None = None,
) -> CollectorConfig:
    """Read, substitute and validate the YAML configuration at ``path``.

    ``overlay`` adds components and pipelines before validation (see :func:`parse_config`).
    Raises :class:`~otel_bridge.errors.ConfigError` listing every problem.
    """
    return parse_config(
        read_config(path), env=env, registry=registry, origin=os.fspath(path), overlay=overlay
    )


def parse_config(
    mapping: Any,
    *,
    env: Mapping[str, str] | None = None,
    registry: Registry | None = None,
    origin: str = "<dict>",
    overlay: ConfigOverlay | None = None,
    overrides: Iterable[str] | None = None,
) -> CollectorConfig:
    """Validate an already-loaded configuration mapping (as YAML would give it).

    ``env`` defaults to ``os.environ``; ``registry`` to
    :func:`~otel_bridge.registry.default_registry`. ``overlay``, when given, is applied to the
    mapping first (a ``None`` mapping, an empty file, then stands for no file), and the result
    is validated as one configuration. ``overrides`` (``KEY=VALUE`` texts, default: the command
    line's :data:`OVERRIDES`) are applied after it. Raises
    :class:`~otel_bridge.errors.ConfigError` listing every problem with its full key path.
    """
    if overlay is not None and (mapping is None or isinstance(mapping, Mapping)):
        mapping = overlay.apply(mapping)
    sets = OVERRIDES.get() if overrides is None else tuple(overrides)
    if sets and (mapping is None or isinstance(mapping, Mapping)):
        mapping = apply_overrides(mapping, sets)
    if mapping is None:
        raise ConfigError([f"{origin}: the configuration is empty"])
    if not isinstance(mapping, Mapping):
        raise ConfigError([f"{origin}: expected a mapping at the top level"])
    token = SUBSTITUTED_TEXT.set({})
    try:
        return _parse_config(mapping, env=env, registry=registry, origin=origin)
    finally:
        SUBSTITUTED_TEXT.reset(token)


def _without_follow_ons(problems: list[str]) -> list[str]:
    """``problems`` without those a value's unset variable caused: a key whose
    ``${env:NAME}`` was not set keeps its reference text, which its component then judges
    (``no such file '${env:NAME}'``); the unset variable is the one problem to report there."""
    unset = {
        p.split(": ", 1)[0]
        for p in problems
        if re.search(r": environment variable \S+ is not set$", p)
    }
    return [p for p in problems if p.split(": ", 1)[0] not in unset or p.endswith(" is not set")]


def _parse_config(
    mapping: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None,
    registry: Registry | None,
    origin: str,
) -> CollectorConfig:
    problems: list[str] = []
    data = substitute(mapping, os.environ if env is None else env, problems)
    reg = default_registry() if registry is None else registry
    for key in data:
        if key not in _TOP_KEYS:
            problems.append(f"{key}: unknown top-level key{_hint(key, _TOP_KEYS)}")
    components = {
        section: _parse_section(section, kind, data.get(section), reg, problems)
        for section, kind in _SECTIONS.items()
    }
    extensions = _parse_extensions(data.get("extensions"), problems)
    service = data.get("service")
    pipelines: dict[str, PipelineConfig] = {}
    log_level: str | None = None
    if service is None:
        problems.append("service: required (service.pipelines names what runs)")
    elif not isinstance(service, Mapping):
        problems.append("service: expected a mapping")
    else:
        for key in service:
            if key not in _SERVICE_KEYS:
                problems.append(f"service.{key}: unknown key{_hint(key, _SERVICE_KEYS)}")
        _check_service_extensions(service.get("extensions"), extensions, problems)
        log_level = _parse_telemetry(service.get("telemetry"), problems)
        pipelines = _parse_pipelines(service.get("pipelines"), components, problems)
    if problems:
        raise ConfigError(_without_follow_ons(problems))
    return CollectorConfig(
        receivers=components["receivers"],
        processors=components["processors"],
        exporters=components["exporters"],
        extensions=extensions,
        pipelines=pipelines,
        log_level=log_level,
        origin=origin,
        warnings=tuple(_unused(components, pipelines)),
    )


def _hint(key: object, valid: tuple[str, ...]) -> str:
    return suggest(str(key), valid) or f" (valid keys: {', '.join(valid)})"


def _parse_section(
    section: str, kind: str, raw: Any, registry: Registry, problems: list[str]
) -> dict[str, ComponentConfig]:
    out: dict[str, ComponentConfig] = {}
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        problems.append(f"{section}: expected a mapping of component id to config")
        return out
    for key, value in raw.items():
        path = join_path(section, key)
        try:
            cid = ComponentId.parse(str(key))
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
            continue
        factory = registry.get(kind, cid.type)
        if factory is None:
            names = registry.names(kind)
            valid = ", ".join(names) or "none"
            problems.append(
                f"{path}: unknown {kind} type {cid.type!r}{suggest(cid.type, names)} "
                f"(valid types: {valid})"
            )
            continue
        before = len(problems)
        try:
            default = factory.default_config()
        except Exception as exc:
            problems.append(f"{path}: default config of {kind} {cid.type!r} failed: {exc}")
            continue
        config = overlay(default, value, path, problems)
        if len(problems) == before:
            problems.extend(_validate(config, path))
        out[str(cid)] = ComponentConfig(id=cid, kind=kind, factory=factory, config=config)
    return out


def _validate(config: Any, path: str) -> list[str]:
    """Run the config's own ``validate()``, prefixing its relative key paths with ``path``."""
    validate = getattr(config, "validate", None)
    if not callable(validate):
        return []
    try:
        found = validate()
    except Exception as exc:
        return [f"{path}: validation failed: {exc}"]
    out = []
    for problem in found or ():
        text = str(problem)
        head, sep, _ = text.partition(": ")
        relative = sep and head and all(c.isalnum() or c in "._[]/-" for c in head)
        out.append(f"{path}.{text}" if relative else f"{path}: {text}")
    return out


def _parse_extensions(raw: Any, problems: list[str]) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        problems.append("extensions: expected a mapping")
        return {}
    for key in raw:
        problems.append(f"extensions.{key}: unknown extension type (no extensions ship yet)")
    return {}


def _check_service_extensions(raw: Any, extensions: Mapping[str, Any], problems: list[str]) -> None:
    if raw is None:
        return
    if not isinstance(raw, list):
        problems.append("service.extensions: expected a list of extension ids")
        return
    for i, ext in enumerate(raw):
        if ext not in extensions:
            problems.append(f"service.extensions[{i}]: extension {ext!r} is not configured")


def _parse_telemetry(raw: Any, problems: list[str]) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append("service.telemetry: expected a mapping")
        return None
    level: str | None = None
    for key, value in raw.items():
        if key != "logs":
            problems.append(f"service.telemetry.{key}: unknown key (valid keys: logs)")
            continue
        if value is None:
            continue
        if not isinstance(value, Mapping):
            problems.append("service.telemetry.logs: expected a mapping")
            continue
        for lkey, lvalue in value.items():
            if lkey != "level":
                problems.append(f"service.telemetry.logs.{lkey}: unknown key (valid keys: level)")
            elif not isinstance(lvalue, str) or lvalue.lower() not in _LOG_LEVELS:
                problems.append(
                    f"service.telemetry.logs.level: {lvalue!r} is not one of "
                    f"{', '.join(_LOG_LEVELS)}{suggest(str(lvalue), _LOG_LEVELS)}"
                )
            else:
                level = lvalue.lower()
    return level


def _parse_pipelines(
    raw: Any, components: Mapping[str, Mapping[str, ComponentConfig]], problems: list[str]
) -> dict[str, PipelineConfig]:
    if raw is None:
        problems.append("service.pipelines: required (at least one pipeline)")
        return {}
    if not isinstance(raw, Mapping) or not raw:
        problems.append("service.pipelines: expected a non-empty mapping of pipelines")
        return {}
    out: dict[str, PipelineConfig] = {}
    for key, body in raw.items():
        path = f"service.pipelines.{key}"
        try:
            pid = ComponentId.parse(str(key))
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
            continue
        if pid.type == "metrics":
            problems.append(
                f"{path}: metrics pipelines are not supported "
                f"(valid types: {', '.join(PIPELINE_TYPES)})"
            )
            continue
        if pid.type not in PIPELINE_TYPES:
            problems.append(
                f"{path}: unknown pipeline type {pid.type!r}{suggest(pid.type, PIPELINE_TYPES)} "
                f"(valid types: {', '.join(PIPELINE_TYPES)})"
            )
            continue
        if not isinstance(body, Mapping):
            problems.append(f"{path}: expected a mapping with receivers, processors, exporters")
            continue
        for k in body:
            if k not in _PIPELINE_KEYS:
                problems.append(f"{path}.{k}: unknown key{_hint(k, _PIPELINE_KEYS)}")
        lists = {
            section: _pipeline_refs(
                pid,
                section=section,
                raw=body.get(section),
                components=components,
                path=path,
                problems=problems,
            )
            for section in _PIPELINE_KEYS
        }
        for section in ("receivers", "exporters"):
            if body.get(section) is None or (
                isinstance(body.get(section), list) and not body.get(section)
            ):
                problems.append(f"{path}.{section}: a pipeline needs at least one {section[:-1]}")
        out[str(pid)] = PipelineConfig(
            id=pid,
            receivers=lists["receivers"],
            processors=lists["processors"],
            exporters=lists["exporters"],
        )
    return out


def _pipeline_refs(
    pid: ComponentId,
    *,
    section: str,
    raw: Any,
    components: Mapping[str, Mapping[str, ComponentConfig]],
    path: str,
    problems: list[str],
) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"{path}.{section}: expected a list of component ids")
        return ()
    configured = components[section]
    kind = _SECTIONS[section]
    seen: set[str] = set()
    refs: list[str] = []
    for i, ref in enumerate(raw):
        where = f"{path}.{section}[{i}]"
        name = str(ref)
        if not isinstance(ref, str):
            problems.append(f"{where}: expected a component id, got {ref!r}")
            continue
        if name in seen:
            problems.append(f"{where}: {kind} {name!r} is listed twice")
            continue
        seen.add(name)
        component = configured.get(name)
        if component is None:
            hint = suggest(name, configured)
            problems.append(f"{where}: {kind} {name!r} is not configured in {section}{hint}")
            continue
        if pid.type not in component.factory.signals:
            supported = ", ".join(sorted(component.factory.signals))
            problems.append(
                f"{where}: {kind} {name!r} does not support pipeline type {pid.type!r} "
                f"(supports: {supported})"
            )
            continue
        refs.append(name)
    return tuple(refs)


def _unused(
    components: Mapping[str, Mapping[str, ComponentConfig]],
    pipelines: Mapping[str, PipelineConfig],
) -> list[str]:
    used = {
        (section, ref)
        for p in pipelines.values()
        for section in _PIPELINE_KEYS
        for ref in getattr(p, section)
    }
    return [
        f"{section}.{name}: configured but not used in any pipeline"
        for section, table in components.items()
        for name in table
        if (section, name) not in used
    ]
