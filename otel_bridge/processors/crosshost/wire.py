"""Evidence records: an agent's observations and coverage records as OTLP log records.

An agent collector normalizes and correlates on its own host; what it derived must reach the
gateway as it is, over plain OTLP, so that any OpenTelemetry Collector (load balancing, Kafka) can
carry it. Each batch of observations and coverage records becomes one or more log records:

* resource: ``service.name=otel-bridge-agent``, ``host.id`` (the agent's host), and
  ``otel_bridge.agent.instance`` (a random id per agent process start: OS record ids count from 1
  in every collector process, so they are unique only within one instance);
* ``event_name`` ``otel_bridge.evidence``; attributes ``otel_bridge.evidence.encoding``
  (:data:`ENCODING`), ``otel_bridge.evidence.observations`` and ``.coverage`` (counts);
* body: bytes, a msgpack map ``{"observations": [...], "coverage": [...]}`` of the lossless dict
  forms of :mod:`otel_bridge.jsonl` (the graph journal's form).

``docs/deployment.md`` describes the format for other readers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec

from otel_bridge import jsonl
from otel_bridge.errors import DecodeError
from otel_bridge.model import CoverageRecord, LogRecord, Observation, Resource, Scope

EVENT_NAME = "otel_bridge.evidence"
ENCODING = "msgpack-jsonl/1"
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
    items: list[tuple[bool, Observation | CoverageRecord]] = [(True, o) for o in observations]
    items.extend((False, c) for c in coverage)
    for start in range(0, len(items), max_records):
        chunk = items[start : start + max_records]
        obs = [jsonl.observation_to_dict(r) for is_obs, r in chunk if is_obs]  # type: ignore[arg-type]
        cov = [jsonl.coverage_to_dict(r) for is_obs, r in chunk if not is_obs]  # type: ignore[arg-type]
        body = msgspec.msgpack.encode({"observations": obs, "coverage": cov})
        out.append(
            LogRecord(
                resource=resource,
                scope=SCOPE,
                time_unix_nano=now,
                observed_time_unix_nano=now,
                severity_number=9,
                severity_text="INFO",
                event_name=EVENT_NAME,
                body=body,
                attributes={
                    "otel_bridge.evidence.encoding": ENCODING,
                    "otel_bridge.evidence.observations": len(obs),
                    "otel_bridge.evidence.coverage": len(cov),
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
        data: Any = msgspec.msgpack.decode(record.body)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"evidence record: body is not msgpack: {exc}") from None
    if not isinstance(data, dict):
        raise DecodeError("evidence record: body is not a map")
    try:
        observations = [
            jsonl.observation_from_dict(o, "evidence.observations")
            for o in data.get("observations") or ()
        ]
        coverage = [
            jsonl.coverage_from_dict(c, "evidence.coverage") for c in data.get("coverage") or ()
        ]
    except (ValueError, TypeError) as exc:
        raise DecodeError(f"evidence record: {exc}") from None
    return observations, coverage
