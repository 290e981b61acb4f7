"""The normalizer's hot-path shortcuts (per-origin and entity caches) change nothing."""

from __future__ import annotations

import gc
import os

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.identity import tool_call_key
from otel_bridge.model import (
    AnyValue,
    Batch,
    Channel,
    Entity,
    EntityKind,
    ModelFacts,
    Observation,
    Resource,
    Scope,
    Span,
    ToolCallFacts,
)
from otel_bridge.processors.normalize import NormalizeConfig, NormalizeProcessor, Normalizer
from otel_bridge.processors.normalize.spans import CACHE_SIZE
from otel_bridge.testing import RecordingConsumer

RESOURCE = Resource(attributes={"service.name": "svc", "process.pid": 7, "host.id": "h"})
SCOPE = Scope(name="agents")
_text = st.text(max_size=8)
_attrs = st.dictionaries(_text, st.one_of(_text, st.integers(), st.booleans()), max_size=3)


def _span(attrs: dict[str, AnyValue], *, name: str = "s", parent: bytes = b"") -> Span:
    return Span(
        resource=RESOURCE,
        scope=SCOPE,
        trace_id=os.urandom(16),
        span_id=os.urandom(8),
        parent_span_id=parent,
        name=name,
        start_time_unix_nano=1,
        end_time_unix_nano=2,
        attributes=attrs,
    )


_OPS = st.sampled_from(["invoke_agent", "execute_tool", "chat", "embeddings", "other"])
_TOOL_ARGS = st.sampled_from(
    ['{"command": "ls -la"}', '{"cmd": "echo TOKEN=abc"}', "not json", '{"x": 1}', None]
)


@st.composite
def _trace(draw: st.DrawFn) -> list[Span]:
    root = _span(
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": draw(_text)},
        name="invoke_agent a",
    )
    spans = [root]
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        attrs: dict[str, AnyValue] = {"gen_ai.operation.name": draw(_OPS)}
        attrs["gen_ai.request.model"] = draw(st.sampled_from(["gpt-4o", "llama", 3]))
        attrs["gen_ai.provider.name"] = draw(st.sampled_from(["OpenAI", "meta"]))
        attrs["gen_ai.tool.name"] = draw(st.sampled_from(["shell", "search"]))
        args = draw(_TOOL_ARGS)
        if args is not None:
            attrs["gen_ai.tool.call.arguments"] = args
        child = _span(attrs, parent=root.span_id)
        spans.append(msgspec.structs.replace(child, trace_id=root.trace_id))
    return spans


@settings(max_examples=60, deadline=None)
@given(warm=st.lists(_trace(), max_size=4), probe=_trace())
def test_caches_are_transparent(warm: list[list[Span]], probe: list[Span]) -> None:
    """A normalizer with caches warmed by other traces gives the same output as a fresh one."""
    warmed = Normalizer()
    for trace in warm:
        warmed(Batch(spans=tuple(trace)))
    fresh_out = Normalizer()(Batch(spans=tuple(probe)))
    warm_out = warmed(Batch(spans=tuple(probe)))
    assert warm_out == fresh_out
    assert repr(warm_out) == repr(fresh_out)  # same value types too (True is not 1)


class _Text(str):
    """A string the normalizer's inline shortcuts do not take (they test ``__class__ is str``)."""

    __slots__ = ()


def _general(span: Span) -> Span:
    """``span`` with every string attribute as a :class:`_Text`: only the general paths run."""
    attrs = {k: _Text(v) if isinstance(v, str) else v for k, v in span.attributes.items()}
    return msgspec.structs.replace(span, attributes=attrs)


@settings(max_examples=80, deadline=None)
@given(traces=st.lists(_trace(), min_size=1, max_size=4), split=st.integers(1, 3))
def test_inline_shortcuts_agree_with_the_general_paths(
    traces: list[list[Span]], split: int
) -> None:
    """The inline common cases of normalize give what the general helpers give, record by record.

    Spans arrive in ``split`` batches (children before parents too), so both the immediate
    ancestor link and the pending one run.
    """
    spans = [s for trace in traces for s in reversed(trace)]
    fast, general = Normalizer(), Normalizer()
    fast_out, general_out = [], []
    for i in range(split):
        part = tuple(spans[i::split])
        fast_out.append(fast(Batch(spans=part)))
        general_out.append(general(Batch(spans=tuple(map(_general, part)))))
    for a, b in zip(fast_out, general_out, strict=True):
        assert a.observations == b.observations
        assert a.coverage == b.coverage
    assert fast.drain() == general.drain()


@settings(max_examples=80, deadline=None)
@given(traces=st.lists(_trace(), min_size=1, max_size=4), one_batch=st.booleans())
def test_arrival_order_does_not_change_the_relations(
    traces: list[list[Span]], one_batch: bool
) -> None:
    """Parents first (each parent known when its child arrives: the inline link) or children
    first (as SDKs export: every link waits for its parent) give the same observations."""

    def run(order: list[Span]) -> list[Observation]:
        norm = Normalizer()
        batches = [order] if one_batch else [[s] for s in order]
        out = [o for b in batches for o in norm(Batch(spans=tuple(b))).observations]
        assert norm.drain() == []
        return sorted(out, key=lambda o: o.id)

    parents_first = run([s for trace in traces for s in trace])
    children_first = run([s for trace in traces for s in reversed(trace)])
    # Only a tool call's calling agent depends on the order: it is stated when the agent's span
    # arrived first, and unknown (None) otherwise, never guessed.
    assert list(map(_unknown_agent, parents_first)) == list(map(_unknown_agent, children_first))
    for obs in children_first:
        if isinstance(obs.subject.facts, ToolCallFacts) and obs.relation is None:
            assert obs.subject.facts.agent is None


