"""Differential test: the span hot path equals its readable reference, record for record.

``SpanNormalizer.normalize_into`` (inlined, cached) and ``SpanNormalizer.reference_into`` (small
steps, no caches) are fed the same spans in the same order, each with its own span memory; after
every span both must have appended equal observations and coverage records (equal by value and by
``repr``, so ``True`` and ``1`` are told apart), and both must drain the same waiting relations.

The spans cover every role (GenAI agents, tools, model calls and plain spans; OpenInference AGENT,
TOOL, LLM, EMBEDDING), parents that never arrive, parents that arrive after their children,
sessions, declared commands in every input shape, attribute values that are not plain strings,
several resources and scopes, and span memories small enough to forget and evict.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol, TypeVar

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.model import (
    AnyValue,
    CoverageRecord,
    Observation,
    Resource,
    Scope,
    Span,
    SpanKind,
    Status,
    StatusCode,
)
from otel_bridge.processors.normalize.ancestry import Ancestry
from otel_bridge.processors.normalize.channels import ChannelAssigner
from otel_bridge.processors.normalize.spans import SpanNormalizer

RESOURCES = (
    Resource(attributes={"service.name": "agent-svc", "process.pid": 7, "host.id": "h"}),
    Resource(attributes={"service.name": "litellm-proxy", "process.pid": "9"}),
    Resource(attributes={"process.creation.time": "2026-01-01T00:00:00.000Z"}),
    Resource(attributes={"service.name": 5, "evidence.channel": "model"}),
)
SCOPES = (
    Scope(name="agents"),
    Scope(name="openinference.instrumentation.x"),
    Scope(name="openinference.instrumentation.litellm"),
)
KINDS = (SpanKind.INTERNAL, SpanKind.CLIENT, SpanKind.SERVER, SpanKind.UNSPECIFIED)
STATUSES = (Status(), Status(code=StatusCode.OK), Status(code=StatusCode.ERROR, message="boom"))


class _Text(str):
    """A string the hot path's inline shortcuts do not take (they test ``__class__ is str``)."""

    __slots__ = ()


T = TypeVar("T")


class Pick(Protocol):
    """Chooses one of a sequence (``random.Random.choice``, or a hypothesis draw)."""

    def __call__(self, choices: Sequence[T], /) -> T:
        """One of ``choices``."""
        ...


def _text(pick: Pick, *choices: str) -> AnyValue:
    """One of ``choices``, sometimes as a str subclass, empty, or a number."""
    value = pick([*choices, ""])
    shape = pick(["plain", "plain", "plain", "subclass", "number"])
    if shape == "subclass":
        return _Text(value)
    if shape == "number":
        return pick([3, 2.5, True])
    return value


def _agent_attrs(pick: Pick) -> dict[str, AnyValue]:
    attrs: dict[str, AnyValue] = {}
    if pick([True, False]):
        attrs["gen_ai.operation.name"] = pick(["invoke_agent", "create_agent"])
    else:
        attrs[pick(["openinference.span.kind", "traceloop.span.kind"])] = pick(["AGENT", "agent"])
    for key in ("gen_ai.agent.name", "agent.name", "gen_ai.agent.id", "traceloop.entity.name"):
        if pick([True, False, False]):
            attrs[key] = _text(pick, "planner", "coder", "agent-1")
    if pick([True, False, False, False]):  # an array or a map (unhashable) where a name is read
        shapes: list[AnyValue] = [("planner",), {"name": "coder"}]
        attrs["traceloop.entity.name"] = pick(shapes)
    if pick([True, False, False]):
        attrs["gen_ai.request.model"] = _text(pick, "gpt-4o", "llama3")
        attrs["gen_ai.provider.name"] = _text(pick, "OpenAI", "ollama")
    return attrs


_ARGUMENTS: list[AnyValue] = [
    '{"command": "ls -la /tmp/x1"}',
    '{"cmd": "echo TOKEN=abc"}',
    '{"argv": ["git", "status"]}',
    '{"command": "a", "cmd": "b"}',
    "not json",
    '{"query": "weather"}',
]


