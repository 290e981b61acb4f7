"""Spans as real instrumentors record them and as the specifications show them, read right.

The corpus (``tests/testdata/semconv``, README there) holds spans recorded from the real
``openai`` client under three instrumentors, the GenAI semantic conventions' and OpenInference's
own examples, and Arize's recorded Vercel AI SDK spans. Each test names the misreading it guards.
"""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest
from semconv_corpus import RECORDED, load

from otel_bridge.model import (
    AgentFacts,
    Batch,
    Channel,
    CoverageRecord,
    Entity,
    EntityKind,
    ModelFacts,
    Observation,
    RelationKind,
    Scope,
    Span,
    SpanKind,
    ToolCallFacts,
)
from otel_bridge.processors.normalize import Normalizer
from otel_bridge.processors.normalize.ancestry import Ancestry
from otel_bridge.processors.normalize.channels import ChannelAssigner
from otel_bridge.processors.normalize.spans import SpanNormalizer

EVERY_FILE = (
    *RECORDED,
    "genai_spec_llm_calls.json",
    "genai_spec_agents_mcp.json",
    "openinference_spec.json",
    "vercel_ai_sdk_v6.json",
)


def _normalize(spans: tuple[Span, ...]) -> Batch:
    return Normalizer()(Batch(spans=spans))


def _nodes(batch: Batch, kind: EntityKind) -> list[Entity]:
    return [o.subject for o in batch.observations if o.relation is None and o.subject.kind == kind]


def _relations(batch: Batch, relation: RelationKind) -> list[Observation]:
    return [o for o in batch.observations if o.relation == relation]


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_chat_calls_are_one_model(name: str) -> None:
    """Each recorded instrumentor's three chat calls are calls of one model node, no coverage."""
    batch = _normalize(load(name))
    models = _nodes(batch, EntityKind.MODEL)
    assert len(models) == 3
    assert {m.id for m in models} == {"model:openai:scripted-model"}
    assert {m.facts for m in models} == {ModelFacts(provider="openai", name="scripted-model")}
    assert batch.coverage == ()
    assert {o.source.channel for o in batch.observations} == {Channel.SEM}


@pytest.mark.parametrize("name", EVERY_FILE)
def test_hot_path_equals_reference_on_the_corpus(name: str) -> None:
    """Both normalizer implementations give the same records for every corpus span."""
    fast = SpanNormalizer(ChannelAssigner([]), Ancestry(100, 100))
    reference = SpanNormalizer(ChannelAssigner([]), Ancestry(100, 100))
    for span in load(name):
        fast_out: list[Observation] = []
        fast_cov: list[CoverageRecord] = []
        ref_out: list[Observation] = []
        ref_cov: list[CoverageRecord] = []
        fast.normalize_into(span, fast_out, fast_cov)
        reference.reference_into(span, ref_out, ref_cov)
        assert repr(fast_out) == repr(ref_out)
        assert repr(fast_cov) == repr(ref_cov)


def test_agents_with_one_name_and_two_ids_are_two_nodes() -> None:
    """GenAI spec: ``gen_ai.agent.id`` identifies an agent; a shared name does not merge two."""
    agents = _nodes(_normalize(load("genai_spec_agents_mcp.json")), EntityKind.AGENT)
    assert len({a.id for a in agents}) == 2
    assert {a.label for a in agents} == {"Math Tutor"}
    assert {a.facts.agent_id for a in agents if isinstance(a.facts, AgentFacts)} == {
        "asst_5j66UpCpwteGg4YSxUnt7lPY",
        "asst_0aBcDeFgHiJkLmNoPqRsTuVw",
    }


def test_mcp_server_span_is_not_a_second_tool_call() -> None:
    """GenAI MCP spec: the server's ``tools/call`` span serves the client's call, one tool call."""
    batch = _normalize(load("genai_spec_agents_mcp.json"))
    (call,) = _nodes(batch, EntityKind.TOOL_CALL)
    assert isinstance(call.facts, ToolCallFacts)
    assert (call.facts.tool, call.facts.call_id) == ("get_weather", "call_mcp_1")
    (invoked,) = _relations(batch, RelationKind.INVOKED)
    assert invoked.object is not None
    assert invoked.object.id == call.id
    served = [
        o
        for o in _relations(batch, RelationKind.CHILD_OF)
        if o.object is not None and o.object.id == call.id
    ]
    assert [o.subject.kind for o in served] == [EntityKind.SPAN]
    assert served[0].subject.label == "tools/call get_weather"


def test_client_span_without_operation_name_is_a_model_call() -> None:
    """GenAI spec's "client span 2" states no ``gen_ai.operation.name``: still a model call, and
    both calls name the request model (``gpt-4``), not the response model (``gpt-4-0613``)."""
    batch = _normalize(load("genai_spec_llm_calls.json"))
    models = _nodes(batch, EntityKind.MODEL)
    assert [m.id for m in models] == ["model:openai:gpt-4", "model:openai:gpt-4"]
    assert batch.coverage == ()


