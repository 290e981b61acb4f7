"""Spans for the store's cross-host trace join tests, and a gateway's pipeline without its
receiver: the agent side is the real ``normalize`` and the evidence wire encoding (what an agent
on a host ships over OTLP); the gateway side is the real ``logs_to_evidence`` and ``crosshost``
processors in front of a real ``postgres`` exporter.
"""

from __future__ import annotations

from otel_bridge.component import Host, Telemetry
from otel_bridge.exporters.postgres import Config, PostgresExporter
from otel_bridge.model import Batch, Observation, Resource, Scope, Span, SpanKind
from otel_bridge.processors import normalize
from otel_bridge.processors.crosshost import (
    CrossHost,
    CrossHostConfig,
    LogsToEvidence,
    LogsToEvidenceConfig,
    wire,
)
from otel_bridge.testing import RecordingConsumer

T0 = 1_800_000_000_000_000_000
S = 1_000_000_000
TRACE = bytes(range(16))


def span(service: str, sid: int, parent: int, name: str, *, trace: bytes = TRACE) -> Span:
    """A span of ``trace`` whose W3C context names ``parent`` (0: a root span)."""
    return Span(
        resource=Resource(attributes={"service.name": service}),
        scope=Scope(name="app"),
        trace_id=trace,
        span_id=sid.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        name=name,
        kind=SpanKind.SERVER if parent else SpanKind.CLIENT,
        start_time_unix_nano=T0 + sid * S // 10,
        end_time_unix_nano=T0 + S,
    )


def agent_ships(host: str, *spans: Span) -> Batch:
    """What the agent on ``host`` ships for ``spans``: the spans, and their observations as
    evidence log records."""
    out = normalize.Normalizer()(Batch(spans=spans))
    resource = wire.evidence_resource(host, f"instance-of-{host}")
    records = wire.encode(resource, out.observations, out.coverage, 2048)
    return Batch(spans=spans, logs=tuple(records))


def received(host: str, *spans: Span) -> Batch:
    """What a gateway's exporter receives for what the agent on ``host`` ships (its
    ``logs_to_evidence`` decoded it, each observation stamped with ``host``)."""
    recorder = RecordingConsumer()
    decode = LogsToEvidence(LogsToEvidenceConfig(), recorder, Telemetry())
    decode.start(Host())
    decode.consume(agent_ships(host, *spans))
    decode.shutdown()
    (batch,) = recorder.batches
    return batch


def node_observation(batch: Batch, sid: int) -> Observation:
    """The span ``sid``'s own observation (``<span id>#0``) in ``batch``."""
    (obs,) = (o for o in batch.observations if o.id == f"{sid:016x}#0")
    return obs


class Gateway:
    """``logs_to_evidence`` -> ``crosshost`` -> ``postgres``, one run of the database."""

    def __init__(self, url: str, run_id: str, telemetry: Telemetry | None = None) -> None:
        self.telemetry = telemetry or Telemetry()
        self.exporter = PostgresExporter(
            Config(endpoint=url, run_id=run_id, task="fleet", flush_interval=0)
        )
        self.exporter.start(Host(telemetry=self.telemetry))
        self.joins = CrossHost(CrossHostConfig(), self.exporter, self.telemetry)
        self.decode = LogsToEvidence(LogsToEvidenceConfig(), self.joins, self.telemetry)
        self.decode.start(Host(telemetry=self.telemetry))
        self.joins.start(Host(telemetry=self.telemetry))

    def receive(self, batch: Batch) -> None:
        """One OTLP export from an agent."""
        self.decode.consume(batch)

    def stop(self) -> None:
        self.decode.shutdown()
        self.joins.shutdown()
        self.exporter.shutdown()
