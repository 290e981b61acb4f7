"""Collector configuration: the OpenTelemetry Collector's shape, typed and validated up front.

A configuration has top-level ``receivers:``, ``processors:``, ``exporters:`` and ``extensions:``
maps of component id (``type`` or ``type/name``) to that component's settings, and
``service.pipelines.<type>[/<name>]`` listing component ids. Pipeline types are ``traces``,
``logs`` and ``evidence``. Loading goes:

1. YAML (duplicate keys rejected), then ``${env:VAR}`` substitution (:mod:`.env`);
2. per component: factory lookup (an unknown type lists the valid ones), ``default_config()``,
   typed overlay of the YAML (:mod:`.overlay`, unknown keys rejected with a suggestion), then
   the config's own ``validate()``;
3. cross-references: every pipeline names configured components of a kind that supports the
   pipeline type, and has at least one receiver and one exporter.

Every problem is collected and raised at once in one :class:`~otel_bridge.errors.ConfigError`,
each line starting with its full key path (``receivers.otlp.protocols.grpc.endpoint: ...``).
Configured components no pipeline uses are allowed and listed in ``CollectorConfig.warnings``.
``--set KEY=VALUE`` overrides (:func:`.apply_overrides`) are applied before validation.

Reading is bounded (:mod:`.loader`): size, nesting depth and alias expansion are limited, text
must be UTF-8 (or UTF-16/32 with a BOM), and any value its YAML tag cannot hold is an error at
its key path, so no input ends in a traceback.
"""

from otel_bridge.config.env import substitute
from otel_bridge.config.loader import (
    OVERRIDES,
    apply_overrides,
    load_config,
    load_yaml,
    parse_config,
    parse_override,
    read_config,
)
from otel_bridge.config.model import (
    PIPELINE_TYPES,
    CollectorConfig,
    ComponentAddition,
    ComponentConfig,
    ComponentId,
    ConfigOverlay,
    PipelineAddition,
    PipelineConfig,
    component_ids,
)
from otel_bridge.config.overlay import overlay, parse_duration

__all__ = [
    "OVERRIDES",
    "PIPELINE_TYPES",
    "CollectorConfig",
    "ComponentAddition",
    "ComponentConfig",
    "ComponentId",
    "ConfigOverlay",
    "PipelineAddition",
    "PipelineConfig",
    "apply_overrides",
    "component_ids",
    "load_config",
    "load_yaml",
    "overlay",
    "parse_config",
    "parse_duration",
    "parse_override",
    "read_config",
    "substitute",
]
