"""The ``debug`` exporter: what passes through a pipeline, written to stderr, like the Collector's.

.. code-block:: yaml

    exporters:
      debug:
        verbosity: basic     # basic | normal | detailed

* ``basic``: one summary line per batch (how many spans, log records, observations and
  coverage records);
* ``normal``: one line per record (a span's name and ids, a log record's event, an
  observation's subject, relation and object, a coverage record's reason);
* ``detailed``: every record in full, as one JSON object per line (ids as hex).

It writes to stderr only and never to the graph or any other output: adding it to a pipeline
changes nothing downstream. Counter: ``exporter.<id>.batches``.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Literal, TextIO

import msgspec

from otel_bridge.component import (
    EXPORTER,
    Component,
    Consumer,
    CounterSpec,
    CreateSettings,
    Factory,
    Host,
    Telemetry,
)
from otel_bridge.model import Batch, CoverageRecord, LogRecord, Observation, Span

Verbosity = Literal["basic", "normal", "detailed"]

__all__ = ["Config", "DebugExporter", "factory", "record_lines"]


@dataclass(slots=True, kw_only=True)
class Config:
    """Settings of the ``debug`` exporter."""

    verbosity: Verbosity = "basic"


Record = Span | LogRecord | Observation | CoverageRecord


def _hexify(value: object) -> object:
    """``value`` (from ``msgspec.to_builtins``) with bytes as hex strings."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: _hexify(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_hexify(v) for v in value]
    return value


def _summary(record: Record) -> str:
    """The one-line form of a record (``normal`` verbosity)."""
    if isinstance(record, Span):
        service = record.resource.attributes.get("service.name", "")
        return (
            f"span {record.name!r} service={service!r} trace_id={record.trace_id.hex()} "
            f"span_id={record.span_id.hex()} parent={record.parent_span_id.hex() or '-'} "
            f"attributes={len(record.attributes)}"
        )
    if isinstance(record, LogRecord):
        what = record.event_name or (record.body if isinstance(record.body, str) else "")
        return (
            f"log {str(what)[:80]!r} severity={record.severity_text or record.severity_number} "
            f"attributes={len(record.attributes)}"
        )
    if isinstance(record, Observation):
        relation = record.relation.value if record.relation is not None else "-"
        target = record.object.id if record.object is not None else "-"
        return f"observation {record.id} {record.subject.id} {relation} {target}"
    return f"coverage {record.source.channel.value}/{record.source.backend}: {record.reason}"


def record_lines(batch: Batch, verbosity: Verbosity) -> list[str]:
    """The lines the exporter writes for ``batch`` at ``verbosity`` (no trailing newlines)."""
    head = (
        f"batch: {len(batch.spans)} spans, {len(batch.logs)} log records, "
        f"{len(batch.observations)} observations, {len(batch.coverage)} coverage records"
    )
    if verbosity == "basic":
        return [head]
    records: list[Record] = [*batch.spans, *batch.logs, *batch.observations, *batch.coverage]
    if verbosity == "normal":
        return [head, *(_summary(r) for r in records)]
    encoder = msgspec.json.Encoder()
    return [
        head,
        *(
            encoder.encode(
                {
                    "type": type(r).__name__,
                    "record": _hexify(msgspec.to_builtins(r, builtin_types=(bytes,))),
                }
            ).decode()
            for r in records
        ),
    ]


class DebugExporter:
    """Writes what it consumes to a text stream (stderr unless told otherwise)."""

    def __init__(self, settings: CreateSettings, config: Config, stream: TextIO | None = None):
        self._id = settings.id
        self._verbosity = config.verbosity
        self._stream = stream
        self._telemetry: Telemetry = settings.telemetry.owned_by(factory, settings.id)
        self._lock = threading.Lock()

    def start(self, host: Host) -> None:
        """Use the host's telemetry."""
        self._telemetry = host.telemetry.in_scope_of(self._telemetry)

    def consume(self, batch: Batch) -> None:
        """Write the batch's lines; never raises for a stream that went away."""
        if not len(batch):
            return
        text = "".join(f"{self._id}: {line}\n" for line in record_lines(batch, self._verbosity))
        stream = self._stream if self._stream is not None else sys.stderr
        with self._lock:
            try:
                stream.write(text)
                stream.flush()
            except (OSError, ValueError) as exc:  # closed stderr must not fail the pipeline
                self._telemetry.report_once(
                    f"exporter.{self._id}.write_failed", f"{self._id}: cannot write: {exc}"
                )
                return
        self._telemetry.count("batches")

    def shutdown(self) -> None:
        """Nothing to release."""


def _create(settings: CreateSettings, config: Config, next_consumer: Consumer | None) -> Component:
    del next_consumer
    return DebugExporter(settings, config)


factory: Factory[Config] = Factory(
    type_name="debug",
    kind=EXPORTER,
    default_config=Config,
    create=_create,
    counters=(CounterSpec("batches", "batches written to the stream", "{batches}"),),
)
"""The ``debug`` exporter factory."""
