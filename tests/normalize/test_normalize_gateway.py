"""Gateway and model-runtime spans: channel on every observation, request ids, shared models."""

from __future__ import annotations

from otel_span_helpers import convert, sdk_tracer

from otel_bridge.model import Batch, Channel, RelationKind, Span
from otel_bridge.processors.normalize import Normalizer

CHAT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "ollama",
    "gen_ai.request.model": "qwen2.5:0.5b",
}


def _agent_span(trace_context: dict[str, str]) -> tuple[Span, ...]:
    from opentelemetry.propagate import inject

    with sdk_tracer({"service.name": "agent-app"}) as (tracer, exporter):
        with (
            tracer.start_as_current_span(
                "invoke_agent helper",
                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"},
            ),
            tracer.start_as_current_span("chat qwen", attributes=CHAT),
        ):
            inject(trace_context)
        return convert(exporter.get_finished_spans())


def _remote(
    service: str, scope: str, carrier: dict[str, str], attrs: dict[str, str]
) -> tuple[Span, ...]:
    from opentelemetry.propagate import extract

    with sdk_tracer({"service.name": service}, scope=scope) as (tracer, exporter):
        with tracer.start_as_current_span("chat", context=extract(carrier), attributes=attrs):
            pass
        return convert(exporter.get_finished_spans())


def test_gateway_and_runtime_spans_join_the_agents_request() -> None:
    """Propagated trace context lets gw and model spans resolve the agent across services."""
    carrier: dict[str, str] = {}
    agent_spans = _agent_span(carrier)
    gw = _remote("litellm-proxy", "litellm", carrier, {**CHAT, "gen_ai.response.id": "chatcmpl-9"})
    runtime = _remote(
        "ollama",
        "opentelemetry.instrumentation.ollama",
        carrier,
        {**CHAT, "gen_ai.response.id": "chatcmpl-9"},
    )
    norm = Normalizer()
    out_remote = norm(Batch(spans=gw + runtime))
    out_agent = norm(Batch(spans=agent_spans))
    requested = [
        o
        for o in out_remote.observations + out_agent.observations
        if o.relation is RelationKind.REQUESTED
    ]
    by_channel = {o.source.channel: o for o in requested}
    assert set(by_channel) == {Channel.SEM, Channel.GW, Channel.MODEL}
    for o in requested:
        assert o.subject.id == "agent:agent-app:helper"
        assert o.object is not None
        assert o.object.id == "model:ollama:qwen2.5:0.5b"
    assert by_channel[Channel.GW].attrs["request.id"] == "chatcmpl-9"
    assert by_channel[Channel.MODEL].attrs["request.id"] == "chatcmpl-9"
    assert "request.id" not in by_channel[Channel.SEM].attrs


def test_every_observation_of_a_gateway_span_is_on_gw() -> None:
    """The entity observation of a gateway span carries the gw channel and otlp backend."""
    spans = _remote("my-gateway", "x", {}, CHAT)
    (obs,) = Normalizer()(Batch(spans=spans)).observations
    assert obs.source.channel is Channel.GW
    assert obs.source.backend == "otlp"
    assert obs.subject.id == "model:ollama:qwen2.5:0.5b"


def test_root_runtime_span_without_caller_requests_nothing() -> None:
    """A model runtime span with no parent is the model entity alone: no invented caller."""
    spans = _remote("vllm", "opentelemetry.instrumentation.vllm", {}, CHAT)
    out = Normalizer()(Batch(spans=spans))
    assert [o.relation for o in out.observations] == [None]
    assert out.coverage == ()
