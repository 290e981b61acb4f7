"""Normalizing twice changes nothing; the processor and factory follow the component contract."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from otel_span_helpers import model_span, os_record

from otel_bridge.component import CreateSettings, Host
from otel_bridge.model import Batch, LogRecord, Span
from otel_bridge.processors.normalize import (
    NormalizeConfig,
    NormalizeProcessor,
    Normalizer,
    factory,
)
from otel_bridge.testing import RecordingConsumer

OPS = [
    {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
    {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "b"},
    {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "shell",
        "gen_ai.tool.call.arguments": '{"command": "ls"}',
    },
    {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "bash",
        "gen_ai.tool.call.arguments": '{"cmd": "a", "command": "b"}',
    },
    {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.provider.name": "p"},
    {"openinference.span.kind": "CHAIN"},
    {},
]
EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("process.start", {"process__parent_pid": 1, "process__executable__path": "/bin/sh"}),
    ("file.open", {"file__path": "/tmp/x"}),
    ("network.connect", {"network__peer__address": "10.0.0.1", "network__peer__port": 443}),
    ("collection.state", {"collection__name": "file", "collection__state": "degraded"}),
    ("bogus.event", {}),
]


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    """Random trees of GenAI/plain spans (parents may be missing) and OS records."""
    n = draw(st.integers(0, 12))
    spans: list[Span] = []
    for i in range(1, n + 1):
        parent = draw(st.one_of(st.none(), st.integers(1, n + 2)))
        if parent == i:
            parent = None
        attrs = draw(st.sampled_from(OPS))
        spans.append(model_span(f"s{i}", i, parent=parent, attrs=attrs))
    logs: list[LogRecord] = []
    for j in range(draw(st.integers(0, 6))):
        event, attrs = draw(st.sampled_from(EVENTS))
        logs.append(os_record(event, f"linux:{j}", **attrs))
    order = draw(st.permutations(spans))
    return Batch(spans=tuple(order), logs=tuple(logs))


@settings(max_examples=60, deadline=None)
@given(batches())
def test_normalize_twice_adds_nothing(batch: Batch) -> None:
    """normalize(normalize(b)) has the same observations and coverage as normalize(b)."""
    once = Normalizer()(batch)
    twice = Normalizer()(once)
    assert twice.observations == once.observations
    assert twice.coverage == once.coverage
    assert twice.spans == batch.spans
    assert twice.logs == batch.logs
    same_instance = Normalizer()
    first = same_instance(batch)
    assert same_instance(first).observations == first.observations


@settings(max_examples=40, deadline=None)
@given(batches())
def test_observation_ids_are_unique_and_deterministic(batch: Batch) -> None:
    """Observation ids are unique within a result and equal across runs."""
    a = Normalizer()(batch)
    b = Normalizer()(batch)
    ids = [o.id for o in a.observations]
    assert len(ids) == len(set(ids))
    assert a.observations == b.observations


def test_existing_observations_pass_through_unchanged() -> None:
    """Observations already in the batch are kept as they are, first."""
    done = Normalizer()(Batch(spans=(model_span("x", 1),)))
    out = Normalizer()(Batch(spans=(model_span("y", 2),), observations=done.observations))
    assert out.observations[: len(done.observations)] == done.observations
    assert len(out.observations) == len(done.observations) + 1


def test_factory_lifecycle_forwards_batches() -> None:
    """The factory's processor validates its default config, starts, forwards, shuts down."""
    config = factory.default_config()
    assert isinstance(config, NormalizeConfig)
    assert config.validate() == []
    sink = RecordingConsumer()
    proc = factory.create(CreateSettings(id="normalize"), config, sink)
    assert isinstance(proc, NormalizeProcessor)
    proc.shutdown()  # safe before start
    proc.start(Host())
    proc.consume(Batch(spans=(model_span("x", 1),)))
    proc.shutdown()
    proc.shutdown()
    assert [len(b.observations) for b in sink.batches] == [1]


def test_empty_batch_is_not_forwarded() -> None:
    """An empty batch produces nothing downstream."""
    sink = RecordingConsumer()
    proc = factory.create(CreateSettings(id="normalize"), NormalizeConfig(), sink)
    assert isinstance(proc, NormalizeProcessor)
    proc.consume(Batch())
    assert sink.batches == []
