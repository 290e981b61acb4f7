"""Typed operation nodes and output tool calls joined to their tool spans (issue 12, part 6).

Workflow, chain, retrieval, reranker, guardrail and evaluator spans become typed nodes with facts
and stable keys; a model call's output tool call (by call id) is related to the tool span that
executed it, and a call no tool span executed is a coverage record. Spans come from the corpus
(``tests/testdata/semconv``, README there); where the corpus has no span of a shape (OpenLLMetry
``traceloop.span.kind``, the Vercel AI SDK's ``ai.response.toolCalls``), the test builds it from
a corpus span with the attributes the convention documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest
from semconv_corpus import RECORDED, load

from otel_bridge.graph import Graph, GraphAccumulator, to_prov, validate_document
from otel_bridge.model import (
    Attribution,
    Batch,
    CoverageRecord,
    Entity,
    EntityKind,
    Observation,
    OperationFacts,
    RelationKind,
    Span,
    SpanKind,
    ToolCallFacts,
)
from otel_bridge.processors.normalize import NormalizeConfig, Normalizer


def _run(*batches: tuple[Span, ...]) -> tuple[list[Observation], list[CoverageRecord]]:
    """Every batch through one normalizer, then its shutdown drain (what a run does)."""
    normalizer = Normalizer()
    observations: list[Observation] = []
    coverage: list[CoverageRecord] = []
    for spans in batches:
        out = normalizer(Batch(spans=spans))
        observations.extend(out.observations)
        coverage.extend(out.coverage)
    coverage.extend(normalizer.drain())
    return observations, coverage


def _nodes(observations: list[Observation], kind: EntityKind) -> list[Entity]:
    return [o.subject for o in observations if o.relation is None and o.subject.kind == kind]


def _asked(observations: list[Observation]) -> list[Observation]:
    return [o for o in observations if o.relation == RelationKind.ASKED_FOR]


def _edges(observations: list[Observation], relation: RelationKind) -> set[tuple[str, str]]:
    return {
        (o.subject.id, o.object.id)
        for o in observations
        if o.relation == relation and o.object is not None
    }


# -- typed operation nodes -----------------------------------------------------------------


def test_genai_workflow_and_retrieval_are_typed_nodes() -> None:
    """GenAI spec (``genai_spec_agents_mcp.json``): ``invoke_workflow`` is a workflow node named by
    ``gen_ai.workflow.name``, ``retrieval`` a retrieval node naming its data source; the agents
    nest under the workflow; only the MCP server's ``tools/call`` stays a plain span."""
    observations, coverage = _run(load("genai_spec_agents_mcp.json"))
    (workflow,) = _nodes(observations, EntityKind.WORKFLOW)
    (retrieval,) = _nodes(observations, EntityKind.RETRIEVAL)
    assert workflow.facts == OperationFacts(
        operation="workflow",
        service="math-agents",
        name="travel",
        trace_id=workflow.id.split(":")[1],
        span_id="0000000000000020",
    )
    assert workflow.key == "workflow:math-agents:travel"
    assert workflow.label == "travel"
    assert isinstance(retrieval.facts, OperationFacts)
    assert (retrieval.facts.name, retrieval.facts.data_source) == ("kb", "kb")
    assert retrieval.key == "retrieval:math-agents:kb"
    agents = {a.id for a in _nodes(observations, EntityKind.AGENT)}
    assert {(s, t) for s, t in _edges(observations, RelationKind.CHILD_OF) if s in agents} == {
        (agent, workflow.id) for agent in agents
    }
    assert [s.label for s in _nodes(observations, EntityKind.SPAN)] == ["tools/call get_weather"]
    assert coverage == []


def test_openinference_kinds_are_typed_nodes() -> None:
    """OpenInference spec (``openinference_spec.json``): CHAIN, RETRIEVER, RERANKER and GUARDRAIL
    spans are chain, retrieval, reranker and guardrail nodes, nested as the trace states."""
    observations, _ = _run(load("openinference_spec.json"))
    kinds = {
        kind: [n.label for n in _nodes(observations, kind)]
        for kind in (
            EntityKind.CHAIN,
            EntityKind.RETRIEVAL,
            EntityKind.RERANKER,
            EntityKind.GUARDRAIL,
        )
    }
    assert kinds == {
        EntityKind.CHAIN: ["chain"],
        EntityKind.RETRIEVAL: ["retrieve"],
        EntityKind.RERANKER: ["rerank"],
        EntityKind.GUARDRAIL: ["guard"],
    }
    assert _nodes(observations, EntityKind.SPAN) == []
    (chain,) = _nodes(observations, EntityKind.CHAIN)
    nested = {
        s.split(":")[0] for s, t in _edges(observations, RelationKind.CHILD_OF) if t == chain.id
    }
    assert nested == {"retrieval", "reranker", "guardrail"}
    assert chain.key == "chain:oi-agent:chain"


