"""The ``normalize`` processor: spans and OS log records -> canonical observations.

It implements the contract of ``docs/contracts.md`` ("Observations the normalizer emits"):

* spans following the OpenTelemetry GenAI semantic conventions, OpenInference spans and plain
  spans (:mod:`.spans`), with channel assignment per resource/scope (:mod:`.channels`) and
  conservative extraction of a tool call's declared command (:mod:`.command`);
* OS event log records under a resource tagged ``evidence.channel=os`` (:mod:`.oslogs`);
* any other log record, and anything it cannot interpret, becomes a :class:`CoverageRecord`.

Every entity it builds carries typed ``facts`` (what its source stated, ``None`` for what it did
not) and a run-independent ``key`` (``docs/model.md``, "Typed facts" and "Stable keys"); readers
use those, never the entity's attribute strings.

The original spans and logs pass through unchanged; observations and coverage are appended to
what the batch already held.

**Idempotence.** A span or log record counts as *already normalized* when the batch already
holds an observation or coverage record from the same source (``backend`` and ``record_id``).
Those records are passed through without producing anything new, so
``normalize(normalize(b))`` holds the same observations and coverage as ``normalize(b)``.

**Across batches.** Agent parents are found by walking up the span tree through a bounded memory
of recently seen spans (at least the last ``span_cache_size``); a relation whose ancestor has not
arrived waits in a bounded table (``pending_cache_size``) and is emitted when the ancestor
arrives, in that later batch. A relation whose ancestor never arrives (evicted from the table, or
still waiting at shutdown) becomes a ``parent_span_missing`` coverage record: the normalizer
never guesses. Because of that state the processor is a pure function of (batch, remembered
ancestry).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from otel_bridge.component import (
    PROCESSOR,
    Component,
    Consumer,
    CreateSettings,
    Factory,
    FunctionProcessor,
    require_consumer,
)
from otel_bridge.model import Batch, Channel, CoverageRecord, LogRecord, Observation, Source

from ._memo import emitter_facts
from .ancestry import Ancestry
from .channels import BUILTIN_RULES, ChannelAssigner, ChannelRule, RuleMatch, ScopeMatch
from .command import CommandResult, extract_command
from .oslogs import (
    fast_source,
    is_os_record,
    is_os_resource,
    normalize_os_record,
    record_source,
    resource_backend,
    resource_host,
)
from .spans import SpanNormalizer

__all__ = [
    "BUILTIN_RULES",
    "ChannelRule",
    "CommandResult",
    "NormalizeConfig",
    "NormalizeProcessor",
    "Normalizer",
    "RuleMatch",
    "ScopeMatch",
    "extract_command",
    "factory",
]


@dataclass(slots=True)
class NormalizeConfig:
    """Configuration of the ``normalize`` processor."""

    channel_rules: list[ChannelRule] = field(default_factory=list)
    """Rules ``{match: {resource: {k: regex}, scope: {name: regex}}, channel: gw}``, first match
    wins, tried before the built-in rules. A resource ``evidence.channel`` always wins."""
    default_rules: bool = True
    """Apply the built-in gateway/model-runtime rules after the user's rules."""
    span_cache_size: int = 100_000
    """Spans remembered for resolving ancestors across batches: at least the most recent this
    many, at most twice as many (two generations)."""
    pending_cache_size: int = 100_000
    """Relations that may wait for an ancestor that has not arrived yet (FIFO)."""

    def validate(self) -> list[str]:
        """Problems with this configuration, relative to the component."""
        problems: list[str] = []
        for i, rule in enumerate(self.channel_rules):
            problems.extend(f"channel_rules[{i}].{p}" for p in rule.validate())
        if self.span_cache_size < 1:
            problems.append("span_cache_size: must be at least 1")
        if self.pending_cache_size < 1:
            problems.append("pending_cache_size: must be at least 1")
        return problems


