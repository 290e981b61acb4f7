"""The messages a model call or an agent span carries, read in every convention that records them.

Each instrumentation writes a model's input and output messages its own way; one function per
convention reads them into the same :class:`Message` (``docs/review.md``, *Messages*):

================  ===========================================================================
convention        where the messages are
================  ===========================================================================
GenAI             ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON string or
                  structured value: ``role`` and ``parts``, or the older flat ``content``)
OpenInference     ``llm.input_messages.<i>.message.*`` / ``llm.output_messages.<i>.message.*``
                  (``role``, ``content`` or ``contents.<j>.message_content.text``,
                  ``tool_calls.<j>.tool_call.id``, ``tool_call_id``); without output messages,
                  a ``text/plain`` ``output.value`` is the assistant's text
OpenLLMetry       ``gen_ai.prompt.<i>.*`` / ``gen_ai.completion.<i>.*`` (``role``, ``content``,
                  ``tool_calls.<j>.id``, ``tool_call_id``)
GenAI events      span events and log records of the span: ``gen_ai.choice`` and
                  ``gen_ai.<role>.message`` (their body, else the same fields as attributes,
                  ``message`` and ``gen_ai.event.content`` JSON decoded), the older
                  ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` (``gen_ai.prompt`` /
                  ``gen_ai.completion``: a JSON message list, else the text itself) and
                  ``gen_ai.client.inference.operation.details`` (the GenAI attributes)
================  ===========================================================================

A text an instrumentation replaced by a placeholder (OpenInference's ``__REDACTED__``) is no text.
Nothing here guesses: a value of another shape is not read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from otel_bridge.model import AnyValue, Attributes, Span

REDACTED = frozenset({"__REDACTED__"})
"""Placeholders instrumentations write for hidden text."""

LOOKED_FOR = (
    "GenAI gen_ai.output.messages, the GenAI events gen_ai.choice and gen_ai.content.completion "
    "(span events or log records), OpenInference llm.output_messages and output.value, "
    "OpenLLMetry gen_ai.completion.<i>.content"
)
"""The conventions' output attributes the review looks for, in words (``why_no_claims``)."""


@dataclass(frozen=True, slots=True)
class Message:
    """One message: its role, text, the tool calls it asks for and the call it answers."""

    role: str
    text: str
    calls: tuple[str, ...] = ()
    response_id: str = ""
    output: bool = False
    """From the model's (or agent's) output, rather than the history it was given."""
    record: str = ""
    """The record it was read from when that is not the span: a span event or a log record."""


class GenAIEvent(msgspec.Struct, frozen=True, gc=False):
    """A GenAI event of a span: a span event or a log record carrying the span's context."""

    record: str
    name: str
    attributes: Attributes
    body: AnyValue = None


def span_messages(span: Span, rid: str, logs: Sequence[GenAIEvent] = ()) -> list[Message]:
    """Every convention's messages of ``span`` (record id ``rid``) and its log events."""
    events = [
        GenAIEvent(f"{rid}/event:{k}", e.name, e.attributes)
        for k, e in enumerate(span.events)
        if e.name.startswith("gen_ai.")
    ]
    return (
        genai(span.attributes)
        + openinference(span.attributes)
        + openllmetry(span.attributes)
        + genai_events([*events, *logs])
    )


# -- GenAI semantic conventions ---------------------------------------------------------------


def genai(a: Attributes, record: str = "") -> list[Message]:
    """``gen_ai.input.messages`` and ``gen_ai.output.messages``."""
    out = [_genai_message(m, False, record) for m in _list(a.get("gen_ai.input.messages"))]
    out += [_genai_message(m, True, record) for m in _list(a.get("gen_ai.output.messages"))]
    return [m for m in out if m is not None]


def _genai_message(m: object, output: bool, record: str) -> Message | None:
    if not isinstance(m, Mapping):
        return None
    texts = [_clean(m.get("content"))]  # the older flat form
    calls: list[str] = []
    response_id = ""
    for part in _seq(m.get("parts")):
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(_clean(part.get("content")))
        elif kind == "tool_call":
            calls.append(str(part.get("id") or ""))
        elif kind == "tool_call_response":
            response_id = str(part.get("id") or "")
            response = part.get("response")
            texts.append(_clean(response if isinstance(response, str) else _json(response)))
    role = str(m.get("role") or "")
    return Message(role, _join(texts), tuple(c for c in calls if c), response_id, output, record)


# -- OpenInference ------------------------------------------------------------------------------


def openinference(a: Attributes) -> list[Message]:
    """``llm.input_messages.<i>.message.*``, ``llm.output_messages.<i>.message.*``; an LLM or
    AGENT span's ``text/plain`` ``output.value`` when it has no output message."""
    out = _oi_messages(a, "llm.input_messages.", False)
    outputs = _oi_messages(a, "llm.output_messages.", True)
    if not outputs and a.get("openinference.span.kind") in ("LLM", "AGENT"):
        value = _clean(a.get("output.value"))
        if value and a.get("output.mime_type", "text/plain") == "text/plain":
            outputs = [Message("assistant", value, output=True)]
    return out + outputs


def _oi_messages(a: Attributes, prefix: str, output: bool) -> list[Message]:
    by_index = _indexed(a, prefix)
    out = []
    for _, f in sorted(by_index.items()):
        texts = [_clean(f.get("message.content"))]
        contents = _indexed(f, "message.contents.")
        texts += [
            _clean(c.get("message_content.text"))
            for _, c in sorted(contents.items())
            if c.get("message_content.type", "text") == "text"
        ]
        calls = _indexed(f, "message.tool_calls.")
        ids = (str(c.get("tool_call.id") or "") for _, c in sorted(calls.items()))
        role = str(f.get("message.role") or "")
        response_id = str(f.get("message.tool_call_id") or "")
        out.append(Message(role, _join(texts), tuple(i for i in ids if i), response_id, output))
    return out


