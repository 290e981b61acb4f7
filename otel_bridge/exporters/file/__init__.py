"""The ``file`` exporter: JSON lines, one record per line.

Spans and log records are written as OTLP/JSON (one export request per record), observations
and coverage records with :mod:`otel_bridge.jsonl`; see :mod:`.codec` for the format and a reader.

.. code-block:: yaml

    exporters:
      file/os:
        path: ./run/os.jsonl
        signals: [logs]          # any of spans, logs, observations, coverage
        flush_interval: 1s       # 0 flushes after every batch
"""

from __future__ import annotations

from otel_bridge.component import EXPORTER, Component, Consumer, CreateSettings, Factory

from .codec import decode_line, encode_lines, read_batch, read_lines
from .config import Config
from .exporter import COUNTERS, FileExporter


def _create(settings: CreateSettings, config: Config, next_consumer: Consumer | None) -> Component:
    del next_consumer
    return FileExporter(config, name=settings.id, telemetry=settings.telemetry)


factory: Factory[Config] = Factory(
    type_name="file", kind=EXPORTER, default_config=Config, create=_create, counters=COUNTERS
)
"""The ``file`` exporter factory."""

__all__ = [
    "Config",
    "FileExporter",
    "decode_line",
    "encode_lines",
    "factory",
    "read_batch",
    "read_lines",
]
