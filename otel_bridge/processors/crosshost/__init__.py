"""Fleet processors: agents ship their evidence, a gateway accepts it once and joins hosts.

* ``evidence_to_logs`` (agent, after ``correlate``/``grade``/``enrich``): appends the batch's
  observations and coverage records as evidence log records (:mod:`.wire`) so an OTLP exporter
  carries them to a gateway; everything in the batch passes on unchanged.
* ``logs_to_evidence`` (gateway, first): turns evidence log records back into observations and
  coverage records, **idempotently**: a record the gateway already accepted (an agent's
  persistent queue resending after a crash) is dropped and counted, spans by trace and span id,
  OS log records by host, record id and times. Nothing is normalized or correlated again.
  Each observation gains ``otel_bridge.agent.host.id``, the host of the agent that shipped it.
* ``crosshost`` (gateway, after ``logs_to_evidence``): the cross-host joins of :mod:`.join`.

``docs/deployment.md`` describes the topology and the rules.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from dataclasses import dataclass, field

import msgspec

from otel_bridge.component import (
    PROCESSOR,
    Component,
    Consumer,
    CounterSpec,
    CreateSettings,
    Factory,
    Host,
    Telemetry,
    require_consumer,
)
from otel_bridge.errors import DecodeError
from otel_bridge.identity import host_id
from otel_bridge.model import (
    AnyValue,
    Batch,
    Channel,
    CoverageRecord,
    LogRecord,
    Observation,
    Source,
    Span,
)
from otel_bridge.processors.normalize.oslogs import is_os_record

from . import wire
from .join import CrossHostJoin
from .seen import SeenKeys, digest

__all__ = [
    "CrossHostConfig",
    "DedupeConfig",
    "EvidenceToLogsConfig",
    "LogsToEvidenceConfig",
    "factories",
]

# ---------------------------------------------------------------------------------- agent side


@dataclass(slots=True)
class EvidenceToLogsConfig:
    """Settings of ``evidence_to_logs``."""

    max_records: int = 2048
    """Observations and coverage records per evidence log record."""

    def validate(self) -> list[str]:
        """Problems with the settings."""
        return [] if self.max_records >= 1 else ["max_records: must be at least 1"]


class EvidenceToLogs:
    """The agent-side processor (see the module docstring)."""

    def __init__(self, config: EvidenceToLogsConfig, next_consumer: Consumer) -> None:
        self._config = config
        self._next = next_consumer
        self._resource = wire.evidence_resource(host_id(), uuid.uuid4().hex)

    def start(self, host: Host) -> None:
        """Nothing to acquire."""

    def shutdown(self) -> None:
        """Nothing held."""

    def consume(self, batch: Batch) -> None:
        """Forward ``batch`` with its evidence appended as log records."""
        if batch.observations or batch.coverage:
            records = wire.encode(
                self._resource, batch.observations, batch.coverage, self._config.max_records
            )
            batch = batch.replace(logs=batch.logs + tuple(records))
        self._next.consume(batch)


# ---------------------------------------------------------------------------------- gateway side


@dataclass(slots=True)
class DedupeConfig:
    """What the gateway remembers of what it accepted."""

    window: int = 1_000_000
    """Keys remembered: at least the last ``window // 2`` exactly (about 60 bytes each)."""
    path: str = ""
    """A file that keeps the keys across restarts (empty: memory only)."""


@dataclass(slots=True)
class LogsToEvidenceConfig:
    """Settings of ``logs_to_evidence``."""

    dedupe: DedupeConfig = field(default_factory=DedupeConfig)

    def validate(self) -> list[str]:
        """Problems with the settings."""
        return [] if self.dedupe.window >= 2 else ["dedupe.window: must be at least 2"]


_STABLE_BACKENDS = frozenset({"otlp", "correlate"})
"""Observation sources whose ids do not restart with the agent process (span ids, derived ids
built from them); OS record ids count from 1 in every agent process, so they are scoped to it."""


def _obs_key(host: str, instance: str, obs: Observation) -> int:
    scope = "" if obs.source.backend in _STABLE_BACKENDS else instance
    return digest("o", host, scope, obs.id)


def _is_instance_local(obs_id: str) -> bool:
    """Whether ``obs_id`` is an OS record's observation id (``<backend>:<n>#<slot>``, counted
    from 1 in every agent process) rather than a span's (``<span hex>#<slot>``) or a derived
    one (``correlate:...``, ``crosshost:...``), which are unique without their agent."""
    head = obs_id.partition("#")[0]
    return ":" in head and not head.startswith(("correlate:", "crosshost:"))