def _span(name: str, span_id: int, attrs: dict[str, Any], parent: int = 0) -> Span:
    (template,) = load("genai_spec_llm_calls.json")[:1]
    return msgspec.structs.replace(
        template,
        name=name,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent else b"",
        kind=SpanKind.INTERNAL,
        attributes=attrs,
    )


def test_openllmetry_workflow_and_task_are_typed_nodes() -> None:
    """OpenLLMetry: ``traceloop.span.kind`` ``workflow`` and ``task`` are a workflow and a chain
    node named by ``traceloop.entity.name``; ``traceloop.workflow.name`` (set on every span of
    the workflow) does not name the task."""
    spans = (
        _span(
            "travel.workflow",
            1,
            {"traceloop.span.kind": "workflow", "traceloop.entity.name": "travel"},
        ),
        _span(
            "book.task",
            2,
            {
                "traceloop.span.kind": "task",
                "traceloop.entity.name": "book",
                "traceloop.workflow.name": "travel",
            },
            1,
        ),
    )
    observations, coverage = _run(spans)
    (workflow,) = _nodes(observations, EntityKind.WORKFLOW)
    (task,) = _nodes(observations, EntityKind.CHAIN)
    assert (workflow.label, task.label) == ("travel", "book")
    assert _edges(observations, RelationKind.CHILD_OF) == {(task.id, workflow.id)}
    assert coverage == []


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        ({"openinference.span.kind": "PROMPT"}, "span_kind_not_interpreted"),
        ({"traceloop.span.kind": "unknown"}, "span_kind_not_interpreted"),
        ({"gen_ai.operation.name": "plan_trip"}, "genai_operation_not_interpreted"),
    ],
)
def test_a_kind_no_rule_reads_leaves_coverage(attrs: dict[str, Any], reason: str) -> None:
    """A span kind or GenAI operation no rule reads is a plain span and a coverage record."""
    observations, coverage = _run((_span("step", 1, attrs),))
    assert [n.label for n in _nodes(observations, EntityKind.SPAN)] == ["step"]
    assert [c.reason for c in coverage] == [reason]


def test_typed_nodes_validate_in_graph_json() -> None:
    """The typed nodes and the ``asked_for`` edge go into a graph document that validates."""
    observations, coverage = _run(load("openinference_spec.json"))
    acc = GraphAccumulator()
    acc.apply_many(observations)
    acc.apply_coverage(coverage)
    doc = acc.to_dict()
    validate_document(doc)
    kinds = doc["summary"]["nodes_by_kind"]
    assert {k: kinds[k] for k in ("chain", "retrieval", "reranker", "guardrail")} == dict.fromkeys(
        ("chain", "retrieval", "reranker", "guardrail"), 1
    )
    (edge,) = [e for e in doc["edges"] if e["relation"] == "asked_for"]
    assert (edge["grade"], edge["causal"], edge["identity_exact"]) == ("C", False, True)
    assert edge["derived_support"] == ["0000000000000035#0", "0000000000000036#0"]


# -- output tool calls joined to the tool spans that executed them --------------------------


