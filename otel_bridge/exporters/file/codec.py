"""JSON-lines encoding of batches: the ``file`` exporter's format, as pure functions.

One record per line, told apart by the top-level key:

* a span: ``{"resourceSpans": [...]}``, an OTLP/JSON ``ExportTraceServiceRequest`` holding that
  one span (so any OTLP/JSON tool, e.g. the Collector's ``otlpjsonfile`` receiver, reads it);
* a log record: ``{"resourceLogs": [...]}``, likewise;
* an observation: ``{"observation": {...}}`` (:mod:`otel_bridge.jsonl`);
* a coverage record: ``{"coverage": {...}}``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from otel_bridge import jsonl
from otel_bridge.errors import DecodeError
from otel_bridge.model import Batch, Entity, LogRecord, Observation, Resource, Scope, Span
from otel_bridge.otlp import json_codec

from .config import SignalName

ALL_PARTS: tuple[SignalName, ...] = ("spans", "logs", "observations", "coverage")


def encode_lines(batch: Batch, parts: Iterable[str] = ALL_PARTS) -> list[str]:
    """The JSON lines (without newlines) for the chosen ``parts`` of ``batch``, in order."""
    wanted = set(parts)
    lines: list[str] = []
    if "spans" in wanted and batch.spans:
        lines.extend(_one_per_line(batch.spans, _TRACES, json_codec.span_to_dict))
    if "logs" in wanted and batch.logs:
        lines.extend(_one_per_line(batch.logs, _LOGS, json_codec.log_to_dict))
    if "observations" in wanted:
        lines.extend(_observation_lines(batch.observations))
    if "coverage" in wanted:
        lines.extend(jsonl.dumps({"coverage": jsonl.coverage_to_dict(c)}) for c in batch.coverage)
    return lines


_R = TypeVar("_R", Span, LogRecord)
_TRACES = ("resourceSpans", "scopeSpans", "spans")
_LOGS = ("resourceLogs", "scopeLogs", "logRecords")


def _frame(resource: Resource, scope: Scope, keys: tuple[str, str, str]) -> tuple[str, str]:
    """The text before and after the one record of a line of ``resource`` and ``scope``: the
    same text as ``jsonl.dumps`` of ``json_codec.encode_traces`` / ``encode_logs`` of one
    record, whose keys come in this order (resource, scopes, schemaUrl; scope, records,
    schemaUrl)."""
    top, scopes_key, records_key = keys
    before = (
        f'{{"{top}":[{{"resource":{jsonl.dumps(json_codec.resource_to_dict(resource))},'
        f'"{scopes_key}":[{{"scope":{jsonl.dumps(json_codec.scope_to_dict(scope))},'
        f'"{records_key}":['
    )
    after = "]"
    if scope.schema_url:
        after += "," + jsonl.dumps({"schemaUrl": scope.schema_url})[1:-1]
    after += "}]"
    if resource.schema_url:
        after += "," + jsonl.dumps({"schemaUrl": resource.schema_url})[1:-1]
    return before, after + "}]}"


def _one_per_line(
    records: Sequence[_R], keys: tuple[str, str, str], to_dict: Callable[[_R], dict[str, Any]]
) -> list[str]:
    """One OTLP/JSON request per record, its resource and scope encoded once per batch (the
    records of a batch share a few of each; encoding them again per record was most of the
    cost)."""
    frames: dict[tuple[int, int], tuple[str, str]] = {}
    lines: list[str] = []
    for record in records:
        # ids are stable here: ``records`` holds every resource and scope for the whole call
        key = (id(record.resource), id(record.scope))
        frame = frames.get(key)
        if frame is None:
            frame = frames[key] = _frame(record.resource, record.scope, keys)
        lines.append(frame[0] + jsonl.dumps(to_dict(record)) + frame[1])
    return lines


def _observation_lines(observations: Sequence[Observation]) -> list[str]:
    """One line per observation; an entity object met again in the batch (the normalizer
    shares a process's entity between its events) is turned into a dict once."""
    memo: dict[int, dict[str, Any]] = {}

    def entity(e: Entity) -> dict[str, Any]:
        # ids are stable here: ``observations`` holds every entity for the whole call
        d = memo.get(id(e))
        if d is None:
            d = memo[id(e)] = jsonl.entity_to_dict(e)
        return d

    return [
        jsonl.dumps({"observation": jsonl.observation_to_dict(o, entity)}) for o in observations
    ]


def decode_line(line: str, where: str = "line") -> Batch:
    """The records of one line written by :func:`encode_lines`; DecodeError if malformed."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DecodeError(f"{where}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DecodeError(f"{where}: expected a JSON object")
    if "resourceSpans" in data:
        decoded = json_codec.decode_traces(data)
        if decoded.rejected:
            raise DecodeError(f"{where}: {decoded.error_message}")
        return Batch(spans=decoded.records)
    if "resourceLogs" in data:
        logs = json_codec.decode_logs(data)
        if logs.rejected:
            raise DecodeError(f"{where}: {logs.error_message}")
        return Batch(logs=logs.records)
    if "observation" in data:
        return Batch(observations=(jsonl.observation_from_dict(data["observation"], where),))
    if "coverage" in data:
        return Batch(coverage=(jsonl.coverage_from_dict(data["coverage"], where),))
    raise DecodeError(
        f"{where}: unknown record (expected resourceSpans, resourceLogs, observation or coverage)"
    )


def read_lines(path: str | os.PathLike[str]) -> Iterator[Batch]:
    """Every record of a JSON-lines file, one batch per line; blank lines are skipped."""
    name = os.fspath(path)
    with open(name, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield decode_line(line, f"{name}:{n}")


def read_batch(path: str | os.PathLike[str]) -> Batch:
    """All records of a JSON-lines file as one batch, in file order within each part."""
    return Batch.concat(list(read_lines(path)))