def _scoped(obs: Observation, scope: str, attrs: dict[str, AnyValue]) -> Observation:
    """``obs`` as the gateway keeps it: an OS record's id, occurrence and record id gain the
    agent instance's ``scope`` (two agents, or one agent before and after a restart, count
    their records from 1, so ``linux:6#0`` alone does not say which record), and so does every
    such id a derived observation's support names; ``attrs`` replace the attributes."""
    evidence = obs.evidence
    if evidence.support and any(_is_instance_local(s) for s in evidence.support):
        support = tuple(s + scope if _is_instance_local(s) else s for s in evidence.support)
        evidence = msgspec.structs.replace(evidence, support=support)
    if obs.source.backend in _STABLE_BACKENDS:
        return msgspec.structs.replace(obs, attrs=attrs, evidence=evidence)
    return msgspec.structs.replace(
        obs,
        id=obs.id + scope,
        occurrence=obs.occurrence + scope if obs.occurrence else obs.occurrence,
        source=msgspec.structs.replace(obs.source, record_id=obs.source.record_id + scope),
        attrs=attrs,
        evidence=evidence,
    )


def _cov_key(host: str, instance: str, cov: CoverageRecord) -> int:
    src = cov.source
    return digest(
        "c", host, instance, src.backend, src.record_id, cov.reason, str(cov.time_unix_nano)
    )


def _span_key(span: Span) -> int:
    return digest("s", span.trace_id.hex(), span.span_id.hex())


def _log_key(record: LogRecord) -> int | None:
    if not is_os_record(record):
        return None  # not ours to identify: passed on as received
    res, a = record.resource.attributes, record.attributes
    return digest(
        "l",
        str(res.get("host.id")),
        str(res.get("evidence.backend")),
        str(a.get("evidence.record_id")),
        str(record.time_unix_nano),
        str(record.observed_time_unix_nano),
    )


class LogsToEvidence:
    """The gateway-side processor (see the module docstring)."""

    def __init__(
        self, config: LogsToEvidenceConfig, next_consumer: Consumer, telemetry: Telemetry
    ) -> None:
        self._next = next_consumer
        self._seen = SeenKeys(config.dedupe.window, config.dedupe.path)
        self._telemetry = telemetry.owned_by(factories[1], "logs_to_evidence")

    def start(self, host: Host) -> None:
        """Open the key file (read back what was accepted before a restart)."""
        self._telemetry = host.telemetry.in_scope_of(self._telemetry)
        self._seen.open()
        if self._seen.loaded:
            self._telemetry.count("dedupe_keys_loaded", self._seen.loaded)

    def shutdown(self) -> None:
        """Close the key file. Safe twice."""
        self._seen.close()

    def consume(self, batch: Batch) -> None:
        """Forward what was not accepted before; remember it once the pipeline took it."""
        keyed: list[tuple[int, object]] = []
        passthrough: list[LogRecord] = []
        for span in batch.spans:
            keyed.append((_span_key(span), span))
        for record in batch.logs:
            if wire.is_evidence(record):
                keyed.extend(self._decode(record))
                continue
            key = _log_key(record)
            if key is None:
                passthrough.append(record)
            else:
                keyed.append((key, record))
        for obs in batch.observations:  # already evidence (an in-process pipeline): keep as is
            keyed.append((digest("o", "", "", obs.id), obs))
        fresh = self._seen.reserve(k for k, _ in keyed)
        new_keys = [k for (k, _), ok in zip(keyed, fresh, strict=True) if ok]
        items = [item for (_, item), ok in zip(keyed, fresh, strict=True) if ok]
        duplicates = len(keyed) - len(items)
        if duplicates:
            self._telemetry.count("duplicates_dropped", duplicates)
        out = Batch(
            spans=tuple(i for i in items if isinstance(i, Span)),
            logs=tuple(passthrough) + tuple(i for i in items if isinstance(i, LogRecord)),
            observations=tuple(i for i in items if isinstance(i, Observation)),
            coverage=batch.coverage + tuple(i for i in items if isinstance(i, CoverageRecord)),
        )
        if not len(out):
            return
        try:
            self._next.consume(out)
        except BaseException:
            self._seen.release(new_keys)
            raise
        self._seen.commit(new_keys)
        if out.observations:
            self._telemetry.count("accepted_observations", len(out.observations))

    def _decode(self, record: LogRecord) -> list[tuple[int, object]]:
        host, instance = wire.origin(record)
        try:
            observations, coverage = wire.decode(record)
        except DecodeError as exc:
            self._telemetry.count("invalid_evidence_records")
            cov = CoverageRecord(
                source=Source(channel=Channel.OS, backend="gateway", record_id=f"evidence:{host}"),
                reason="evidence_record_invalid",
                time_unix_nano=record.time_unix_nano,
                detail=str(exc),
            )
            return [(digest("x", host, instance, str(record.time_unix_nano)), cov)]
        out: list[tuple[int, object]] = []
        scope = f"@{digest('i', host, instance):016x}"
        for obs in observations:
            attrs = dict(obs.attrs)
            attrs[wire.AGENT_HOST_ATTR] = host
            out.append((_obs_key(host, instance, obs), _scoped(obs, scope, attrs)))
        out.extend((_cov_key(host, instance, c), c) for c in coverage)
        return out


