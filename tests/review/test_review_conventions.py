"""The review reads the final answer in every convention's shape (``otel_bridge.review.messages``).

One scripted session (a patch, a passing test run, the answer "I patched mod.py and `pytest -q`
passes.") whose final model call records the answer as each convention's documentation shows it:
the GenAI ``gen_ai.output.messages``; OpenInference's ``llm.output_messages.<i>.message.*``
(``content`` and ``contents.<j>.message_content.*``, ``spec/semantic_conventions.md``) and an
AGENT span's ``text/plain`` ``output.value``; OpenLLMetry's ``gen_ai.completion.<i>.*`` on a span
that states only ``llm.request.type``; the GenAI span events of semantic conventions 1.26
(``gen_ai.content.completion`` with ``gen_ai.completion``) and a ``gen_ai.choice`` log record of
1.28-1.36 (its body ``{index, finish_reason, message}``). Each gives the same supported claim;
an answer hidden by the instrumentation gives none, and the review says which conventions it
looked for.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from review_support import RunBuilder, Session

from otel_bridge.model import Span, SpanEvent
from otel_bridge.review import build_review
from otel_bridge.review.claims import NO_TEXT
from otel_bridge.review.messages import LOOKED_FOR

TRACE = "33" * 16
ANSWER = "I patched mod.py and `pytest -q` passes."
SESSION = Session(
    trace=TRACE,
    task="Patch mod.py, then test it.",
    answer=ANSWER,
    commands=[
        (["tee", "mod.py"], 0, [], ["/w/mod.py"]),
        (["pytest", "-q"], 0, ["/w/mod.py"], []),
    ],
)

Shape = Callable[[Span], tuple[Span, list[dict[str, Any]]]]
"""The final chat span rewritten in one convention, and the log records it comes with."""


def _attrs(span: Span, **attrs: Any) -> Span:
    """``span`` with only its name-independent attributes replaced by ``attrs``."""
    return msgspec.structs.replace(span, attributes=attrs)


def _openinference(span: Span) -> tuple[Span, list[dict[str, Any]]]:
    return _attrs(
        span,
        **{
            "openinference.span.kind": "LLM",
            "llm.model_name": "m",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": SESSION.task,
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": ANSWER,
        },
    ), []


def _openinference_contents(span: Span) -> tuple[Span, list[dict[str, Any]]]:
    return _attrs(
        span,
        **{
            "openinference.span.kind": "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.contents.0.message_content.type": "text",
            "llm.output_messages.0.message.contents.0.message_content.text": ANSWER,
        },
    ), []


def _openinference_agent_output(span: Span) -> tuple[Span, list[dict[str, Any]]]:
    attrs = {"openinference.span.kind": "AGENT", "output.value": ANSWER}
    return _attrs(span, **attrs, **{"output.mime_type": "text/plain"}), []


def _openllmetry(span: Span) -> tuple[Span, list[dict[str, Any]]]:
    return _attrs(
        span,
        **{
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "m",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": SESSION.task,
            "gen_ai.completion.0.finish_reason": "stop",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": ANSWER,
        },
    ), []


def _span_event_1_26(span: Span) -> tuple[Span, list[dict[str, Any]]]:
    completion = json.dumps([{"role": "assistant", "content": ANSWER}])
    event = SpanEvent(
        time_unix_nano=span.end_time_unix_nano,
        name="gen_ai.content.completion",
        attributes={"gen_ai.completion": completion},
    )
    chat = _attrs(span, **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"})
    return msgspec.structs.replace(chat, events=(event,)), []


def _choice_log(span: Span) -> tuple[Span, list[dict[str, Any]]]:
    body = {
        "kvlistValue": {
            "values": [
                {"key": "index", "value": {"intValue": "0"}},
                {"key": "finish_reason", "value": {"stringValue": "stop"}},
                {
                    "key": "message",
                    "value": {
                        "kvlistValue": {
                            "values": [{"key": "content", "value": {"stringValue": ANSWER}}]
                        }
                    },
                },
            ]
        }
    }
    log = {
        "timeUnixNano": str(span.end_time_unix_nano),
        "eventName": "gen_ai.choice",
        "traceId": span.trace_id.hex(),
        "spanId": span.span_id.hex(),
        "attributes": [{"key": "gen_ai.system", "value": {"stringValue": "openai"}}],
        "body": body,
    }
    chat = _attrs(span, **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"})
    return chat, [log]


SHAPES: dict[str, Shape] = {
    "genai": lambda span: (span, []),
    "openinference": _openinference,
    "openinference_contents": _openinference_contents,
    "openinference_agent_output_value": _openinference_agent_output,
    "openllmetry": _openllmetry,
    "genai_span_event_1_26": _span_event_1_26,
    "genai_choice_log_record": _choice_log,
}


def _review(tmp_path: Path, shape: Shape) -> tuple[dict[str, Any], int]:
    """The review of the session with its final chat span in ``shape``; that span's line."""
    builder = RunBuilder()
    builder.add(SESSION, first_span=1000)
    final, logs = shape(builder.spans[-1])
    builder.spans[-1] = final
    extra = ""
    if logs:
        scope = {"scope": {"name": "test"}, "logRecords": logs}
        extra = json.dumps({"resourceLogs": [{"resource": {}, "scopeLogs": [scope]}]})
    run = builder.write(tmp_path / "run", extra_line=extra)
    return build_review(str(run))[0], len(builder.spans)


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_final_answer_is_read_in_each_convention(tmp_path: Path, name: str) -> None:
    doc, line = _review(tmp_path, SHAPES[name])
    assert {c["text"]: c["status"] for c in doc["claims"]} == {ANSWER: "supported"}, doc["claims"]
    (claim,) = doc["claims"]
    message = next(e for e in doc["evidence"] if e["id"] == claim["source"])
    assert message["type"] == "assistant_message"
    sources = {
        "genai_span_event_1_26": [f"sem.jsonl:{line}", f"sem.jsonl:{line}/event:0"],
        "genai_choice_log_record": [f"sem.jsonl:{line}", f"sem.jsonl:{line + 1}"],
    }
    assert message["records"] == sources.get(name, [f"sem.jsonl:{line}"])


def test_a_hidden_answer_gives_no_claim_and_names_the_conventions(tmp_path: Path) -> None:
    """OpenInference's ``hide_output_text`` writes ``__REDACTED__``: no text, and why."""

    def redacted(span: Span) -> tuple[Span, list[dict[str, Any]]]:
        attrs = {
            "openinference.span.kind": "LLM",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "__REDACTED__",
        }
        return _attrs(span, **attrs), []

    doc, _ = _review(tmp_path, redacted)
    assert doc["claims"] == []
    (session,) = doc["sessions"]
    assert session["no_claims"] == NO_TEXT
    for convention in ("llm.output_messages", "gen_ai.completion.<i>.content", "gen_ai.choice"):
        assert convention in LOOKED_FOR