def _unknown_agent(obs: Observation) -> Observation:
    """``obs`` with its tool calls' calling agent unknown."""

    def forget(entity: Entity) -> Entity:
        facts = entity.facts
        if not isinstance(facts, ToolCallFacts):
            return entity
        return msgspec.structs.replace(
            entity,
            facts=msgspec.structs.replace(facts, agent=None),
            key=tool_call_key(None, facts.tool),
        )

    obj = None if obs.object is None else forget(obs.object)
    return msgspec.structs.replace(obs, subject=forget(obs.subject), object=obj)


def test_repeated_models_share_one_entity() -> None:
    """Model calls naming the same model share one (equal) entity object."""
    spans = [
        _span({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.system": "X"})
        for _ in range(3)
    ]
    out = Normalizer()(Batch(spans=tuple(spans)))
    models = [o.subject for o in out.observations if o.subject.kind is EntityKind.MODEL]
    assert len(models) == 3
    assert all(m is models[0] for m in models)
    assert models[0] == Entity(
        kind=EntityKind.MODEL,
        id="model:x:m",
        label="m",
        attrs={"gen_ai.provider.name": "x", "gen_ai.request.model": "m"},
        facts=ModelFacts(provider="x", name="m"),
        key="model:x:m",
    )


def test_model_cache_is_bounded() -> None:
    """Past its size the model cache starts over; entities stay correct."""
    norm = Normalizer()
    names = [f"m{i}" for i in range(CACHE_SIZE + 10)]
    batch = Batch(
        spans=tuple(
            _span({"gen_ai.operation.name": "chat", "gen_ai.request.model": n}) for n in names
        )
    )
    out = norm(batch)
    assert [o.subject.id for o in out.observations] == [f"model:unknown:{n}" for n in names]
    assert len(norm._spans._models) <= CACHE_SIZE


def test_agent_attribute_types_are_kept_apart() -> None:
    """Agents whose attributes differ only in type (True vs 1) keep their own values."""
    norm = Normalizer()
    out = norm(
        Batch(
            spans=tuple(
                _span(
                    {
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": "a",
                        "graph.node.id": value,
                    },
                    name="invoke_agent a",
                )
                for value in (True, 1, "1")
            )
        )
    )
    values = [o.subject.attrs["graph.node.id"] for o in out.observations if o.relation is None]
    assert [type(v) for v in values] == [bool, int, str]


def test_mapping_tool_arguments_bypass_the_command_cache() -> None:
    """Structured (mapping) arguments are not cached but still yield the command."""
    norm = Normalizer()
    spans = [
        _span(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "shell",
                "gen_ai.tool.call.arguments": {"command": cmd},
            }
        )
        for cmd in ("ls", "pwd", "ls")
    ]
    out = norm(Batch(spans=tuple(spans)))
    commands = [
        o.object.label for o in out.observations if o.object and o.relation == "declared_command"
    ]
    assert commands == ["ls", "pwd", "ls"]
    assert len(norm._spans._commands) == 0


def test_long_tool_arguments_are_not_cached() -> None:
    """Arguments longer than the cache limit are extracted each time, never stored."""
    norm = Normalizer()
    long = '{"command": "echo ' + "x" * 10_000 + '"}'
    span = _span(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "shell",
            "gen_ai.tool.call.arguments": long,
        }
    )
    out = norm(Batch(spans=(span,)))
    assert any(o.relation == "declared_command" for o in out.observations)
    assert len(norm._spans._commands) == 0


def test_origin_cache_follows_the_resource_object() -> None:
    """Spans alternating between resources get each resource's own channel and identity."""
    gw = Resource(attributes={"service.name": "litellm-proxy", "process.pid": 9})
    spans = []
    for i in range(4):
        base = _span({"gen_ai.operation.name": "other"})
        resource = gw if i % 2 else RESOURCE
        spans.append(msgspec.structs.replace(base, resource=resource))
    out = Normalizer(NormalizeConfig())(Batch(spans=tuple(spans)))
    channels = [o.source.channel for o in out.observations]
    assert channels == [Channel.SEM, Channel.GW, Channel.SEM, Channel.GW]
    assert [o.attrs["process.pid"] for o in out.observations] == [7, 9, 7, 9]
    assert [o.subject.attrs["service.name"] for o in out.observations] == [
        "svc",
        "litellm-proxy",
        "svc",
        "litellm-proxy",
    ]


def test_processor_leaves_the_gc_alone() -> None:
    """The processor never changes process-wide GC state, which other components share."""
    seen: list[bool] = []

    class Probe(RecordingConsumer):
        def consume(self, batch: Batch) -> None:
            """Record whether the GC was on while this batch arrived."""
            seen.append(gc.isenabled())
            super().consume(batch)

    probe = Probe()
    processor = NormalizeProcessor(Normalizer(), probe)
    span = _span({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"})
    assert gc.isenabled()
    processor.consume(Batch(spans=(span,)))
    assert gc.isenabled()
    assert seen == [True]
    assert len(probe.batches) == 1
    assert len(probe.batches[0].observations) == 1
