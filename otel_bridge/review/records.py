"""Trace Records: every span, span event, log record and OS event of a run, with a source pointer.

A record's id *is* its source pointer: ``<stream file>:<line>`` (1-based) for the first record of
a line, ``<stream file>:<line>.<n>`` for the n-th further record of the same line, and
``<record id>/event:<k>`` for the k-th event of a span. Streams are never rewritten
(``docs/rundir.md``), so the ids are stable. A line that is not an OTLP/JSON request becomes a
``coverage`` record: nothing is dropped.

Spans are decoded into typed :class:`~otel_bridge.model.Span` records (the review reads their
attributes); log records are read only for what the review needs (time, event name, the host
receiver's ``evidence.record_id``) so that a long run's OS stream is read quickly.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import msgspec
import orjson

from otel_bridge.errors import DecodeError
from otel_bridge.model import Span
from otel_bridge.otlp import json_codec
from otel_bridge.otlp.json_read import read_any_value, read_attributes
from otel_bridge.review.messages import GenAIEvent

SKIPPED_STREAMS = frozenset({"correlated.jsonl", "review-records.jsonl"})
"""Files that hold derived observations or the review's own index, not source records."""


class Record(msgspec.Struct, frozen=True, gc=False):
    """One trace record: its id (= source pointer) and what it is."""

    id: str
    type: str
    """``span``, ``span_event``, ``log``, ``os_event`` or ``coverage``."""
    file: str
    line: int
    name: str = ""
    time: int | None = None
    trace_id: str = ""
    span_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``records.jsonl``."""
        return {
            "id": self.id,
            "type": self.type,
            "source": {
                "file": self.file,
                "line": self.line,
                "trace_id": self.trace_id or None,
                "span_id": self.span_id or None,
            },
            "name": self.name,
            "time": self.time,
        }


@dataclass(slots=True)
class Records:
    """Every record of a run directory's streams, and the indexes the review needs."""

    records: list[Record] = field(default_factory=list)
    spans: list[tuple[str, Span]] = field(default_factory=list)
    """(record id, span) for every span, in stream order."""
    by_span_id: dict[str, str] = field(default_factory=dict)
    """hex span id -> record id of the span."""
    by_os_record: dict[str, str] = field(default_factory=dict)
    """host receiver ``evidence.record_id`` -> record id."""
    genai_events: dict[str, list[GenAIEvent]] = field(default_factory=dict)
    """hex span id -> the GenAI event log records (``gen_ai.*``) carrying that span's context,
    with their attributes and body (the messages some instrumentations log there)."""

    def counts(self) -> dict[str, int]:
        """Records by type, and ``total``."""
        counted = Counter(r.type for r in self.records)
        out = {t: counted.get(t, 0) for t in ("span", "span_event", "log", "os_event", "coverage")}
        out["total"] = len(self.records)
        return out

    def for_observations(self, observation_ids: Iterator[str] | list[str]) -> list[str]:
        """The record ids behind graph observation ids (``<source record id>#<n>``)."""
        out: list[str] = []
        for oid in observation_ids:
            source = oid.rsplit("#", 1)[0]
            rid = self.by_os_record.get(source) or self.by_span_id.get(source)
            if rid is not None and rid not in out:
                out.append(rid)
        return out


def stream_files(run_dir: str) -> list[str]:
    """The stream files of a run directory: every ``*.jsonl`` but the correlated stream."""
    names = [
        n for n in sorted(os.listdir(run_dir)) if n.endswith(".jsonl") and n not in SKIPPED_STREAMS
    ]
    return [n for n in names if not n.startswith(".")]


def read_records(run_dir: str) -> Records:
    """Read every stream of ``run_dir`` into :class:`Records`."""
    out = Records()
    for name in stream_files(run_dir):
        with open(os.path.join(run_dir, name), "rb") as f:
            _read_stream(out, name, f)
    return out


BLOCK = 1 << 22
"""Streams are read in blocks of this many bytes, split into lines."""


def blocks_of_lines(f: BinaryIO) -> Iterator[tuple[list[bytes], bool]]:
    """The lines of ``f`` (without their newline) in lists, one list per block read, each with
    whether its block is *plain*: holds no escaped character and no trace context (``traceId``,
    ``spanId``), which :func:`fast_os_line` otherwise checks line by line."""
    rest = b""
    while block := f.read(BLOCK):
        data = rest + block
        lines = data.split(b"\n")
        rest = lines.pop()
        yield lines, b"\\" not in data and b'Id"' not in data
    if rest:
        yield [rest], False


