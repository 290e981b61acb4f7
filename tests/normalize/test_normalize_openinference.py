"""OpenInference spans (AGENT/TOOL/LLM/CHAIN...), recorded with the real OpenTelemetry SDK."""

from __future__ import annotations

import json

import pytest

pytest.importorskip(
    "openinference.semconv.trace",
    reason="needs the OpenInference semantic conventions (the examples extra)",
)

from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from otel_span_helpers import convert, sdk_tracer

from otel_bridge.model import Batch, EntityKind, Observation, RelationKind, Span
from otel_bridge.processors.normalize import Normalizer

KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND


def _langgraph_trace() -> tuple[Span, ...]:
    """The shape LangGraph's OpenInference instrumentation produces for a ReAct agent."""
    with sdk_tracer({"service.name": "lg"}, scope="openinference.instrumentation.langchain") as (
        tracer,
        exporter,
    ):
        with tracer.start_as_current_span(
            "LangGraph",
            attributes={KIND: OpenInferenceSpanKindValues.CHAIN.value, "session.id": "thread-9"},
        ):
            with (
                tracer.start_as_current_span(
                    "agent",
                    attributes={KIND: "CHAIN", SpanAttributes.GRAPH_NODE_ID: "agent"},
                ),
                tracer.start_as_current_span(
                    "ChatOpenAI",
                    attributes={
                        KIND: "LLM",
                        SpanAttributes.LLM_MODEL_NAME: "gpt-4o-mini",
                        SpanAttributes.LLM_PROVIDER: "openai",
                    },
                ),
            ):
                pass
            with (
                tracer.start_as_current_span(
                    "tools", attributes={KIND: "CHAIN", SpanAttributes.GRAPH_NODE_ID: "tools"}
                ),
                tracer.start_as_current_span(
                    "run_shell_command",
                    attributes={
                        KIND: "TOOL",
                        SpanAttributes.TOOL_NAME: "run_shell_command",
                        SpanAttributes.INPUT_VALUE: json.dumps({"command": "git status"}),
                        SpanAttributes.INPUT_MIME_TYPE: "application/json",
                        SpanAttributes.TOOL_PARAMETERS: json.dumps(
                            {"type": "object", "properties": {"command": {"type": "string"}}}
                        ),
                    },
                ),
            ):
                pass
        return convert(exporter.get_finished_spans())


def _agent_trace() -> tuple[Span, ...]:
    with sdk_tracer({"service.name": "crew"}) as (tracer, exporter):
        with tracer.start_as_current_span(
            "Researcher", attributes={KIND: "AGENT", SpanAttributes.AGENT_NAME: "researcher"}
        ):
            with tracer.start_as_current_span(
                "search", attributes={KIND: "TOOL", SpanAttributes.TOOL_NAME: "web_search"}
            ):
                pass
            with tracer.start_as_current_span(
                "embed",
                attributes={KIND: "EMBEDDING", "embedding.model_name": "text-embedding-3-small"},
            ):
                pass
            with tracer.start_as_current_span("retrieve", attributes={KIND: "RETRIEVER"}):
                pass
        return convert(exporter.get_finished_spans())


def _by_relation(obs: tuple[Observation, ...], rel: RelationKind) -> set[tuple[str, str]]:
    return {(o.subject.label, o.object.label) for o in obs if o.relation is rel and o.object}


def test_openinference_agent_invokes_tool_and_requests_embedding_model() -> None:
    """AGENT -> TOOL gives `invoked`; EMBEDDING under the agent gives `requested`."""
    out = Normalizer()(Batch(spans=_agent_trace()))
    assert _by_relation(out.observations, RelationKind.INVOKED) == {("researcher", "web_search")}
    assert _by_relation(out.observations, RelationKind.REQUESTED) == {
        ("researcher", "text-embedding-3-small")
    }


def test_retriever_span_is_a_plain_span_under_the_agent() -> None:
    """A RETRIEVER span is a plain span linked child_of its agent."""
    out = Normalizer()(Batch(spans=_agent_trace()))
    assert ("retrieve", "researcher") in _by_relation(out.observations, RelationKind.CHILD_OF)


def test_langgraph_tool_without_agent_stays_connected() -> None:
    """A TOOL under CHAIN nodes with no agent ancestor is child_of its graph node span."""
    out = Normalizer()(Batch(spans=_langgraph_trace()))
    child_of = _by_relation(out.observations, RelationKind.CHILD_OF)
    assert ("run_shell_command", "tools") in child_of
    assert ("agent", "LangGraph") in child_of
    assert ("tools", "LangGraph") in child_of
    assert not _by_relation(out.observations, RelationKind.INVOKED)


def test_langgraph_llm_is_requested_by_its_graph_node() -> None:
    """An LLM span with no agent/tool ancestor is requested by the nearest span."""
    out = Normalizer()(Batch(spans=_langgraph_trace()))
    assert _by_relation(out.observations, RelationKind.REQUESTED) == {("agent", "gpt-4o-mini")}
    model = next(o.object for o in out.observations if o.relation is RelationKind.REQUESTED)
    assert model is not None
    assert model.id == "model:openai:gpt-4o-mini"


def test_openinference_json_input_declares_command() -> None:
    """input.value with a JSON mime type and one `command` field declares the command."""
    out = Normalizer()(Batch(spans=_langgraph_trace()))
    decls = [o for o in out.observations if o.relation is RelationKind.DECLARED_COMMAND]
    assert [o.object.attrs["command.line"] for o in decls if o.object] == ["git status"]


def test_graph_node_and_session_ids_are_kept() -> None:
    """graph.node.id stays on the CHAIN span's entity (a typed ``chain`` node); a root session.id
    gives `part_of` a session."""
    out = Normalizer()(Batch(spans=_langgraph_trace()))
    node = next(o.subject for o in out.observations if o.subject.label == "tools")
    assert node.kind is EntityKind.CHAIN
    assert node.attrs["graph.node.id"] == "tools"
    assert _by_relation(out.observations, RelationKind.PART_OF) == {("LangGraph", "thread-9")}