# ---------------------------------------------------------------------------------- crosshost


@dataclass(slots=True)
class CrossHostConfig:
    """Settings of ``crosshost``."""

    skew_window: float = 5.0
    """Largest time between the two ends' sightings of one connection (seconds)."""
    max_entries: int = 1_000_000
    """Connections and spans remembered (oldest forgotten first)."""

    def validate(self) -> list[str]:
        """Problems with the settings."""
        problems = []
        if not self.skew_window >= 0:
            problems.append("skew_window: must not be negative")
        if self.max_entries < 1:
            problems.append("max_entries: must be at least 1")
        return problems


class CrossHost:
    """The ``crosshost`` processor: forwards every batch with the joins it completes."""

    def __init__(
        self, config: CrossHostConfig, next_consumer: Consumer, telemetry: Telemetry
    ) -> None:
        self._next = next_consumer
        self._join = CrossHostJoin(int(config.skew_window * 1e9), config.max_entries)
        self._lock = threading.Lock()
        self._telemetry = telemetry.owned_by(factories[2], "crosshost")

    def start(self, host: Host) -> None:
        """Nothing to acquire."""
        self._telemetry = host.telemetry.in_scope_of(self._telemetry)

    def shutdown(self) -> None:
        """Nothing held."""

    def consume(self, batch: Batch) -> None:
        """Learn the batch; forward it with the derived joins appended."""
        derived: list[Observation] = []
        with self._lock:
            before = dataclasses.astuple(self._join.counts)
            for obs in batch.observations:
                self._join.add_observation(obs, derived)
            for span in batch.spans:
                self._join.add_span(span, derived)
            after = dataclasses.astuple(self._join.counts)
        for name, a, b in zip(
            ("connections_joined", "connections_ambiguous", "traces_joined"),
            before,
            after,
            strict=True,
        ):
            if b > a:
                self._telemetry.count(name, b - a)
        if derived:
            batch = batch.replace(observations=batch.observations + tuple(derived))
        self._next.consume(batch)


def _create_to_logs(
    settings: CreateSettings, config: EvidenceToLogsConfig, next_consumer: Consumer | None
) -> Component:
    return EvidenceToLogs(config, require_consumer(next_consumer, "evidence_to_logs"))


def _create_to_evidence(
    settings: CreateSettings, config: LogsToEvidenceConfig, next_consumer: Consumer | None
) -> Component:
    consumer = require_consumer(next_consumer, "logs_to_evidence")
    return LogsToEvidence(config, consumer, settings.telemetry)


def _create_crosshost(
    settings: CreateSettings, config: CrossHostConfig, next_consumer: Consumer | None
) -> Component:
    return CrossHost(config, require_consumer(next_consumer, "crosshost"), settings.telemetry)


factories: tuple[
    Factory[EvidenceToLogsConfig], Factory[LogsToEvidenceConfig], Factory[CrossHostConfig]
] = (
    Factory(
        type_name="evidence_to_logs",
        kind=PROCESSOR,
        default_config=EvidenceToLogsConfig,
        create=_create_to_logs,
        signals=frozenset({"evidence"}),
    ),
    Factory(
        type_name="logs_to_evidence",
        kind=PROCESSOR,
        default_config=LogsToEvidenceConfig,
        create=_create_to_evidence,
        signals=frozenset({"evidence"}),
        counters=(
            CounterSpec("duplicates_dropped", "records already accepted, dropped", "{records}"),
            CounterSpec("accepted_observations", "observations accepted", "{observations}"),
            CounterSpec("invalid_evidence_records", "evidence log records that did not decode"),
            CounterSpec("dedupe_keys_loaded", "accepted-record keys read back at start"),
        ),
    ),
    Factory(
        type_name="crosshost",
        kind=PROCESSOR,
        default_config=CrossHostConfig,
        create=_create_crosshost,
        signals=frozenset({"evidence"}),
        counters=(
            CounterSpec("connections_joined", "TCP connections joined across hosts"),
            CounterSpec("connections_ambiguous", "4-tuples with several fits: not joined"),
            CounterSpec("traces_joined", "spans joined to a parent span on another host"),
        ),
    ),
)
