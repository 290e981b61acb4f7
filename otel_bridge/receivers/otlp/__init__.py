"""The ``otlp`` receiver: OTLP over gRPC (default ``127.0.0.1:4317``) and HTTP (``:4318``).

See :mod:`otel_bridge.receivers.otlp.config` for the configuration and
:mod:`otel_bridge.receivers.otlp.receiver` for the response rules.
"""

from __future__ import annotations

from otel_bridge.component import (
    RECEIVER,
    Component,
    Consumer,
    CreateSettings,
    Factory,
    require_consumer,
)
from otel_bridge.receivers.otlp.config import OtlpReceiverConfig, default_config
from otel_bridge.receivers.otlp.receiver import COUNTERS, OtlpReceiver

__all__ = ["OtlpReceiver", "OtlpReceiverConfig", "factory"]


def _create(
    settings: CreateSettings, config: OtlpReceiverConfig, next_consumer: Consumer | None
) -> Component:
    return OtlpReceiver(settings, config, require_consumer(next_consumer, "otlp"))


factory: Factory[OtlpReceiverConfig] = Factory(
    type_name="otlp",
    kind=RECEIVER,
    default_config=default_config,
    create=_create,
    counters=COUNTERS,
)
"""Factory of the ``otlp`` receiver."""