def test_spec_output_tool_call_is_joined_to_its_execute_tool_span() -> None:
    """GenAI spec example (``genai_spec_llm_calls.json``): client span 1's output asks for
    ``call_VSPy...``; the ``execute_tool`` span states that id: one ``asked_for`` relation,
    exact and non-causal, resting on both spans' observations; nothing left unobserved."""
    observations, coverage = _run(load("genai_spec_llm_calls.json"))
    (link,) = _asked(observations)
    assert link.subject.id == "model:openai:gpt-4"
    assert link.object is not None
    assert isinstance(link.object.facts, ToolCallFacts)
    assert link.object.facts.span_id == "0000000000000012"
    assert link.attrs["gen_ai.tool.call.id"] == "call_VSPygqKTWdrhaFErNvMV18Yl"
    assert link.attrs["span_id"] == "0000000000000011"
    ev = link.evidence
    assert (ev.attribution, ev.identity_exact, ev.inferred, ev.causal) == (
        Attribution.EXACT_IDENTITY,
        True,
        False,
        False,
    )
    assert ev.method == "tool_call_id"
    assert ev.support == ("0000000000000011#0", "0000000000000012#0")
    model_call = next(
        s for s in load("genai_spec_llm_calls.json") if s.span_id.hex() == "0000000000000011"
    )
    assert (link.time_unix_nano, link.end_time_unix_nano) == (model_call.end_time_unix_nano, 0)
    assert coverage == []


def test_openinference_output_tool_call_is_joined_by_tool_id() -> None:
    """OpenInference spec: ``llm.output_messages.0.message.tool_calls.0.tool_call.id`` meets the
    TOOL span's ``tool.id``."""
    observations, coverage = _run(load("openinference_spec.json"))
    (link,) = _asked(observations)
    assert link.object is not None
    assert link.object.label == "run_command"
    assert link.attrs["gen_ai.tool.call.id"] == "call_oi_1"
    assert coverage == []


def test_join_does_not_depend_on_arrival_order() -> None:
    """The tool span first, the model call in a later batch: the same relation."""
    spans = load("genai_spec_llm_calls.json")
    in_order, _ = _run(spans)
    model_call = next(s for s in spans if s.span_id.hex() == "0000000000000011")
    others = tuple(s for s in spans if s is not model_call)
    reversed_order, coverage = _run(others, (model_call,))
    assert _asked(in_order) == _asked(reversed_order)
    assert coverage == []


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_tool_call_without_a_tool_span_is_coverage(name: str) -> None:
    """The recorded clients' three calls (one trace each) asked for ``call_1``..``call_3``, but no
    tool span was recorded (the instrumentors trace the client only): no relation, and one
    ``tool_call_not_observed`` record per asked-for call, except under openai-v2 without content
    capture, whose spans state no output messages (nothing to join, nothing claimed)."""
    observations, coverage = _run(load(name))
    assert _asked(observations) == []
    if name == "openai_v2.json":
        assert coverage == []
        return
    assert [c.reason for c in coverage] == ["tool_call_not_observed"] * 3
    for call_id, record in zip(("call_1", "call_2", "call_3"), coverage, strict=True):
        assert f"asked for tool call {call_id!r}; no tool span" in record.detail


def test_a_tool_span_with_another_call_id_is_not_joined() -> None:
    """Only the id counts: a tool span of the same tool with another call id is not the call."""
    spans = load("genai_spec_llm_calls.json")
    tool = next(s for s in spans if s.span_id.hex() == "0000000000000012")
    other = msgspec.structs.replace(
        tool, attributes={**tool.attributes, "gen_ai.tool.call.id": "call_other"}
    )
    observations, coverage = _run(tuple(other if s is tool else s for s in spans))
    assert _asked(observations) == []
    assert [c.reason for c in coverage] == ["tool_call_not_observed"]
    assert "call_VSPygqKTWdrhaFErNvMV18Yl" in coverage[0].detail


def test_vercel_response_tool_calls_meet_the_tool_call_span() -> None:
    """Vercel AI SDK: a ``doGenerate`` span's ``ai.response.toolCalls`` (JSON, ``toolCallId``) and
    an ``ai.toolCall`` span's ``ai.toolCall.id`` in one trace."""
    do_generate = next(s for s in load("vercel_ai_sdk_v6.json") if s.name.endswith("doGenerate"))
    asking = msgspec.structs.replace(
        do_generate,
        attributes={
            **do_generate.attributes,
            "ai.response.toolCalls": '[{"toolCallType":"function","toolCallId":"call_v1",'
            '"toolName":"weather","input":"{\\"city\\":\\"Paris\\"}"}]',
        },
    )
    tool = msgspec.structs.replace(
        do_generate,
        name="ai.toolCall",
        span_id=bytes.fromhex("00000000000000aa"),
        parent_span_id=do_generate.span_id,
        attributes={
            "ai.operationId": "ai.toolCall",
            "ai.toolCall.name": "weather",
            "ai.toolCall.id": "call_v1",
        },
    )
    observations, coverage = _run((asking, tool))
    (link,) = _asked(observations)
    assert link.subject.id == "model:openai:gpt-4o-mini"
    assert link.object is not None
    assert link.object.label == "weather"
    assert coverage == []