# -- OpenLLMetry --------------------------------------------------------------------------------


def openllmetry(a: Attributes) -> list[Message]:
    """OpenLLMetry's flattened ``gen_ai.prompt.<i>.*`` and ``gen_ai.completion.<i>.*``."""
    out = []
    for prefix, output in (("gen_ai.prompt.", False), ("gen_ai.completion.", True)):
        for _, f in sorted(_indexed(a, prefix).items()):
            calls = _indexed(f, "tool_calls.")
            ids = (str(c.get("id") or "") for _, c in sorted(calls.items()))
            text = _clean(_as_text(_content(f.get("content"))))
            role, response_id = str(f.get("role") or ""), str(f.get("tool_call_id") or "")
            out.append(Message(role, text, tuple(i for i in ids if i), response_id, output))
    return out


# -- GenAI events (span events and log records) -----------------------------------------------

_EVENT_ROLES = {
    "gen_ai.user.message": "user",
    "gen_ai.system.message": "system",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
    "gen_ai.choice": "assistant",
}


def genai_events(events: Iterable[GenAIEvent]) -> list[Message]:
    """Messages of the GenAI events of one span, in order."""
    out: list[Message] = []
    for e in events:
        if e.name == "gen_ai.client.inference.operation.details":
            out += genai(e.attributes, e.record)
        elif e.name in ("gen_ai.content.prompt", "gen_ai.content.completion"):
            output = e.name == "gen_ai.content.completion"
            out += _legacy_content(e, output)
        elif e.name in _EVENT_ROLES:
            out.append(_event_message(e))
    return out


def _legacy_content(e: GenAIEvent, output: bool) -> list[Message]:
    """``gen_ai.content.prompt`` / ``.completion``: a JSON list of ``{role, content}``, or the
    text itself (what the attribute holds in the conventions' example is not JSON)."""
    value = e.attributes.get("gen_ai.completion" if output else "gen_ai.prompt")
    listed = [m for m in _list(value) if isinstance(m, Mapping)]
    if not listed:
        text = _clean(value)
        return [Message("assistant" if output else "user", text, (), "", output, e.record)]
    return [
        Message(
            str(m.get("role") or ""), _clean(_as_text(m.get("content"))), (), "", output, e.record
        )
        for m in listed
    ]


def _event_message(e: GenAIEvent) -> Message:
    """``gen_ai.choice`` / ``gen_ai.<role>.message``: the body, else the attributes (with a JSON
    ``gen_ai.event.content`` holding the body)."""
    payload: Mapping[str, Any] = e.body if isinstance(e.body, Mapping) else e.attributes
    wrapped = _decoded(payload.get("gen_ai.event.content"))
    if isinstance(wrapped, Mapping):
        payload = wrapped
    message: Any = _decoded(payload.get("message"))
    if e.name == "gen_ai.choice" and isinstance(message, Mapping):
        fields: Mapping[str, Any] = message
    elif e.name == "gen_ai.choice" and isinstance(message, list | tuple):
        fields = {"content": message}  # content blocks
    else:
        fields = payload
    calls = [*_seq(fields.get("tool_calls")), *_seq(payload.get("tool_calls"))]
    ids = (str(c.get("id") or "") for c in calls if isinstance(c, Mapping))
    role = str(fields.get("role") or _EVENT_ROLES[e.name])
    text = _clean(_as_text(_content(fields.get("content"))))
    response_id = str(payload.get("id") or "") if role == "tool" else ""
    return Message(
        role,
        text,
        tuple(dict.fromkeys(i for i in ids if i)),
        response_id,
        e.name == "gen_ai.choice",
        e.record,
    )


# -- values -------------------------------------------------------------------------------------


def _indexed(a: Mapping[str, Any], prefix: str) -> dict[int, dict[str, Any]]:
    """``<prefix><i>.<rest>`` keys of ``a`` grouped by ``i``: {i: {rest: value}}."""
    out: dict[int, dict[str, Any]] = {}
    for key, value in a.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isdigit() and rest:
            out.setdefault(int(index), {})[rest] = value
    return out


def _decoded(value: object) -> object:
    """A JSON string decoded (a structured value as it is; a string that is not JSON as it is)."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _list(value: object) -> Sequence[object]:
    """A message list: a JSON array string or a structured array; () otherwise."""
    return _seq(_decoded(value))


def _seq(value: object) -> Sequence[object]:
    return value if isinstance(value, list | tuple) else ()


def _content(value: object) -> object:
    """A content value that is a JSON array of parts or blocks, decoded; anything else as is."""
    decoded = _decoded(value)
    if isinstance(decoded, list) and decoded and all(isinstance(p, Mapping) for p in decoded):
        return decoded
    return value


def _as_text(value: object) -> str:
    """Text of a content value: a string; the text of parts or blocks (``text``, a text
    ``content``, or the ``parts`` of a content object); other values as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return _join(_as_text(_part_text(p)) for p in value)
    if isinstance(value, Mapping):
        if "parts" in value:
            return _as_text(value["parts"])
        return _part_text(value)
    return _json(value)


def _json(value: object) -> str:
    return "" if value is None else json.dumps(value, default=str, sort_keys=True)


def _part_text(p: object) -> str:
    if isinstance(p, str):
        return p
    if not isinstance(p, Mapping) or p.get("type", "text") != "text":
        return ""
    found = p.get("text", p.get("content"))
    return found if isinstance(found, str) else ""


def _clean(value: object) -> str:
    return value if isinstance(value, str) and value not in REDACTED else ""


def _join(texts: Iterable[str]) -> str:
    return "\n".join(t for t in texts if t)
