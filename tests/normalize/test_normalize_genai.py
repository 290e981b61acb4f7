"""Spans following the OpenTelemetry GenAI semantic conventions, recorded with the real SDK."""

from __future__ import annotations

from opentelemetry.trace import Status, StatusCode
from otel_span_helpers import convert, model_span, sdk_tracer

from otel_bridge.model import (
    Attribution,
    Batch,
    Channel,
    EntityKind,
    Observation,
    RelationKind,
    Resource,
    Span,
)
from otel_bridge.processors.normalize import Normalizer

RESOURCE = {
    "service.name": "agents",
    "process.pid": 4242,
    "host.id": "host-1",
    "process.creation.time": "2026-01-01T00:00:00.000Z",
}


def _agent_trace() -> tuple[Span, ...]:
    with sdk_tracer(RESOURCE, scope="my.agent.framework") as (tracer, exporter):
        with tracer.start_as_current_span(
            "invoke_agent planner",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "planner",
                "gen_ai.agent.id": "agent-7",
                "gen_ai.conversation.id": "conv-1",
            },
        ):
            with tracer.start_as_current_span(
                "chat gpt-4o",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.response.model": "gpt-4o-2024-08-06",
                    "gen_ai.response.id": "chatcmpl-1",
                },
            ):
                pass
            with tracer.start_as_current_span(
                "execute_tool shell",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "shell",
                    "gen_ai.tool.call.id": "call_1",
                    "gen_ai.tool.call.arguments": '{"command": "ls -la /tmp", "timeout": 5}',
                },
            ) as tool:
                tool.set_status(Status(StatusCode.ERROR, "exit 1"))
            with (
                tracer.start_as_current_span(
                    "invoke_agent coder",
                    attributes={
                        "gen_ai.operation.name": "invoke_agent",
                        "gen_ai.agent.name": "coder",
                    },
                ),
                tracer.start_as_current_span(
                    "execute_tool read_file",
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "read_file",
                        "gen_ai.tool.call.arguments": '{"path": "/etc/hosts"}',
                    },
                ),
            ):
                pass
        return convert(exporter.get_finished_spans())


def _relations(obs: tuple[Observation, ...], relation: RelationKind) -> list[Observation]:
    return [o for o in obs if o.relation is relation]


def test_agent_invokes_tool_and_requests_model() -> None:
    """invoke_agent -> execute_tool gives `invoked`; chat under the agent gives `requested`."""
    out = Normalizer()(Batch(spans=_agent_trace()))
    invoked = _relations(out.observations, RelationKind.INVOKED)
    assert {(o.subject.id, o.object.label) for o in invoked if o.object} == {
        ("agent:agents:agent-7", "shell"),
        ("agent:agents:coder", "read_file"),
    }
    requested = _relations(out.observations, RelationKind.REQUESTED)
    assert len(requested) == 1
    assert requested[0].subject.id == "agent:agents:agent-7"
    assert requested[0].object is not None
    assert requested[0].object.id == "model:openai:gpt-4o"
    assert requested[0].attrs["request.id"] == "chatcmpl-1"
    assert requested[0].attrs["gen_ai.response.model"] == "gpt-4o-2024-08-06"


def test_sub_agent_is_delegated_to() -> None:
    """A nested invoke_agent span gives `delegated_to` from the enclosing agent."""
    out = Normalizer()(Batch(spans=_agent_trace()))
    delegated = _relations(out.observations, RelationKind.DELEGATED_TO)
    assert [(o.subject.id, o.object.id if o.object else "") for o in delegated] == [
        ("agent:agents:agent-7", "agent:agents:coder")
    ]


def test_sem_relations_are_reported_without_causal_flag() -> None:
    """Span relations carry attribution `reported` and no causal, inferred or exact flag."""
    out = Normalizer()(Batch(spans=_agent_trace()))
    for o in out.observations:
        assert o.source.channel is Channel.SEM
        assert o.source.backend == "otlp"
        if o.is_relation:
            assert o.evidence.attribution is Attribution.REPORTED
            assert o.evidence.causal is None
            assert o.evidence.inferred is None
            assert o.evidence.identity_exact is None


def test_every_span_observation_carries_trace_and_process_identity() -> None:
    """trace_id, span_id and the resource's pid, host id and creation time ride on every obs."""
    spans = _agent_trace()
    out = Normalizer()(Batch(spans=spans))
    span_ids = {s.span_id.hex() for s in spans}
    for o in out.observations:
        assert o.attrs["span_id"] in span_ids
        assert o.attrs["trace_id"] == spans[0].trace_id.hex()
        assert o.attrs["process.pid"] == 4242
        assert o.attrs["host.id"] == "host-1"
        assert o.attrs["process.creation.time"] == "2026-01-01T00:00:00.000Z"
        assert o.occurrence == f"{o.attrs['trace_id']}:{o.source.record_id}"
        assert o.id.startswith(f"{o.source.record_id}#")


def test_declared_command_has_tool_span_times_and_status() -> None:
    """declared_command: tool call -> command, span start/end times, status, redacted line."""
    spans = _agent_trace()
    tool_span = next(s for s in spans if s.name == "execute_tool shell")
    out = Normalizer()(Batch(spans=spans))
    (decl,) = _relations(out.observations, RelationKind.DECLARED_COMMAND)
    trace, span = tool_span.trace_id.hex(), tool_span.span_id.hex()
    assert decl.subject.id == f"tool_call:{trace}:{span}"
    assert decl.subject.attrs["gen_ai.tool.call.id"] == "call_1"
    assert decl.subject.attrs["gen_ai.tool.name"] == "shell"
    assert decl.object is not None
    assert decl.object.kind is EntityKind.COMMAND
    assert decl.object.id == f"command:{trace}:{span}"
    assert decl.object.attrs["command.line"] == "ls -la /tmp"
    assert decl.time_unix_nano == tool_span.start_time_unix_nano
    assert decl.end_time_unix_nano == tool_span.end_time_unix_nano
    assert decl.attrs["span.status"] == "error"