def test_openllmetry_completion_tool_calls_meet_the_tool_span() -> None:
    """OpenLLMetry's older flattened ``gen_ai.completion.0.tool_calls.0.id``."""
    spans = (
        _span(
            "openai.chat",
            1,
            {
                "llm.request.type": "chat",
                "gen_ai.system": "OpenAI",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.completion.0.role": "assistant",
                "gen_ai.completion.0.tool_calls.0.id": "call_l1",
                "gen_ai.completion.0.tool_calls.0.name": "lookup",
            },
        ),
        _span(
            "lookup.tool",
            2,
            {
                "traceloop.span.kind": "tool",
                "traceloop.entity.name": "lookup",
                "gen_ai.tool.call.id": "call_l1",
            },
        ),
    )
    observations, coverage = _run(spans)
    (link,) = _asked(observations)
    assert link.object is not None
    assert link.object.label == "lookup"
    assert coverage == []


def test_typed_operations_are_prov_activities() -> None:
    """In PROV-JSON the typed operations are activities, as the plain spans they were."""
    observations, _ = _run(load("genai_spec_agents_mcp.json"))
    acc = GraphAccumulator()
    acc.apply_many(observations)
    prov = to_prov(Graph.from_dict(acc.to_dict()))
    kinds = {record["ob:kind"] for record in prov["activity"].values()}
    assert {"workflow", "retrieval", "span", "tool_call"} <= kinds
    assert not {"workflow", "retrieval"} & {r["ob:kind"] for r in prov.get("entity", {}).values()}


def _not_observed(records: Sequence[CoverageRecord]) -> list[CoverageRecord]:
    """The ``tool_call_not_observed`` records (the spans' parents are not in these batches)."""
    return [c for c in records if c.reason == "tool_call_not_observed"]


def test_bounded_tables_report_what_they_drop() -> None:
    """With room for one waiting call, the first of two unexecuted asks is dropped and reported
    at once; a tool span remembered beyond the tool table's two generations is forgotten, never
    linked by a guess. Spans from ``genai_spec_llm_calls.json``."""
    model_call, tool = (
        s
        for s in load("genai_spec_llm_calls.json")
        if s.span_id.hex() in ("0000000000000011", "0000000000000012")
    )
    other_ask = msgspec.structs.replace(
        model_call,
        span_id=bytes.fromhex("00000000000000b1"),
        attributes={
            **model_call.attributes,
            "gen_ai.output.messages": '[{"role":"assistant","parts":'
            '[{"type":"tool_call","id":"call_b1","name":"get_weather"}]}]',
        },
    )
    normalizer = Normalizer(NormalizeConfig(pending_cache_size=1))
    dropped = _not_observed(normalizer(Batch(spans=(model_call, other_ask))).coverage)
    assert len(dropped) == 1
    assert "call_VSPygqKTWdrhaFErNvMV18Yl" in dropped[0].detail
    assert "table of waiting calls was full" in dropped[0].detail
    (left,) = _not_observed(normalizer.drain())
    assert "call_b1" in left.detail
    # Tool spans first: three call ids through a table of one per generation.
    tools = tuple(
        msgspec.structs.replace(
            tool,
            span_id=bytes([0, 0, 0, 0, 0, 0, 0xC0, n]),
            attributes={**tool.attributes, "gen_ai.tool.call.id": f"call_c{n}"},
        )
        for n in range(3)
    )
    late = Normalizer(NormalizeConfig(pending_cache_size=1))
    late(Batch(spans=tools))
    asking = msgspec.structs.replace(
        model_call,
        attributes={
            **model_call.attributes,
            "gen_ai.output.messages": '[{"role":"assistant","parts":['
            '{"type":"tool_call","id":"call_c0"},{"type":"tool_call","id":"call_c2"}]}]',
        },
    )
    out = late(Batch(spans=(asking,)))
    asked = [o.attrs["gen_ai.tool.call.id"] for o in _asked(list(out.observations))]
    assert asked == ["call_c2"]
    reported = _not_observed([*out.coverage, *late.drain()])
    assert [c.detail.split("'")[1] for c in reported] == ["call_c0"]