def test_genai_attributes_without_operation_or_client_kind_leave_coverage() -> None:
    """An INTERNAL span with GenAI attributes and no operation is kept plain, and said so."""
    (span,) = load("genai_spec_llm_calls.json")[3:4]
    internal = msgspec.structs.replace(
        span, kind=SpanKind.INTERNAL, attributes={"gen_ai.system": "openai"}
    )
    batch = _normalize((internal,))
    assert _nodes(batch, EntityKind.MODEL) == []
    assert [c.reason for c in batch.coverage] == ["genai_operation_unknown"]


def test_openinference_spec_spans() -> None:
    """OpenInference spec: ``tool.id`` is the call id, ``tool.parameters`` is a schema (never a
    command), one model node across ``llm.system``/``llm.provider`` and the requested model
    (``llm.invocation_parameters``) vs the response model (``llm.model_name``), and a LiteLLM
    *client* instrumentation's spans are the caller's ``sem`` view."""
    batch = _normalize(load("openinference_spec.json"))
    (call,) = _nodes(batch, EntityKind.TOOL_CALL)
    assert isinstance(call.facts, ToolCallFacts)
    assert call.facts.call_id == "call_oi_1"
    commands = [o.object for o in _relations(batch, RelationKind.DECLARED_COMMAND)]
    assert [c.label for c in commands if c is not None] == ["ls"]  # input.value, not "string"
    models = _nodes(batch, EntityKind.MODEL)
    assert [m.id for m in models] == ["model:openai:gpt-4"] * 3
    assert {o.source.channel for o in batch.observations} == {Channel.SEM}


def test_vercel_ai_sdk_model_calls() -> None:
    """Arize's recorded Vercel AI SDK spans: the five ``do*`` spans are model calls (one chat
    model, one embedding model, provider ``openai``), the five wrappers are plain spans."""
    batch = _normalize(load("vercel_ai_sdk_v6.json"))
    models = Counter(m.id for m in _nodes(batch, EntityKind.MODEL))
    assert models == {"model:openai:gpt-4o-mini": 4, "model:openai:text-embedding-3-small": 1}
    plain = sorted(s.label for s in _nodes(batch, EntityKind.SPAN))
    assert plain == sorted(
        ["ai.generateText"] * 2 + ["ai.generateObject", "ai.streamText", "ai.embed"]
    )
    assert batch.coverage == ()


def _span(name: str, span_id: int, attrs: dict[str, object], parent: int = 0) -> Span:
    (template,) = load("genai_spec_llm_calls.json")[:1]
    return msgspec.structs.replace(
        template,
        name=name,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        kind=SpanKind.INTERNAL,
        attributes=attrs,
    )


def test_openllmetry_shapes() -> None:
    """OpenLLMetry: ``traceloop.span.kind`` agent/tool spans named by ``traceloop.entity.name``,
    and its older model calls stated by ``llm.request.type`` with ``gen_ai.system``."""
    spans = (
        _span("travel.workflow", 1, {"traceloop.span.kind": "workflow"}),
        _span(
            "planner.agent",
            2,
            {"traceloop.span.kind": "agent", "traceloop.entity.name": "planner"},
            1,
        ),
        _span(
            "lookup.tool", 3, {"traceloop.span.kind": "tool", "traceloop.entity.name": "lookup"}, 2
        ),
        _span(
            "openai.chat",
            4,
            {
                "llm.request.type": "chat",
                "gen_ai.system": "OpenAI",
                "gen_ai.request.model": "gpt-4o",
            },
            2,
        ),
    )
    batch = _normalize(spans)
    (agent,) = _nodes(batch, EntityKind.AGENT)
    assert agent.label == "planner"
    (call,) = _nodes(batch, EntityKind.TOOL_CALL)
    assert call.label == "lookup"
    (requested,) = _relations(batch, RelationKind.REQUESTED)
    assert requested.subject.id == agent.id
    assert requested.object is not None
    assert requested.object.id == "model:openai:gpt-4o"
    (invoked,) = _relations(batch, RelationKind.INVOKED)
    assert invoked.subject.id == agent.id


@pytest.mark.parametrize(
    "scope", ["opentelemetry.instrumentation.ollama", "openinference.instrumentation.litellm"]
)
def test_client_spans_under_a_runtime_or_gateway_scope_stay_the_callers(scope: str) -> None:
    """The recorded openai-v2 CLIENT chat spans (``openai_v2.json``) under the scope name of an
    Ollama client instrumentor or OpenInference's LiteLLM one: still the caller's ``sem`` model
    calls. The same span as a SERVER span is the runtime's (``model``) or gateway's (``gw``)."""
    spans = tuple(
        msgspec.structs.replace(s, scope=Scope(name=scope)) for s in load("openai_v2.json")
    )
    batch = _normalize(spans)
    assert {o.source.channel for o in batch.observations} == {Channel.SEM}
    served = _normalize(tuple(msgspec.structs.replace(s, kind=SpanKind.SERVER) for s in spans))
    expected = Channel.MODEL if "ollama" in scope else Channel.GW
    assert {o.source.channel for o in served.observations} == {expected}
