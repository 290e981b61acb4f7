"""Coding-agent telemetry read into review sessions: Claude Code, Codex CLI and Gemini CLI OTel
log events, and Codex session transcripts (rollout JSONL).

None of these agents emits GenAI spans by default: Claude Code exports *events* as OTLP log
records (``claude_code.user_prompt``, ``claude_code.tool_decision``, ``claude_code.tool_result``,
``claude_code.api_request``, ``claude_code.api_error``), Codex CLI likewise (``codex.*``), Gemini
CLI as ``gemini_cli.user_prompt``, ``gemini_cli.tool_call``, ``gemini_cli.api_request``,
``gemini_cli.api_response`` and ``gemini_cli.api_error`` (its ``session.id`` on each), and
Codex writes the whole conversation to a rollout file. This module turns those records into
:class:`AgentEvent` values (one per record, with the record id as its source pointer) and then
into the review's evidence nodes of one :class:`~otel_bridge.review.evidence.Session` per agent
session id (Claude Code ``session.id``, Codex ``conversation.id`` / the rollout's
``session_meta.id``).

What is read, and what is not, is the table in ``docs/review.md`` ("Coding agents"); a record of
these agents that is not interpreted becomes a ``coverage`` record. Nothing is invented: a prompt
that the agent did not log (its text is opt-in in both agents) stays ``null``; a tool call's
window is the one the events state (end = the result's time, start = end - ``duration_ms``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from otel_bridge.identity import iso_to_ms
from otel_bridge.review.records import Record, Records

PREFIXES = ("claude_code.", "codex.", "gemini_cli.")
"""Event-name prefixes of the agents' OTel events."""

MARKERS = (b"claude", b"codex", b"gemini_cli")
"""A stream line with none of these bytes holds none of the agents' events (not parsed)."""

INTERPRETED = frozenset(
    {
        "user_prompt",
        "tool_decision",
        "tool_result",
        "api_request",
        "api_error",
        "conversation_starts",
        "tool_call",
        "api_response",
    }
)
"""OTel event kinds (name without the agent prefix) turned into evidence."""

GEMINI_ONLY = frozenset({"tool_call", "api_response"})
"""Kinds read with Gemini CLI's meaning, for Gemini CLI's events only (another agent's event of
that name is not interpreted)."""

WINDOW_SLACK_NS = 2_000_000
"""A tool call's stated window is widened by 2 ms at its start: ``duration_ms`` is truncated to
whole milliseconds and process start times are read in whole milliseconds."""


@dataclass(slots=True)
class AgentEvent:
    """One interpreted record of a coding agent."""

    record: str
    """The review record id (= source pointer) it came from."""
    agent: str
    """``claude_code``, ``codex`` or ``gemini_cli``."""
    kind: str
    """OTel event kind (``tool_result``...) or transcript item (``message``,
    ``function_call``, ``function_call_output``, ``local_shell_call``)."""
    session: str
    time: int | None
    attrs: dict[str, Any] = field(default_factory=dict)


