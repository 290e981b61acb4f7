"""The ``otlp_grpc`` and ``otlp_http`` exporters: spans and log records to any OTLP endpoint.

See :mod:`otel_bridge.exporters.otlp.config` for the configuration and
:mod:`otel_bridge.exporters.otlp.exporter` for queueing, retries and counters.
"""

from __future__ import annotations

from otel_bridge.component import EXPORTER, Component, Consumer, CreateSettings, Factory
from otel_bridge.exporters.otlp.config import GrpcExporterConfig, HttpExporterConfig
from otel_bridge.exporters.otlp.exporter import COUNTERS, OtlpExporter
from otel_bridge.exporters.otlp.transport import GrpcTransport, HttpTransport

__all__ = ["OtlpExporter", "factories", "grpc_factory", "http_factory"]


def _create_grpc(
    settings: CreateSettings, config: GrpcExporterConfig, next_consumer: Consumer | None
) -> Component:
    return OtlpExporter(settings, config, lambda: GrpcTransport(config), "proto")


def _create_http(
    settings: CreateSettings, config: HttpExporterConfig, next_consumer: Consumer | None
) -> Component:
    return OtlpExporter(settings, config, lambda: HttpTransport(config), config.encoding)


grpc_factory: Factory[GrpcExporterConfig] = Factory(
    type_name="otlp_grpc",
    kind=EXPORTER,
    default_config=GrpcExporterConfig,
    create=_create_grpc,
    counters=COUNTERS,
)
"""Factory of the ``otlp_grpc`` exporter."""

http_factory: Factory[HttpExporterConfig] = Factory(
    type_name="otlp_http",
    kind=EXPORTER,
    default_config=HttpExporterConfig,
    create=_create_http,
    counters=COUNTERS,
)
"""Factory of the ``otlp_http`` exporter."""

factories = (grpc_factory, http_factory)
"""Both OTLP exporter factories, for the registry."""
