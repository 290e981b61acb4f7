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
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from otel_bridge.errors import DecodeError
from otel_bridge.model import Span
from otel_bridge.otlp import json_codec

SKIPPED_STREAMS = frozenset({"correlated.jsonl", "review-records.jsonl"})
"""Files that hold derived observations or the review's own index, not source records."""


class Record(NamedTuple):
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
            for number, raw in enumerate(f, start=1):
                if raw.strip():
                    _read_line(out, name, number, raw)
    return out


_ONE_LOG = re.compile(rb'^\{"resourceLogs":')
_OS_RESOURCE = b'{"key":"evidence.channel","value":{"stringValue":"os"}}'
_TIME = re.compile(rb'"timeUnixNano":"?(\d+)')
_EVENT = re.compile(rb'"eventName":"([^"\\]*)"')
_RECORD_ID = re.compile(rb'\{"key":"evidence\.record_id","value":\{"stringValue":"([^"\\]*)"\}')

_WRITER_ORDER = re.compile(
    rb'"timeUnixNano":"(\d+)".*?\{"key":"evidence\.record_id","value":\{"stringValue":"([^"\\]*)"\}'
    rb'.*"eventName":"([^"\\]*)"'
)


def _fast_os_line(out: Records, name: str, number: int, raw: bytes) -> bool:
    """One OS event per line as the file exporter writes it (compact OTLP/JSON): read its time,
    event name and record id without decoding the whole line. False when the line is anything
    else (then it is decoded in full)."""
    if not _ONE_LOG.match(raw) or raw.count(b'"timeUnixNano"') != 1 or _OS_RESOURCE not in raw:
        return False
    rid = f"{name}:{number}"
    whole = _WRITER_ORDER.search(raw)
    if whole is not None:  # the host receiver's own field order: one pass
        time, source, label = int(whole.group(1)), whole.group(2).decode(), whole.group(3).decode()
    else:
        found_time, event = _TIME.search(raw), _EVENT.search(raw)
        if found_time is None:
            return False
        found = _RECORD_ID.search(raw)
        time, label = int(found_time.group(1)), event.group(1).decode() if event else ""
        source = found.group(1).decode() if found is not None else ""
    out.records.append(Record(rid, "os_event", name, number, label, time))
    if source:
        out.by_os_record.setdefault(source, rid)
    return True


def _read_line(out: Records, name: str, number: int, raw: bytes) -> None:
    if _fast_os_line(out, name, number, raw):
        return
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