def test_tool_without_command_declares_nothing_and_reports_nothing() -> None:
    """A read_file tool has no command: no declared_command and no coverage noise."""
    out = Normalizer()(Batch(spans=_agent_trace()))
    decls = _relations(out.observations, RelationKind.DECLARED_COMMAND)
    assert all(o.subject.label != "read_file" for o in decls)
    assert [c.reason for c in out.coverage] == []


def test_conversation_id_makes_agent_part_of_session() -> None:
    """gen_ai.conversation.id on an agent span gives `part_of` a conversation session."""
    out = Normalizer()(Batch(spans=_agent_trace()))
    (part,) = _relations(out.observations, RelationKind.PART_OF)
    assert part.subject.id == "agent:agents:agent-7"
    assert part.object is not None
    assert part.object.id == "session:conversation:conv-1"


def test_provider_ids_stay_as_attributes() -> None:
    """Provider identifiers (agent id, conversation id) are kept as entity attributes."""
    out = Normalizer()(Batch(spans=_agent_trace()))
    planner = next(o.subject for o in out.observations if o.subject.id == "agent:agents:agent-7")
    assert planner.attrs["gen_ai.agent.id"] == "agent-7"
    assert planner.attrs["gen_ai.conversation.id"] == "conv-1"
    assert planner.attrs["service.name"] == "agents"


def test_old_gen_ai_system_names_the_provider() -> None:
    """The deprecated gen_ai.system attribute still names the model's provider."""
    spans = (
        model_span(
            "invoke_agent a",
            1,
            attrs={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
        ),
        model_span(
            "text_completion",
            2,
            parent=1,
            attrs={
                "gen_ai.operation.name": "text_completion",
                "gen_ai.system": "Anthropic",
                "gen_ai.response.model": "claude-x",
            },
        ),
    )
    out = Normalizer()(Batch(spans=spans))
    (req,) = _relations(out.observations, RelationKind.REQUESTED)
    assert req.object is not None
    assert req.object.id == "model:anthropic:claude-x"


def test_create_agent_makes_an_agent_without_relations() -> None:
    """create_agent yields the agent entity only (creating is not delegating)."""
    spans = (
        model_span(
            "invoke_agent boss",
            1,
            attrs={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "boss"},
        ),
        model_span(
            "create_agent helper",
            2,
            parent=1,
            attrs={"gen_ai.operation.name": "create_agent", "gen_ai.agent.name": "helper"},
        ),
    )
    out = Normalizer()(Batch(spans=spans))
    assert {o.subject.id for o in out.observations} == {"agent:svc:boss", "agent:svc:helper"}
    assert not [o for o in out.observations if o.is_relation]


def test_agent_span_naming_a_model_requests_it() -> None:
    """An invoke_agent span carrying gen_ai.request.model adds `requested` agent -> model."""
    span = model_span(
        "invoke_agent a",
        1,
        attrs={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "a",
            "gen_ai.provider.name": "ollama",
            "gen_ai.request.model": "qwen2.5:0.5b",
        },
    )
    out = Normalizer()(Batch(spans=(span,)))
    (req,) = _relations(out.observations, RelationKind.REQUESTED)
    assert req.id.endswith("#3")
    assert req.object is not None
    assert req.object.id == "model:ollama:qwen2.5:0.5b"


def test_nameless_agent_gets_a_per_span_identity() -> None:
    """An agent span naming nothing is one agent per span, never merged with others."""
    spans = (
        model_span("invoke_agent", 1, attrs={"gen_ai.operation.name": "invoke_agent"}),
        model_span("invoke_agent", 2, attrs={"gen_ai.operation.name": "invoke_agent"}),
    )
    out = Normalizer()(Batch(spans=spans))
    ids = {o.subject.id for o in out.observations}
    assert len(ids) == 2


def test_embeddings_without_model_is_a_plain_span_with_coverage() -> None:
    """A model call naming no model is kept as a plain span and reported as coverage."""
    span = model_span("embeddings", 1, attrs={"gen_ai.operation.name": "embeddings"})
    out = Normalizer()(Batch(spans=(span,)))
    assert [o.subject.kind for o in out.observations] == [EntityKind.SPAN]
    assert [c.reason for c in out.coverage] == ["model_name_missing"]


def test_plain_spans_nest_with_child_of() -> None:
    """Plain spans become span entities linked child_of their parent span."""
    spans = (
        model_span("root", 1),
        model_span("step", 2, parent=1),
        model_span("leaf", 3, parent=2),
    )
    out = Normalizer()(Batch(spans=spans))
    child_of = _relations(out.observations, RelationKind.CHILD_OF)
    pairs = {(o.subject.label, o.object.label if o.object else "") for o in child_of}
    assert pairs == {("step", "root"), ("leaf", "step")}


def test_spans_and_logs_pass_through_unchanged() -> None:
    """normalize keeps the original spans and logs, in order, as the same objects."""
    spans = _agent_trace()
    batch = Batch(spans=spans)
    out = Normalizer()(batch)
    assert out.spans == spans
    assert all(a is b for a, b in zip(out.spans, spans, strict=True))


def test_resource_without_identity_adds_no_process_attributes() -> None:
    """Without process attributes on the resource, observations carry only trace ids."""
    span = model_span("x", 1, resource=Resource(attributes={"service.name": "s"}))
    (obs,) = Normalizer()(Batch(spans=(span,))).observations
    assert "process.pid" not in obs.attrs
    assert obs.subject.attrs["service.name"] == "s"