def _read_stream(out: Records, name: str, f: BinaryIO) -> None:
    """Every line of one stream. Lines that start with the same resource and scope as an earlier
    OS event line of the host receiver's writer (``_Prefix``) are read by position; the others by
    :func:`fast_os_line` or in full (:func:`slow_line`); all three give the same record."""
    number = 0
    prefix = _Prefix()
    for lines, plain in blocks_of_lines(f):
        for raw in lines:
            number += 1
            if plain and prefix.bytes and raw.startswith(prefix.bytes):
                found = prefix.read(raw)
            else:
                found = fast_os_line(raw)
                if found is not None:
                    prefix.learn(raw)
            if found is not None:
                rid = f"{name}:{number}"
                out.records.append(Record(rid, "os_event", name, number, found[1], found[0]))
                if found[2]:
                    out.by_os_record.setdefault(found[2], rid)
            elif raw.strip():
                slow_line(out, name, number, raw)


class _Prefix:
    """The bytes an OS event line starts with up to its time value: its resource and scope
    (checked once by :func:`fast_os_line`) and ``"logRecords":[{"timeUnixNano":"``. A later line
    with the same prefix has the same resource (the OS channel) and a time first; a block with no
    escape and no trace context leaves only the fields to find."""

    TAIL = b'"logRecords":[{"timeUnixNano":"'

    def __init__(self) -> None:
        self.bytes = b""

    def learn(self, raw: bytes) -> None:
        """Take ``raw``'s prefix, when the time is its first log record's first field."""
        at = raw.find(self.TAIL)
        if at >= 0 and raw.find(_TIME) == at + len(self.TAIL) - len(_TIME) - 1:
            head = raw[: at + len(self.TAIL)]
            if _EVENT not in head and _RECORD_ID not in head:
                self.bytes = head

    def read(self, raw: bytes) -> tuple[int, str, str] | None:
        """(time, event name, record id) of a line that starts with the prefix."""
        at = len(self.bytes)
        end = raw.find(b'"', at)
        if end < 0 or not raw.endswith(_END) or raw.find(_TIME, end) >= 0:
            return None  # several log records
        try:
            time = int(raw[at:end])
        except ValueError:
            return None
        return time, _string_at(raw, _EVENT, end), _string_at(raw, _RECORD_ID, end)


_ONE_LOG = b'{"resourceLogs":'
_OS_RESOURCE = b'{"key":"evidence.channel","value":{"stringValue":"os"}}'
_TIME = b'"timeUnixNano":'
_EVENT = b'"eventName":"'
_RECORD_ID = b'{"key":"evidence.record_id","value":{"stringValue":"'
_END = b"}]}]}]}"
"""How a compact request with one log record ends (a torn line, cut while written, does not)."""


def _string_at(raw: bytes, key: bytes, start: int) -> str:
    """The JSON string after the first ``key`` (which ends with the opening quote) at or after
    ``start``, "" when there is none (the caller has ruled out escapes)."""
    i = raw.find(key, start) if start >= 0 else -1
    if i < 0:
        return ""
    i += len(key)
    return raw[i : raw.find(b'"', i)].decode()


def fast_os_line(raw: bytes) -> tuple[int, str, str] | None:
    """(time, event name, host record id) of one OS event line as the file exporter writes it
    (compact OTLP/JSON, one log record, no trace context, no escaped character), read with
    substring searches instead of a decode; None when the line is anything else (then it is
    decoded in full by :func:`slow_line`, which gives the same record).

    A quoted key such as ``"timeUnixNano":`` cannot occur inside a JSON string (its quotes would
    be escaped there, and a line with an escape is not read here), so each search finds the
    field itself.
    """
    if not raw.startswith(_ONE_LOG) or not raw.rstrip().endswith(_END):
        return None  # not one whole log request
    if b"\\" in raw or b'Id"' in raw:
        return None  # an escape, or a trace context (traceId, spanId)
    scope = raw.find(b'"scopeLogs":')
    if raw.find(_OS_RESOURCE, 0, scope) < 0:
        return None  # not the OS channel's resource
    at = raw.find(_TIME, scope)
    if at < 0:
        return None
    at += len(_TIME)
    quoted = raw[at] == 0x22  # '"'
    at += quoted
    end = raw.find(b'"' if quoted else b",", at)
    if end < 0 or raw.find(_TIME, end) >= 0:
        return None  # several log records
    try:
        time = int(raw[at:end])
    except ValueError:
        return None
    source = raw.find(_RECORD_ID)
    if 0 <= source < scope:
        return None  # a resource attribute, not the record's
    return time, _string_at(raw, _EVENT, scope), _string_at(raw, _RECORD_ID, source)


