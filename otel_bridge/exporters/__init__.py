"""Exporters: components that write batches out (installed as otel_bridge.exporters)."""

from __future__ import annotations

import logging

from otel_bridge.component import Telemetry


def count(telemetry: Telemetry | None, name: str, n: int = 1) -> None:
    """Add ``n`` to counter ``name`` when the exporter has telemetry (started) and ``n`` > 0."""
    if telemetry is not None and n:
        telemetry.count(name, n)


def warn(
    telemetry: Telemetry | None, log: logging.Logger, component_id: str, key: str, message: str
) -> None:
    """Report ``message`` once per ``key`` for exporter ``component_id``; before the exporter
    has telemetry, to its logger."""
    if telemetry is not None:
        telemetry.report_once(f"exporter.{component_id}.{key}", f"{component_id}: {message}")
    else:
        log.warning("%s: %s", component_id, message)
