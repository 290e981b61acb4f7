"""The ``otlp`` (gRPC) and ``otlphttp`` exporters: spans and log records to any OTLP endpoint.

The type names are the OpenTelemetry Collector's. ``otlp_grpc`` and ``otlp_http``, the names of
earlier releases, are aliases: the same factory configuration and the same component.

See :mod:`otel_bridge.exporters.otlp.config` for the configuration and
:mod:`otel_bridge.exporters.otlp.exporter` for queueing, retries and counters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from otel_bridge.component import EXPORTER, Component, Consumer, CreateSettings, Factory, Telemetry
from otel_bridge.exporters.otlp.config import GrpcExporterConfig, HttpExporterConfig
from otel_bridge.exporters.otlp.exporter import COUNTERS, OtlpExporter
from otel_bridge.exporters.otlp.transport import GrpcTransport, HttpTransport
from otel_bridge.rundir import QUEUE_DIR

if TYPE_CHECKING:
    from otel_bridge.exporters.otlp.relay import ForwardRelay

__all__ = [
    "ALIASES",
    "OtlpExporter",
    "factories",
    "grpc_alias_factory",
    "grpc_factory",
    "http_alias_factory",
    "http_factory",
]


def _create_grpc(
    settings: CreateSettings, config: GrpcExporterConfig, next_consumer: Consumer | None
) -> Component:
    return OtlpExporter(settings, config, lambda: GrpcTransport(config), "proto")


def _create_http(
    settings: CreateSettings, config: HttpExporterConfig, next_consumer: Consumer | None
) -> Component:
    return OtlpExporter(settings, config, lambda: HttpTransport(config), config.encoding)


def _relay(env: Mapping[str, str], telemetry: Telemetry) -> ForwardRelay | None:
    from otel_bridge.exporters.otlp.relay import relay_from_env  # noqa: PLC0415

    return relay_from_env(env, telemetry)


def durable_state(
    settings: Mapping[str, Any], place: Callable[[str], str], name: str
) -> dict[str, Any]:
    """The persistent queue (``sending_queue.storage``) set in ``settings``, placed in the run
    directory's ``queue/`` (each exporter in its own subdirectory there;
    ``Factory.durable_state``)."""
    queue = settings.get("sending_queue")
    if isinstance(queue, Mapping) and queue.get("storage"):
        return {"sending_queue": {**queue, "storage": place(QUEUE_DIR)}}
    return {}


grpc_factory: Factory[GrpcExporterConfig] = Factory(
    type_name="otlp",
    kind=EXPORTER,
    default_config=GrpcExporterConfig,
    create=_create_grpc,
    counters=COUNTERS,
    relay=_relay,
    durable_state=durable_state,
)
"""Factory of the ``otlp`` (OTLP/gRPC) exporter."""

http_factory: Factory[HttpExporterConfig] = Factory(
    type_name="otlphttp",
    kind=EXPORTER,
    default_config=HttpExporterConfig,
    create=_create_http,
    counters=COUNTERS,
    relay=_relay,
    durable_state=durable_state,
)
"""Factory of the ``otlphttp`` exporter."""

grpc_alias_factory: Factory[GrpcExporterConfig] = dataclasses.replace(
    grpc_factory, type_name="otlp_grpc"
)
"""``otlp_grpc``: an alias of ``otlp`` kept for configurations written for earlier releases."""

http_alias_factory: Factory[HttpExporterConfig] = dataclasses.replace(
    http_factory, type_name="otlp_http"
)
"""``otlp_http``: an alias of ``otlphttp`` kept for configurations written for earlier releases."""

ALIASES: dict[str, str] = {"otlp_grpc": "otlp", "otlp_http": "otlphttp"}
"""Alias type name -> the Collector's type name."""

factories = (grpc_factory, http_factory, grpc_alias_factory, http_alias_factory)
"""The OTLP exporter factories (the Collector's names and the aliases), for the registry."""
