"""The stored form of one raw record, and back.

In a block (schema version 2) a record is msgspec's own msgpack encoding of the model struct
(:class:`~otel_bridge.model.Observation`, :class:`~otel_bridge.model.Span`,
:class:`~otel_bridge.model.LogRecord`): a map of field names to values, enums as their values,
bytes as bytes. Encoding is done in C (about 4 µs an observation, against 20 for the
:mod:`otel_bridge.jsonl` form built in Python). msgspec cannot decode these structs by type
(their attribute values mix ``str`` and ``bytes``), so decoding is written out here; an
observation's map is also a valid :mod:`otel_bridge.jsonl` form and is read by
:func:`otel_bridge.jsonl.observation_from_dict`. A change of ``model.py`` that renames or retypes
a stored field needs a new block version (``codec.BLOCK_VERSION``).

A row stored before version 2 holds its own ``record`` (``codec.unpack``): the ``jsonl`` form of
an observation, the OTLP/JSON request of a span or log record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from otel_bridge import jsonl
from otel_bridge.model import (
    LogRecord,
    Observation,
    Resource,
    Scope,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    Status,
    StatusCode,
)
from otel_bridge.otlp import json_codec

_ENCODER = msgspec.msgpack.Encoder()
encode = _ENCODER.encode
"""The stored form of a model struct (observation, span or log record)."""


def decode_observation(raw: bytes, native: bool) -> Observation:
    """An observation from its stored form (``native``: from a block, else a v1 ``record``)."""
    return jsonl.observation_from_dict(msgspec.msgpack.decode(raw), "store")


def otlp_request(raw: bytes, native: bool) -> dict[str, Any]:
    """The OTLP/JSON request holding the stored span or log record ``raw`` (the lines of a run
    directory's ``sem.jsonl`` and ``os.jsonl``)."""
    data = msgspec.msgpack.decode(raw)
    if not native:
        return dict(data)
    if "span_id" in data and "kind" in data:
        return json_codec.encode_traces((span_from_map(data),))
    return json_codec.encode_logs((log_from_map(data),))


def _resource(d: Mapping[str, Any]) -> Resource:
    return Resource(
        attributes=d["attributes"],
        dropped_attributes_count=d["dropped_attributes_count"],
        schema_url=d["schema_url"],
    )


def _scope(d: Mapping[str, Any]) -> Scope:
    return Scope(
        name=d["name"],
        version=d["version"],
        attributes=d["attributes"],
        dropped_attributes_count=d["dropped_attributes_count"],
        schema_url=d["schema_url"],
    )


def span_from_map(d: Mapping[str, Any]) -> Span:
    """A span from its stored map."""
    status = d["status"]
    return Span(
        resource=_resource(d["resource"]),
        scope=_scope(d["scope"]),
        trace_id=d["trace_id"],
        span_id=d["span_id"],
        parent_span_id=d["parent_span_id"],
        trace_state=d["trace_state"],
        flags=d["flags"],
        name=d["name"],
        kind=SpanKind(d["kind"]),
        start_time_unix_nano=d["start_time_unix_nano"],
        end_time_unix_nano=d["end_time_unix_nano"],
        attributes=d["attributes"],
        dropped_attributes_count=d["dropped_attributes_count"],
        events=tuple(SpanEvent(**e) for e in d["events"]),
        dropped_events_count=d["dropped_events_count"],
        links=tuple(SpanLink(**link) for link in d["links"]),
        dropped_links_count=d["dropped_links_count"],
        status=Status(code=StatusCode(status["code"]), message=status["message"]),
    )


def log_from_map(d: Mapping[str, Any]) -> LogRecord:
    """A log record from its stored map."""
    fields = dict(d)
    fields["resource"] = _resource(d["resource"])
    fields["scope"] = _scope(d["scope"])
    return LogRecord(**fields)
