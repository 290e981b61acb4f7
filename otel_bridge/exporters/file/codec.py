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
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import orjson

from otel_bridge import jsonl
from otel_bridge.errors import DecodeError
from otel_bridge.model import (
    AnyValue,
    Attributes,
    Batch,
    Entity,
    Evidence,
    LogRecord,
    Observation,
    Resource,
    Scope,
    Span,
)
from otel_bridge.otlp import json_codec
from otel_bridge.stamping import EARLIEST_TIME

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


_REMEMBERED = 4_096
"""Entries of each of a :class:`LineEncoder`'s memos (cleared when full)."""
_UNIQUE_KEYS = frozenset({"evidence.record_id", EARLIEST_TIME})
"""Attribute keys whose values differ in (nearly) every record: never remembered (each would
take a slot and, once the table is full, empty it of the values that do repeat)."""
_Memo = dict[int, tuple[object, Any]]
"""``id(obj) -> (obj, encoding)``: holding the object keeps its id from being reused."""


class LineEncoder:
    """:func:`encode_lines` with memory across batches, for one exporter: the same lines.

    A long run's OS records and their observations repeat a few objects and values: the
    normalizer shares one entity object per process, file and endpoint and one evidence object
    per combination, and the host receiver's records share their resource and scope and most of
    their attribute values. Their JSON text is made once and spliced into each line as an
    ``orjson.Fragment`` (orjson writes a fragment's text as is: the line's bytes do not change).
    Anything the fast path cannot encode (what :func:`otel_bridge.jsonl.dumps` hands to the
    standard library: a lone surrogate, an integer beyond 64 bits, a non-string key) makes
    that line go through :func:`encode_lines`' own code. ``tests/pipeline/test_file_lines.py``
    compares the two on every kind of value. Thread-safe.
    """

    def __init__(self, parts: Iterable[str] = ALL_PARTS) -> None:
        self._parts = tuple(parts)
        self._lock = threading.Lock()
        self._frames: _Memo = {}
        self._entities: _Memo = {}
        self._evidence: _Memo = {}
        self._values: dict[tuple[str, object, type], orjson.Fragment] = {}

    def encode(self, batch: Batch) -> list[str]:
        """The JSON lines (without newlines) of the chosen parts of ``batch``, in order."""
        wanted = self._parts
        lines: list[str] = []
        with self._lock:
            if "spans" in wanted and batch.spans:
                lines.extend(encode_lines(Batch(spans=batch.spans), ("spans",)))
            if "logs" in wanted and batch.logs:
                lines.extend(self._log_line(r) for r in batch.logs)
            if "observations" in wanted and batch.observations:
                lines.extend(self._observation_line(o) for o in batch.observations)
        if "coverage" in wanted:
            lines.extend(
                jsonl.dumps({"coverage": jsonl.coverage_to_dict(c)}) for c in batch.coverage
            )
        return lines

    # -- log records --------------------------------------------------------------------------

    def _log_line(self, record: LogRecord) -> str:
        frame: tuple[Scope, tuple[str, str]] | None
        frame = _remembered(self._frames, record.resource, None)
        if frame is None or frame[0] is not record.scope:
            frame = (record.scope, _frame(record.resource, record.scope, _LOGS))
            _remember(self._frames, record.resource, frame)
        before, after = frame[1]
        try:
            fields = self._log_fields(record)
            return before + orjson.dumps(fields).decode("utf-8") + after
        except TypeError:
            return before + jsonl.dumps(json_codec.log_to_dict(record)) + after

    def _log_fields(self, log: LogRecord) -> dict[str, Any]:
        """:func:`otel_bridge.otlp.json_codec.log_to_dict` with remembered attribute text."""
        return json_codec.log_to_dict(log, self._attributes)

    def _attributes(self, attributes: Attributes) -> list[Any]:
        return [self._attribute(k, v) for k, v in attributes.items()]

    def _attribute(self, key: str, value: AnyValue) -> Any:
        """The OTLP/JSON ``KeyValue`` of one attribute: remembered text for a repeated plain
        value (keyed with its type: ``True`` and ``1`` stay apart), else the dict."""
        if key in _UNIQUE_KEYS or value.__class__ not in _PLAIN_VALUES:
            return {"key": key, "value": json_codec.any_value_to_json(value)}
        memo = (key, value, value.__class__)
        text = self._values.get(memo)
        if text is None:
            encoded = {"key": key, "value": json_codec.any_value_to_json(value)}
            text = orjson.Fragment(orjson.dumps(encoded))  # TypeError: the caller's fallback
            if len(self._values) >= _REMEMBERED:
                self._values.clear()
            self._values[memo] = text
        return text

    # -- observations -------------------------------------------------------------------------

    def _observation_line(self, o: Observation) -> str:
        try:
            subject = self._entity(o.subject)
            obj = None if o.object is None else self._entity(o.object)
            fields = {
                "id": o.id,
                "time_unix_nano": o.time_unix_nano,
                "end_time_unix_nano": o.end_time_unix_nano,
                "source": jsonl.source_to_dict(o.source),
                "subject": subject,
                "relation": None if o.relation is None else str(o.relation),
                "object": obj,
                "evidence": self._evidence_text(o.evidence),
                "occurrence": o.occurrence,
                "attrs": jsonl.attrs_to_json(o.attrs),
            }
            return orjson.dumps({"observation": fields}).decode("utf-8")
        except TypeError:
            return jsonl.dumps({"observation": jsonl.observation_to_dict(o)})

    def _entity(self, entity: Entity) -> orjson.Fragment:
        text = _remembered(self._entities, entity, None)
        if text is None:
            text = orjson.Fragment(orjson.dumps(jsonl.entity_to_dict(entity)))
            _remember(self._entities, entity, text)
        return text  # type: ignore[no-any-return]

    def _evidence_text(self, evidence: Evidence) -> orjson.Fragment:
        text = _remembered(self._evidence, evidence, None)
        if text is None:
            text = orjson.Fragment(orjson.dumps(jsonl.evidence_to_dict(evidence)))
            _remember(self._evidence, evidence, text)
        return text  # type: ignore[no-any-return]


_PLAIN_VALUES = frozenset({str, int, bool})
"""Value types whose ``KeyValue`` text :class:`LineEncoder` remembers (hashable, exact)."""


def _remembered(memo: _Memo, obj: object, default: Any) -> Any:
    found = memo.get(id(obj))
    return found[1] if found is not None and found[0] is obj else default


def _remember(memo: _Memo, obj: object, encoding: Any) -> None:
    if len(memo) >= _REMEMBERED:
        memo.clear()
    memo[id(obj)] = (obj, encoding)


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
