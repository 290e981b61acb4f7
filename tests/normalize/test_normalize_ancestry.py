"""Agent parents resolved by walking the span tree, within and across batches."""

from __future__ import annotations

from otel_span_helpers import model_span

from otel_bridge.model import Batch, CoverageRecord, RelationKind, Span
from otel_bridge.processors.normalize import NormalizeConfig, NormalizeProcessor, Normalizer
from otel_bridge.testing import RecordingConsumer

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}


def _agent(span_id: int = 1, parent: int | None = None, trace: int = 1) -> Span:
    return model_span("invoke_agent planner", span_id, parent=parent, attrs=AGENT, trace=trace)


def _tool(span_id: int, parent: int, trace: int = 1) -> Span:
    return model_span("execute_tool search", span_id, parent=parent, attrs=TOOL, trace=trace)


def _invoked(batch: Batch) -> list[str]:
    return [o.id for o in batch.observations if o.relation is RelationKind.INVOKED]


def test_child_before_parent_in_one_batch() -> None:
    """A tool span listed before its agent span in the same batch still gets `invoked`."""
    out = Normalizer()(Batch(spans=(_tool(2, parent=1), _agent(1))))
    assert _invoked(out) == ["0000000000000002#1"]


def test_parent_in_an_earlier_batch() -> None:
    """The agent arrived in an earlier batch: the LRU resolves the tool's parent."""
    norm = Normalizer()
    norm(Batch(spans=(_agent(1),)))
    assert _invoked(norm(Batch(spans=(_tool(2, parent=1),)))) == ["0000000000000002#1"]


def test_parent_in_a_later_batch_emits_the_same_observation_then() -> None:
    """A tool waits for its agent; the `invoked` relation appears with the agent's batch."""
    norm = Normalizer()
    first = norm(Batch(spans=(_tool(2, parent=1),)))
    assert _invoked(first) == []
    assert first.coverage == ()
    second = norm(Batch(spans=(_agent(1),)))
    assert _invoked(second) == ["0000000000000002#1"]
    relation = next(o for o in second.observations if o.relation is RelationKind.INVOKED)
    assert relation.source.record_id == "0000000000000002"


def test_walk_through_intermediate_spans_across_batches() -> None:
    """tool -> chain -> agent arriving tool, agent, chain still resolves to the agent."""
    norm = Normalizer()
    chain = model_span("chain", 5, parent=1)
    norm(Batch(spans=(_tool(2, parent=5),)))
    norm(Batch(spans=(_agent(1),)))
    third = norm(Batch(spans=(chain,)))
    assert _invoked(third) == ["0000000000000002#1"]


def test_parent_that_never_arrives_is_reported_at_shutdown() -> None:
    """At shutdown the processor forwards a `parent_span_missing` coverage record."""
    sink = RecordingConsumer()
    proc = NormalizeProcessor(Normalizer(), sink)
    proc.consume(Batch(spans=(_tool(2, parent=99),)))
    proc.shutdown()
    proc.shutdown()
    coverage: list[CoverageRecord] = [c for b in sink.batches for c in b.coverage]
    assert [c.reason for c in coverage] == ["parent_span_missing"]
    assert coverage[0].source.record_id == "0000000000000002"
    assert not [o for b in sink.batches for o in b.observations if o.is_relation]


def test_pending_overflow_is_reported_not_guessed() -> None:
    """When the pending table overflows, the oldest waiting relation becomes coverage."""
    norm = Normalizer(NormalizeConfig(pending_cache_size=2))
    out = norm(Batch(spans=tuple(_tool(10 + i, parent=100 + i) for i in range(3))))
    assert [c.reason for c in out.coverage] == ["parent_span_missing"]
    assert out.coverage[0].source.record_id == f"{10:016x}"
    assert len(norm.drain()) == 2


def test_same_span_ids_in_different_traces_do_not_mix() -> None:
    """Ancestry is keyed by (trace, span): a parent id in another trace does not match."""
    norm = Normalizer()
    norm(Batch(spans=(_agent(1, trace=1),)))
    out = norm(Batch(spans=(_tool(2, parent=1, trace=2),)))
    assert _invoked(out) == []
    assert [c.reason for c in norm.drain()] == ["parent_span_missing"]


def test_agent_recursion_is_not_self_delegation() -> None:
    """An agent span nested in the same agent's span gives no delegated_to self-loop."""
    out = Normalizer()(Batch(spans=(_agent(1), _agent(2, parent=1))))
    assert not [o for o in out.observations if o.relation is RelationKind.DELEGATED_TO]


def test_lru_forgets_old_spans() -> None:
    """With a span cache of 1, an evicted agent is unknown and the tool waits for it."""
    norm = Normalizer(NormalizeConfig(span_cache_size=1))
    norm(Batch(spans=(_agent(1), model_span("other", 3))))
    out = norm(Batch(spans=(_tool(2, parent=1),)))
    assert _invoked(out) == []
    assert [c.reason for c in norm.drain()] == ["parent_span_missing"]
