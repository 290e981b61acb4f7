"""Channel assignment per resource/scope: evidence.channel wins, user rules, built-in rules."""

from __future__ import annotations

import msgspec
import pytest
from otel_span_helpers import model_span

from otel_bridge.model import Batch, Channel, Resource, Scope, SpanKind
from otel_bridge.processors.normalize import (
    ChannelRule,
    NormalizeConfig,
    Normalizer,
    RuleMatch,
    ScopeMatch,
)


def _channel(
    resource: dict[str, str],
    scope: str = "x",
    config: NormalizeConfig | None = None,
    kind: SpanKind = SpanKind.SERVER,
) -> Channel:
    span = model_span("s", 1, resource=Resource(attributes=resource), scope=Scope(name=scope))
    span = msgspec.structs.replace(span, kind=kind)
    (obs,) = Normalizer(config)(Batch(spans=(span,))).observations
    channel: Channel = obs.source.channel
    return channel


@pytest.mark.parametrize(
    ("resource", "scope", "expected"),
    [
        ({"service.name": "agent"}, "openinference.instrumentation.langchain", Channel.SEM),
        ({"service.name": "litellm-proxy"}, "x", Channel.GW),
        ({"service.name": "api"}, "litellm", Channel.GW),
        ({"service.name": "my-llm-gateway"}, "x", Channel.GW),
        ({"service.name": "portkey"}, "x", Channel.GW),
        ({"service.name": "edge"}, "helicone.tracing", Channel.GW),
        ({"service.name": "srv"}, "opentelemetry.instrumentation.vllm", Channel.MODEL),
        ({"service.name": "ollama"}, "x", Channel.MODEL),
        ({"service.name": "llama.cpp-server"}, "x", Channel.MODEL),
        ({"service.name": "text-generation-inference"}, "x", Channel.MODEL),
        ({"service.name": "tgi"}, "x", Channel.MODEL),
        ({"service.name": "worker"}, "x", Channel.SEM),
    ],
)
def test_builtin_rules(resource: dict[str, str], scope: str, expected: Channel) -> None:
    """Known gateways map to gw, model runtimes to model, the rest to sem."""
    assert _channel(resource, scope) is expected


@pytest.mark.parametrize(
    ("scope", "served"),
    [
        ("openinference.instrumentation.litellm", Channel.GW),
        ("opentelemetry.instrumentation.ollama", Channel.MODEL),
        ("opentelemetry.instrumentation.vllm", Channel.MODEL),
    ],
)
def test_scope_names_say_who_serves_not_who_calls(scope: str, served: Channel) -> None:
    """A CLIENT (or INTERNAL) span of a gateway's or runtime's instrumentation is the caller's view.

    The OpenInference LiteLLM instrumentor and the Ollama client instrumentor trace the *client*
    side: those spans are the calling process's ``sem`` model calls; only a SERVER span under such
    a scope is the gateway's or runtime's own view.
    """
    service = {"service.name": "agent"}
    assert _channel(service, scope, kind=SpanKind.CLIENT) is Channel.SEM
    assert _channel(service, scope, kind=SpanKind.INTERNAL) is Channel.SEM
    assert _channel(service, scope, kind=SpanKind.SERVER) is served


def test_resource_rules_apply_to_every_span_of_the_process() -> None:
    """A gateway process (by ``service.name``) is ``gw`` for its client spans too."""
    assert _channel({"service.name": "litellm-proxy"}, kind=SpanKind.CLIENT) is Channel.GW


def test_evidence_channel_resource_attribute_always_wins() -> None:
    """A resource's evidence.channel beats user and built-in rules."""
    config = NormalizeConfig(
        channel_rules=[ChannelRule(match=RuleMatch(resource={"service.name": ".*"}), channel="gw")]
    )
    resource = {"service.name": "litellm", "evidence.channel": "model"}
    assert _channel(resource, config=config) is Channel.MODEL


def test_user_rule_before_builtin_rules() -> None:
    """A user rule matching a gateway-looking service can keep it sem."""
    config = NormalizeConfig(
        channel_rules=[
            ChannelRule(match=RuleMatch(resource={"service.name": "my-proxy"}), channel="sem")
        ]
    )
    assert _channel({"service.name": "my-proxy"}, config=config) is Channel.SEM
    assert _channel({"service.name": "other-proxy"}, config=config) is Channel.GW


def test_rule_needs_every_condition() -> None:
    """A rule with resource and scope conditions matches only when both hold."""
    rule = ChannelRule(
        match=RuleMatch(
            resource={"deployment.environment": "prod"}, scope=ScopeMatch(name="gw\\..*")
        ),
        channel="gw",
    )
    config = NormalizeConfig(channel_rules=[rule], default_rules=False)
    assert _channel({"deployment.environment": "prod"}, "gw.router", config) is Channel.GW
    assert _channel({"deployment.environment": "prod"}, "other", config) is Channel.SEM
    assert _channel({"deployment.environment": "dev"}, "gw.router", config) is Channel.SEM


def test_default_rules_can_be_turned_off() -> None:
    """default_rules: false leaves gateways on sem unless a rule says otherwise."""
    config = NormalizeConfig(default_rules=False)
    assert _channel({"service.name": "litellm"}, config=config) is Channel.SEM


def test_rule_validation_names_each_problem() -> None:
    """Invalid channel, bad regex and an empty match are all reported with their key path."""
    config = NormalizeConfig(
        channel_rules=[
            ChannelRule(match=RuleMatch(resource={"service.name": "("}), channel="satellite"),
            ChannelRule(),
        ],
        span_cache_size=0,
    )
    problems = config.validate()
    assert any(p.startswith("channel_rules[0].channel: 'satellite'") for p in problems)
    assert any(p.startswith("channel_rules[0].match.resource.service.name:") for p in problems)
    assert any(p.startswith("channel_rules[1].match:") for p in problems)
    assert "span_cache_size: must be at least 1" in problems


def test_rules_load_from_yaml_config() -> None:
    """The Collector-shaped config loads channel_rules into typed rules."""
    from otel_bridge.config import parse_config

    config = parse_config(
        {
            "receivers": {"otlp": {}},
            "processors": {
                "normalize": {
                    "channel_rules": [
                        {"match": {"resource": {"service.name": "edge-.*"}}, "channel": "gw"},
                        {"match": {"scope": {"name": "acme\\.runtime"}}, "channel": "model"},
                    ]
                }
            },
            "exporters": {"graph": {"output": "g.json"}},
            "service": {
                "pipelines": {
                    "evidence": {
                        "receivers": ["otlp"],
                        "processors": ["normalize"],
                        "exporters": ["graph"],
                    }
                }
            },
        }
    )
    normalize_config = config.processors["normalize"].config
    assert isinstance(normalize_config, NormalizeConfig)
    assert _channel({"service.name": "edge-1"}, config=normalize_config) is Channel.GW
    assert _channel({"service.name": "s"}, "acme.runtime", normalize_config) is Channel.MODEL