class Normalizer:
    """The batch function of the processor (see the module docstring). Thread-safe."""

    def __init__(self, config: NormalizeConfig | None = None) -> None:
        config = config or NormalizeConfig()
        self._lock = threading.Lock()
        assigner = ChannelAssigner(config.channel_rules, default_rules=config.default_rules)
        self._spans = SpanNormalizer(
            assigner,
            Ancestry(config.span_cache_size, config.pending_cache_size),
            config.pending_cache_size,
        )

    def __call__(self, batch: Batch, /) -> Batch:
        """``batch`` with the observations and coverage of its not-yet-normalized records."""
        done = {(o.source.backend, o.source.record_id) for o in batch.observations}
        done.update((c.source.backend, c.source.record_id) for c in batch.coverage)
        observations: list[Observation] = list(batch.observations)
        coverage: list[CoverageRecord] = list(batch.coverage)
        with self._lock:
            normalize = self._spans.normalize_into
            for span in batch.spans:
                if done and ("otlp", span.span_id.hex()) in done:
                    continue
                normalize(span, observations, coverage)
        resource: object = None
        backend: str | None = None  # of ``resource``: None when it is not the OS channel's
        host = ""
        for record in batch.logs:
            if record.resource is not resource:  # a batch's records share a few resources
                resource = record.resource
                attrs = record.resource.attributes
                backend = resource_backend(attrs) if is_os_resource(attrs) else None
                host = resource_host(attrs)
            if backend is None:
                source = _log_source(record)
                if not (done and (source.backend, source.record_id) in done):
                    coverage.append(_not_interpreted(record, source))
                continue
            source = fast_source(record, backend)
            if done and (source.backend, source.record_id) in done:
                continue
            obs, cov = normalize_os_record(record, source, host)
            observations.extend(obs)
            coverage.extend(cov)
        return batch.replace(observations=tuple(observations), coverage=tuple(coverage))

    def drain(self) -> list[CoverageRecord]:
        """Coverage for every relation still waiting for an ancestor (call at shutdown)."""
        with self._lock:
            return self._spans.drain()


def _not_interpreted(record: LogRecord, source: Source) -> CoverageRecord:
    return CoverageRecord(
        source=source,
        reason="log_not_interpreted",
        time_unix_nano=record.time_unix_nano,
        detail=f"log record {record.event_name or record.severity_text!r} "
        "is not an OS event; kept as telemetry only",
    )


def _log_source(record: LogRecord) -> Source:
    if is_os_record(record):
        return record_source(record)
    ids = f"{record.trace_id.hex()}:{record.span_id.hex()}" if record.span_id else ""
    return Source(
        channel=Channel.SEM,
        backend="otlp",
        record_id=f"log:{record.time_unix_nano}:{ids}:{record.event_name}",
        # Who sent it (its resource's pid, the receiver's transport peer): a coding agent that
        # sends only log events is found by it (``review``'s ``transport_peer`` rule).
        emitter=emitter_facts(record.resource.attributes, record.resource.peer),
    )


class NormalizeProcessor(FunctionProcessor):
    """The processor: applies a :class:`Normalizer`; at shutdown forwards unresolved links."""

    def __init__(self, normalizer: Normalizer, next_consumer: Consumer) -> None:
        super().__init__(normalizer, next_consumer)
        self.normalizer = normalizer
        self._consumer = next_consumer
        self._stopped = False

    def shutdown(self) -> None:
        """Report relations whose ancestor never arrived as coverage, once."""
        if self._stopped:
            return
        self._stopped = True
        coverage = self.normalizer.drain()
        if coverage:
            self._consumer.consume(Batch(coverage=tuple(coverage)))


def _create(
    settings: CreateSettings, config: NormalizeConfig, next_consumer: Consumer | None
) -> Component:
    return NormalizeProcessor(Normalizer(config), require_consumer(next_consumer, "normalize"))


factory: Factory[NormalizeConfig] = Factory(
    type_name="normalize",
    kind=PROCESSOR,
    default_config=NormalizeConfig,
    create=_create,
    signals=frozenset({"evidence", "traces", "logs"}),
)