def _tool_attrs(pick: Pick) -> dict[str, AnyValue]:
    attrs: dict[str, AnyValue] = {}
    shape = pick(["genai", "openinference", "vercel", "claude"])
    if shape == "claude":  # Claude Code: read as a tool only by its span name
        attrs["tool_name"] = _text(pick, "Bash", "Edit")
        attrs["tool_use_id"] = _text(pick, "toolu_1", "toolu_2")
    elif shape == "genai":
        attrs["gen_ai.operation.name"] = "execute_tool"
        attrs["gen_ai.tool.name"] = _text(pick, "shell", "search", "run_command")
    elif shape == "openinference":
        attrs[pick(["openinference.span.kind", "traceloop.span.kind"])] = pick(["TOOL", "tool"])
        attrs[pick(["tool.name", "traceloop.entity.name"])] = _text(pick, "bash", "lookup")
    else:
        attrs["ai.operationId"] = "ai.toolCall"
        attrs["ai.toolCall.name"] = _text(pick, "weather")
    if pick([True, False]):
        key = pick(["gen_ai.tool.call.id", "tool_call.id", "tool.id", "ai.toolCall.id"])
        attrs[key] = _text(pick, "call-1", "call-2")
    shape = pick(["arguments", "arguments", "input", "parameters", "none"])
    if shape == "arguments":
        attrs["gen_ai.tool.call.arguments"] = pick(_ARGUMENTS)
    elif shape == "input":
        attrs["input.value"] = pick([*_ARGUMENTS, "ls -la", "rm -rf /tmp/y"])
        attrs["input.mime_type"] = pick(["application/json", "text/plain"])
    elif shape == "parameters":
        attrs["tool.parameters"] = pick([{"command": "pwd"}, {"type": "object"}, '{"cmd": "id"}'])
    if pick([True, False, False]):
        attrs["gen_ai.response.model"] = "gpt-4o"
    return attrs


def _model_attrs(pick: Pick) -> dict[str, AnyValue]:
    attrs: dict[str, AnyValue] = {}
    shape = pick(["genai", "genai", "openinference", "implied"])
    if shape == "implied":  # no operation name: conventions.implied_operation decides
        key, value = pick(
            [
                ("ai.operationId", "ai.generateText.doGenerate"),
                ("ai.operationId", "ai.embed.doEmbed"),
                ("ai.operationId", "ai.streamText"),
                ("llm.request.type", "chat"),
                ("llm.request.type", "rerank"),
                ("gen_ai.system", "openai"),
            ]
        )
        attrs[key] = value
        for extra in ("gen_ai.request.model", "ai.model.id", "ai.model.provider"):
            if pick([True, False]):
                attrs[extra] = _text(pick, "gpt-4o", "openai.chat")
    elif shape == "genai":
        op = pick(["chat", "text_completion", "embeddings", "generate_content"])
        attrs["gen_ai.operation.name"] = op
        if pick([True, True, False]):
            attrs[pick(["gen_ai.request.model", "gen_ai.response.model"])] = _text(
                pick, "gpt-4o", "llama3"
            )
        if pick([True, False]):
            attrs[pick(["gen_ai.provider.name", "gen_ai.system"])] = _text(pick, "OpenAI", "meta")
    else:
        attrs["openinference.span.kind"] = pick(["LLM", "EMBEDDING", "llm"])
        if pick([True, True, False]):
            attrs[pick(["llm.model_name", "embedding.model_name"])] = _text(pick, "m1", "m2")
        if pick([True, False]):
            attrs[pick(["llm.provider", "llm.system"])] = _text(pick, "anthropic")
        if pick([True, False, False]):
            attrs["llm.invocation_parameters"] = pick(
                ['{"model": "m0"}', '{"model": 3}', "{not json", '{"temperature": 0}']
            )
    for key in ("gen_ai.response.id", "request.id"):
        if pick([True, False, False]):
            attrs[key] = _text(pick, "resp-1", "resp-2")
    return attrs


def _plain_attrs(pick: Pick) -> dict[str, AnyValue]:
    attrs: dict[str, AnyValue] = {}
    if pick([True, False]):
        attrs["gen_ai.operation.name"] = pick(["retrieve", _Text("other"), 4])
    for key in ("graph.node.id", "graph.node.name"):
        if pick([True, False, False]):
            attrs[key] = _text(pick, "node-1")
    return attrs


ROLES = (_agent_attrs, _tool_attrs, _model_attrs, _plain_attrs)