def _attrs(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs or ():
        value = kv.get("value") or {}
        for key in ("stringValue", "boolValue", "intValue", "doubleValue"):
            if key in value:
                out[str(kv.get("key"))] = value[key]
                break
    return out


def _event_name(log: Mapping[str, Any], attrs: Mapping[str, Any]) -> str:
    """The full event name: ``eventName``, else the ``event.name`` attribute, else the body.

    Claude Code puts the short name (``tool_result``) in ``event.name`` and the full one in the
    body; Codex and Gemini CLI put the full one (``codex.tool_result``,
    ``gemini_cli.tool_call``) in ``event.name``.
    """
    body = (log.get("body") or {}).get("stringValue")
    for candidate in (log.get("eventName"), attrs.get("event.name"), body):
        if isinstance(candidate, str) and candidate.startswith(PREFIXES):
            return candidate
    short = attrs.get("event.name")
    service = str(attrs.get("service.name") or "")
    if isinstance(short, str) and short in INTERPRETED and "claude" in service:
        return f"claude_code.{short}"
    return ""


def events_from_streams(run_dir: str, records: Records) -> list[AgentEvent]:
    """The coding-agent events of the run's OTLP/JSON log streams.

    Record ids are counted exactly as :mod:`otel_bridge.review.records` counts them (one per
    log record of a line), so each event points at its review record. Records of these agents
    that are not interpreted become ``coverage`` records.
    """
    out: list[AgentEvent] = []
    seen: dict[tuple[str, str, int | None, bytes], str] = {}  # an event -> its first record
    for name in sorted({r.file for r in records.records if r.type == "log"}):
        with open(os.path.join(run_dir, name), "rb") as f:
            for number, raw in enumerate(f, 1):
                if not any(marker in raw for marker in MARKERS):
                    continue
                try:
                    doc = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(doc, dict) and "resourceLogs" in doc:
                    out += _line_events(records, (name, number), doc, seen)
    return out


def _log_records(doc: Mapping[str, Any]) -> Iterator[tuple[dict[str, Any], Mapping[str, Any]]]:
    for rl in doc.get("resourceLogs") or ():
        resource = _attrs((rl.get("resource") or {}).get("attributes"))
        for sl in rl.get("scopeLogs") or ():
            for log in sl.get("logRecords") or ():
                yield resource, log


def _line_events(
    records: Records,
    where: tuple[str, int],
    doc: Mapping[str, Any],
    seen: dict[tuple[str, str, int | None, bytes], str],
) -> list[AgentEvent]:
    """The events of one stream line; an event equal to one ``seen`` before (the same record
    sent again: a retry the ``file`` exporter wrote twice) is read once, and its copy is a
    coverage record."""
    name, number = where
    base = f"{name}:{number}"
    out: list[AgentEvent] = []
    for i, (resource, log) in enumerate(_log_records(doc)):
        rid = f"{base}.{i}" if i else base
        attrs = _attrs(log.get("attributes"))
        full = _event_name(log, resource | attrs)
        if not full:
            continue
        agent, kind = full.split(".", 1)
        session = str(
            attrs.get("session.id")
            or attrs.get("conversation.id")
            or resource.get("session.id")
            or ""
        )
        if kind in GEMINI_ONLY and agent != "gemini_cli":
            kind = ""  # another agent's event of that name: its meaning is not Gemini CLI's
        if kind not in INTERPRETED or not session:
            why = "no session id" if session == "" else "event not interpreted"
            records.records.append(
                Record(f"{rid}/import", "coverage", name, number, f"{full}: {why}")
            )
            continue
        time = _event_time(_int(log.get("timeUnixNano")), _iso_ns(attrs.get("event.timestamp")))
        copy = (full, session, time, orjson.dumps(attrs, option=orjson.OPT_SORT_KEYS))
        first = seen.setdefault(copy, rid)
        if first != rid:
            what = f"{full}: a copy of {first} (the same event sent again), read once"
            records.records.append(Record(f"{rid}/import", "coverage", name, number, what))
            continue
        if agent == "gemini_cli" and kind == "api_response" and _unattributed_text(attrs):
            records.records.append(
                Record(
                    f"{rid}/import",
                    "coverage",
                    name,
                    number,
                    f"{full}: response_text not read as the agent's message: no role says the "
                    "agent's own model call made it (Gemini CLI before role was logged also logs "
                    "its utility and tool-internal model calls)",
                )
            )
        pid = resource.get("process.pid")
        attrs["_pid"] = int(pid) if isinstance(pid, int | str) and str(pid).isdigit() else None
        attrs["_log_id"] = log_record_id(log)
        out.append(AgentEvent(rid, agent, kind, session, time, attrs))
    return out


def _event_time(record: int | None, stated: int | None) -> int | None:
    """When an event happened: the log record's time (ns), unless the event's own
    ``event.timestamp`` (whole ms) is more than a millisecond earlier: an event the agent
    buffered before its telemetry started (Gemini CLI) was stamped when it was sent."""
    if record is None:
        return stated
    if stated is not None and record > stated + 1_000_000:
        return stated
    return record


def _unattributed_text(attrs: Mapping[str, Any]) -> bool:
    """A Gemini CLI response with text and no ``role``: whose model call made it is unknown."""
    return bool(attrs.get("response_text")) and not attrs.get("role")


def gemini_response_text(raw: Any) -> str | None:
    """The model's text in a Gemini CLI ``api_response``'s ``response_text``: the text parts of
    its candidates (the JSON of a response, or of the list of a stream's responses, as Gemini
    CLI logs them since mid-2025; thought parts and function calls are not text); a value that is
    not JSON is the text itself (as versions before mid-2025 logged it; those state no ``role``,
    so their responses are not read as the agent's). None when there is none."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw  # not JSON: the text itself
    responses = doc if isinstance(doc, list) else [doc]
    texts: list[str] = []
    for response in responses:
        candidates = response.get("candidates") if isinstance(response, dict) else None
        for candidate in candidates if isinstance(candidates, list) else ():
            content = candidate.get("content") if isinstance(candidate, dict) else None
            parts = content.get("parts") if isinstance(content, dict) else None
            for part in parts if isinstance(parts, list) else ():
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str) and not part.get("thought"):  # a thought is not said
                    texts.append(text)
    said = "".join(texts)
    return said if said.strip() else None


def log_record_id(log: Mapping[str, Any]) -> str:
    """The record id ``normalize`` gives an OTLP/JSON log record it does not interpret (its
    coverage record's ``source.record_id``: ``log:<time>:<trace>:<span>:<event name>``)."""
    span = str(log.get("spanId") or "").lower()
    ids = f"{str(log.get('traceId') or '').lower()}:{span}" if span else ""
    return f"log:{_int(log.get('timeUnixNano')) or 0}:{ids}:{log.get('eventName') or ''}"


def _int(value: Any) -> int | None:
    try:
        return int(value) or None
    except (TypeError, ValueError):
        return None


def _iso_ns(value: Any) -> int | None:
    ms = iso_to_ms(value) if isinstance(value, str) else None
    return None if ms is None else ms * 1_000_000


TRANSCRIPT_ITEMS = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "local_shell_call",
        "custom_tool_call",
        "custom_tool_call_output",
    }
)
"""``response_item`` payload types read from a rollout file."""


