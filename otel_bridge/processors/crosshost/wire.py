"""Evidence records: an agent's observations and coverage records as OTLP log records.

An agent collector normalizes and correlates on its own host; what it derived must reach the
gateway as it is, over plain OTLP, so that any OpenTelemetry Collector (load balancing, Kafka) can
carry it. Each batch of observations and coverage records becomes one or more log records:

* resource: ``service.name=otel-bridge-agent``, ``host.id`` (the agent's host), and
  ``otel_bridge.agent.instance`` (a random id per agent process start: OS record ids count from 1
  in every collector process, so they are unique only within one instance);
* ``event_name`` ``otel_bridge.evidence``; attributes ``otel_bridge.evidence.encoding``
  (:data:`ENCODING`), ``otel_bridge.evidence.observations`` and ``.coverage`` (counts);
* body: bytes, msgpack of ``{"observations": [...], "coverage": [...]}``: each record is the model
  struct (``otel_bridge/model.py``) encoded by msgspec field by field (enums as their values,
  bytes as msgpack binary, tuples as arrays, absent evidence flags as nil), so nothing is lost.

Decoding uses twins of ``Entity`` and ``Observation`` whose ``attrs`` are typed ``Any`` (msgspec
cannot type a union of ``str`` and ``bytes``, which ``AnyValue`` is); arrays in attributes become
tuples again, so a decoded record equals the one encoded.

``docs/deployment.md`` describes the format for other readers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec

from otel_bridge.errors import DecodeError
from otel_bridge.model import (
    NO_EVIDENCE,
    AnyValue,
    CoverageRecord,
    Entity,
    EntityKind,
    Evidence,
    Facts,
    LogRecord,
    Observation,
    RelationKind,
    Resource,
    Scope,
    Source,
    relation_problem,
)

EVENT_NAME = "otel_bridge.evidence"
ENCODING = "msgpack-struct/1"
INSTANCE_ATTR = "otel_bridge.agent.instance"
AGENT_HOST_ATTR = "otel_bridge.agent.host.id"
"""Observation attribute the gateway adds: the ``host.id`` of the agent that shipped it."""
SCOPE = Scope(name="otel_bridge.evidence", version="1")


def evidence_resource(host_id: str, instance: str) -> Resource:
    """The resource of every evidence record an agent instance ships."""
    return Resource(
        attributes={
            "service.name": "otel-bridge-agent",
            "host.id": host_id,
            INSTANCE_ATTR: instance,
        }
    )


class _Payload(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    observations: tuple[Observation, ...] = ()
    coverage: tuple[CoverageRecord, ...] = ()


class _Entity(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    kind: EntityKind
    id: str
    label: str = ""
    attrs: dict[str, Any] = msgspec.field(default_factory=dict)
    facts: Facts | None = None
    key: str = ""


class _Observation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    id: str
    time_unix_nano: int
    source: Source
    subject: _Entity
    relation: RelationKind | None = None
    object: _Entity | None = None
    evidence: Evidence = NO_EVIDENCE
    occurrence: str = ""
    end_time_unix_nano: int = 0
    attrs: dict[str, Any] = msgspec.field(default_factory=dict)


class _WirePayload(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    observations: tuple[_Observation, ...] = ()
    coverage: tuple[CoverageRecord, ...] = ()


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(_WirePayload)


def _value(value: Any) -> AnyValue:
    if isinstance(value, list):
        return tuple(_value(v) for v in value)
    if isinstance(value, dict):
        return {k: _value(v) for k, v in value.items()}
    return value  # type: ignore[no-any-return]


def _attrs(attrs: dict[str, Any]) -> dict[str, AnyValue]:
    for v in attrs.values():
        if isinstance(v, list | dict):
            return {k: _value(v) for k, v in attrs.items()}
    return attrs


def _entity(e: _Entity) -> Entity:
    return Entity(
        kind=e.kind, id=e.id, label=e.label, attrs=_attrs(e.attrs), facts=e.facts, key=e.key
    )


def _observation(o: _Observation) -> Observation:
    return Observation(
        id=o.id,
        time_unix_nano=o.time_unix_nano,
        source=o.source,
        subject=_entity(o.subject),
        relation=o.relation,
        object=None if o.object is None else _entity(o.object),
        evidence=o.evidence,
        occurrence=o.occurrence,
        end_time_unix_nano=o.end_time_unix_nano,
        attrs=_attrs(o.attrs),
    )


def encode(
    resource: Resource,
    observations: Sequence[Observation],
    coverage: Sequence[CoverageRecord],
    max_records: int,
) -> list[LogRecord]:
    """Evidence log records holding ``observations`` and ``coverage``, at most ``max_records``
    of them per log record."""
    out: list[LogRecord] = []
    now = time.time_ns()
    obs, cov = tuple(observations), tuple(coverage)
    n_obs = len(obs)
    for start in range(0, n_obs + len(cov), max_records):
        stop = start + max_records
        payload = _Payload(
            observations=obs[start:stop],
            coverage=cov[max(0, start - n_obs) : max(0, stop - n_obs)],
        )
        out.append(
            LogRecord(
                resource=resource,
                scope=SCOPE,
                time_unix_nano=now,
                observed_time_unix_nano=now,
                severity_number=9,
                severity_text="INFO",
                event_name=EVENT_NAME,
                body=_ENCODER.encode(payload),
                attributes={
                    "otel_bridge.evidence.encoding": ENCODING,
                    "otel_bridge.evidence.observations": len(payload.observations),
                    "otel_bridge.evidence.coverage": len(payload.coverage),
                },
            )
        )
    return out


def is_evidence(record: LogRecord) -> bool:
    """True for a log record :func:`encode` made."""
    return record.event_name == EVENT_NAME


def origin(record: LogRecord) -> tuple[str, str]:
    """(host id, agent instance) of an evidence record (``""`` for what it does not state)."""
    attrs = record.resource.attributes
    host, instance = attrs.get("host.id"), attrs.get(INSTANCE_ATTR)
    return (
        host if isinstance(host, str) else "",
        instance if isinstance(instance, str) else "",
    )


def decode(record: LogRecord) -> tuple[list[Observation], list[CoverageRecord]]:
    """The observations and coverage records of one evidence record.

    Raises :class:`DecodeError` for a record that is not in this format."""
    encoding = record.attributes.get("otel_bridge.evidence.encoding")
    if encoding != ENCODING:
        raise DecodeError(f"evidence record: unknown encoding {encoding!r}")
    if not isinstance(record.body, bytes):
        raise DecodeError("evidence record: the body is not bytes")
    try:
        payload = _DECODER.decode(record.body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DecodeError(f"evidence record: {exc}") from None
    observations = [_observation(o) for o in payload.observations]
    for i, observation in enumerate(observations):
        problem = relation_problem(observation)
        if problem:
            raise DecodeError(f"evidence record: observations[{i}]: {problem}")
    coverage = list(payload.coverage)
    return observations, coverage