def generate(pick: Pick, count: int) -> list[Span]:
    """``count`` spans in a few traces, in delivery order (which ``pick`` decides too)."""
    spans: list[Span] = []
    traces = [bytes([t + 1]) * 16 for t in range(pick([1, 2, 3]))]
    sent: dict[bytes, list[bytes]] = {t: [] for t in traces}
    for i in range(count):
        trace = pick(traces)
        span_id = (i + 1).to_bytes(8, "big")
        known = sent[trace]
        parent = pick([b"", b"\xee" * 8, *known, *known])  # none, a ghost, or an earlier span
        make = pick(ROLES)
        attrs = make(pick)
        if pick([True, False, False]):
            attrs[pick(["gen_ai.conversation.id", "session.id"])] = _text(pick, "conv-1", "c2")
        name = pick(
            [
                "invoke_agent planner",
                "execute_tool shell",
                "chat gpt-4o",
                "step",
                " ",
                "claude_code.interaction",
                "claude_code.llm_request",
                "claude_code.tool",
                "claude_code.tool.execution",
            ]
        )
        spans.append(
            Span(
                resource=pick(RESOURCES),
                scope=pick(SCOPES),
                trace_id=trace,
                span_id=span_id,
                parent_span_id=parent,
                name=name,
                start_time_unix_nano=1000 + i,
                end_time_unix_nano=2000 + i,
                attributes=attrs,
                kind=pick(KINDS),
                status=pick(STATUSES),
            )
        )
        known.append(span_id)
    order = list(range(count))
    if pick(["shuffled", "reversed", "as sent"]) == "shuffled":
        for i in range(count - 1, 0, -1):  # Fisher-Yates with the shared chooser
            j = pick(range(i + 1))
            order[i], order[j] = order[j], order[i]
    elif pick([True, False]):
        order.reverse()
    return [spans[i] for i in order]


def _pair(capacity: int, pending: int) -> tuple[SpanNormalizer, SpanNormalizer]:
    def one() -> SpanNormalizer:
        # The call-id table gets the span memory's capacity: small ones make both rotate.
        return SpanNormalizer(ChannelAssigner([]), Ancestry(capacity, pending), capacity)

    return one(), one()


def assert_same(spans: list[Span], capacity: int = 100, pending: int = 100) -> None:
    """Fast and reference normalizers agree on every span's records and on the final drain."""
    fast, reference = _pair(capacity, pending)
    for span in spans:
        fast_out: list[Observation] = []
        fast_cov: list[CoverageRecord] = []
        ref_out: list[Observation] = []
        ref_cov: list[CoverageRecord] = []
        fast.normalize_into(span, fast_out, fast_cov)
        reference.reference_into(span, ref_out, ref_cov)
        assert fast_out == ref_out
        assert fast_cov == ref_cov
        assert repr(fast_out) == repr(ref_out)
        assert repr(fast_cov) == repr(ref_cov)
    assert fast.drain() == reference.drain()


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    count=st.integers(1, 20),
    capacity=st.sampled_from([2, 5, 1000]),
    pending=st.sampled_from([1, 3, 1000]),
)
def test_hot_path_equals_reference(
    data: st.DataObject, count: int, capacity: int, pending: int
) -> None:
    """Hypothesis-generated traces: equal output, span by span, whatever the order and sizes."""

    def pick(choices: Sequence[T]) -> T:
        return data.draw(st.sampled_from(choices))

    assert_same(generate(pick, count), capacity, pending)


def test_hot_path_equals_reference_on_a_broad_corpus() -> None:
    """Seeded corpora of a few hundred spans each (enough to fill and reuse every cache)."""
    for seed in range(50):
        rng = random.Random(seed)
        spans = generate(rng.choice, 200)
        assert_same(spans, capacity=rng.choice([8, 64, 100_000]), pending=rng.choice([4, 1000]))


def test_hot_path_equals_reference_on_repeated_deliveries() -> None:
    """Every span delivered again later (as a retrying client does, and as the pipeline
    benchmarks do): the hot path's shortcuts for a span or call id it has seen agree too."""
    for seed in range(20):
        rng = random.Random(1000 + seed)
        spans = generate(rng.choice, 120)
        again = spans + rng.sample(spans, len(spans))
        assert_same(again, capacity=rng.choice([8, 64, 100_000]), pending=rng.choice([4, 1000]))


def test_corpus_covers_every_role_and_outcome() -> None:
    """The generated corpus reaches what the differential test claims it covers."""
    rng = random.Random(7)
    spans = [s for _ in range(10) for s in generate(rng.choice, 200)]
    normalizer, _ = _pair(100, 100)
    observations: list[Observation] = []
    coverage: list[CoverageRecord] = []
    for span in spans:
        normalizer.normalize_into(span, observations, coverage)
    coverage += normalizer.drain()
    kinds = {o.subject.kind for o in observations if o.relation is None}
    assert kinds == {"agent", "tool_call", "model", "span"}
    relations = {o.relation for o in observations if o.relation is not None}
    assert relations == {
        "delegated_to",
        "invoked",
        "requested",
        "child_of",
        "declared_command",
        "part_of",
    }
    reasons = {c.reason for c in coverage}
    assert {
        "parent_span_missing",
        "model_name_missing",
        "command_not_extracted",
        "genai_operation_unknown",
    } <= reasons