def read_line(out: Records, name: str, number: int, raw: bytes) -> None:
    """One stream line into ``out`` without the block shortcuts (fast path, else in full)."""
    fast = fast_os_line(raw)
    if fast is not None:
        rid = f"{name}:{number}"
        out.records.append(Record(rid, "os_event", name, number, fast[1], fast[0]))
        if fast[2]:
            out.by_os_record.setdefault(fast[2], rid)
        return
    slow_line(out, name, number, raw)


def slow_line(out: Records, name: str, number: int, raw: bytes) -> None:
    """Decode one stream line in full into ``out`` (the reference the fast path agrees with)."""
    base = f"{name}:{number}"
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict) and "resourceSpans" in doc:
        try:
            decoded = json_codec.decode_traces(doc)
        except DecodeError as exc:
            out.records.append(Record(base, "coverage", name, number, f"undecodable: {exc}"))
            return
        for i, span in enumerate(decoded.records):
            _add_span(out, f"{base}.{i}" if i else base, name, number, span)
        if decoded.rejected:
            rid = f"{base}.rejected"
            reason = f"rejected spans: {decoded.error_message}"
            out.records.append(Record(rid, "coverage", name, number, reason))
    elif isinstance(doc, dict) and "resourceLogs" in doc:
        _add_logs(out, base, name, number, doc)
    else:
        out.records.append(Record(base, "coverage", name, number, "not an OTLP/JSON request"))


def _add_span(out: Records, rid: str, name: str, number: int, span: Span) -> None:
    trace_id, span_id = span.trace_id.hex(), span.span_id.hex()
    out.records.append(
        Record(rid, "span", name, number, span.name, span.start_time_unix_nano, trace_id, span_id)
    )
    out.spans.append((rid, span))
    out.by_span_id.setdefault(span_id, rid)
    for k, event in enumerate(span.events):
        out.records.append(
            Record(
                f"{rid}/event:{k}",
                "span_event",
                name,
                number,
                event.name,
                event.time_unix_nano,
                trace_id,
                span_id,
            )
        )


def _add_logs(out: Records, base: str, name: str, number: int, doc: Mapping[str, Any]) -> None:
    i = 0
    for rl in doc.get("resourceLogs") or ():
        is_os = _attr(rl.get("resource", {}).get("attributes"), "evidence.channel") == "os"
        for sl in rl.get("scopeLogs") or ():
            for log in sl.get("logRecords") or ():
                rid = f"{base}.{i}" if i else base
                i += 1
                time = _int(log.get("timeUnixNano"))
                event = str(log.get("eventName") or "")
                out.records.append(
                    Record(
                        rid,
                        "os_event" if is_os else "log",
                        name,
                        number,
                        event,
                        time,
                        str(log.get("traceId") or ""),
                        str(log.get("spanId") or ""),
                    )
                )
                source = _attr(log.get("attributes"), "evidence.record_id")
                if source:
                    out.by_os_record.setdefault(source, rid)
                elif not is_os:
                    _genai_event(out, rid, event, log, (name, number))


def _genai_event(
    out: Records, rid: str, event: str, log: Mapping[str, Any], where: tuple[str, int]
) -> None:
    """Keep a ``gen_ai.*`` event log record that names its span (event name from ``eventName``,
    else the older ``event.name`` attribute); one whose body or attributes cannot be decoded
    leaves a ``coverage`` record instead."""
    name = event or _attr(log.get("attributes"), "event.name") or ""
    span_id = str(log.get("spanId") or "").lower()
    if not name.startswith("gen_ai.") or not span_id:
        return
    try:
        attributes = read_attributes(log.get("attributes"), "attributes")
        body = log.get("body")
        value = None if body is None else read_any_value(body, "body")
    except DecodeError as exc:
        reason = f"{name}: body or attributes not read: {exc}"
        out.records.append(Record(f"{rid}/messages", "coverage", *where, reason))
        return
    out.genai_events.setdefault(span_id, []).append(GenAIEvent(rid, name, attributes, value))


def _attr(attributes: Any, key: str) -> str | None:
    for kv in attributes or ():
        if kv.get("key") == key:
            value = kv.get("value") or {}
            found = value.get("stringValue")
            return found if isinstance(found, str) else None
    return None


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