def events_from_transcript(path: str, records: Records) -> list[AgentEvent]:
    """The events of a Codex rollout file; every line becomes a review record (``log``, id
    ``<file name>:<line>``); lines not interpreted (``event_msg``, ``turn_context``, reasoning,
    anything unknown) become ``coverage`` records with their type."""
    name = os.path.basename(path)
    session = ""
    out: list[AgentEvent] = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            rid = f"{name}:{number}"
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                line = None
            if not isinstance(line, dict):
                records.records.append(Record(rid, "coverage", name, number, "not JSON"))
                continue
            found = line.get("payload")
            payload: dict[str, Any] = found if isinstance(found, dict) else {}
            kind, item = str(line.get("type") or ""), str(payload.get("type") or "")
            time = _iso_ns(line.get("timestamp"))
            if kind == "session_meta":
                session = str(payload.get("id") or session)
                records.records.append(Record(rid, "log", name, number, kind, time))
            elif kind == "response_item" and item in TRANSCRIPT_ITEMS and session:
                records.records.append(Record(rid, "log", name, number, item, time))
                out.append(AgentEvent(rid, "codex", item, session, time, dict(payload)))
            else:
                label = f"{kind}.{item}" if item else kind or "unknown"
                records.records.append(Record(rid, "coverage", name, number, label, time))
    return out


def tool_output(raw: Any) -> tuple[str | None, int | None]:
    """(text, exit code) of a ``function_call_output`` ``output``: Codex stores a JSON string
    ``{"output": ..., "metadata": {"exit_code": ...}}`` or plain text."""
    if isinstance(raw, dict):
        raw = raw.get("content") if "content" in raw else json.dumps(raw)
    if not isinstance(raw, str):
        return None, None
    try:
        loaded = json.loads(raw)
    except ValueError:
        return raw, None
    if isinstance(loaded, dict) and "output" in loaded:
        meta = loaded.get("metadata")
        code = meta.get("exit_code") if isinstance(meta, dict) else None
        return str(loaded["output"]), code if isinstance(code, int) else None
    return raw, None


def message_text(payload: Mapping[str, Any]) -> str:
    """The text parts of a rollout ``message`` item."""
    parts = payload.get("content")
    texts: list[str] = []
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts)
