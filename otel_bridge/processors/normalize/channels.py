"""Channel assignment of incoming spans (`docs/architecture.md`, channels).

A span's channel is decided once per (resource, scope) pair, in this order:

1. a resource attribute ``evidence.channel`` (``sem``/``gw``/``model``/``os``) always wins;
2. the user's rules, first match wins;
3. the built-in rules (unless ``default_rules: false``), which map known LLM gateway and proxy
   processes and instrumentations to ``gw`` and known model runtimes to ``model``;
4. otherwise ``sem``.

A channel says whose view a span is. A built-in rule that matches the *scope name* (the
instrumentation library) applies only to SERVER spans: an instrumentation named after LiteLLM or
Ollama also instruments their *clients*, and a CLIENT span to a model API is the caller's own
``sem`` view of its model call; the gateway or runtime is the process that *serves* such calls.
Rules on the resource (the emitting process: ``service.name``, ``evidence.channel``) and the
user's rules apply to every span of that process.

A rule matches when every listed resource attribute fully matches its regular expression (the
attribute value converted to a string) and, when given, the scope name fully matches its regular
expression. Regular expressions are case-insensitive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from otel_bridge.model import Channel, Resource, Scope

from .values import get_str


@dataclass(slots=True)
class ScopeMatch:
    """Conditions on the instrumentation scope."""

    name: str = ""
    """Regular expression the scope name must fully match; empty means any scope."""


@dataclass(slots=True)
class RuleMatch:
    """What a channel rule matches."""

    resource: dict[str, str] = field(default_factory=dict)
    """Resource attribute name -> regular expression its value must fully match."""
    scope: ScopeMatch = field(default_factory=ScopeMatch)


@dataclass(slots=True)
class ChannelRule:
    """Spans whose resource and scope match ``match`` get ``channel``."""

    match: RuleMatch = field(default_factory=RuleMatch)
    channel: str = "sem"

    def validate(self) -> list[str]:
        """Problems of this rule, relative to it."""
        problems: list[str] = []
        if self.channel not in {c.value for c in Channel}:
            valid = ", ".join(c.value for c in Channel)
            problems.append(f"channel: {self.channel!r} is not one of {valid}")
        for key, pattern in self.match.resource.items():
            if _compile_error(pattern):
                problems.append(f"match.resource.{key}: {_compile_error(pattern)}")
        if _compile_error(self.match.scope.name):
            problems.append(f"match.scope.name: {_compile_error(self.match.scope.name)}")
        if not self.match.resource and not self.match.scope.name:
            problems.append("match: a rule needs at least one resource or scope condition")
        return problems


def _compile_error(pattern: str) -> str | None:
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"invalid regular expression {pattern!r}: {exc}"
    return None


_GATEWAY = (
    r".*(litellm|portkey|helicone|openllmetry[._-]?gateway|traceloop[._-]?gateway|"
    r"ai[._-]?gateway|llm[._-]?gateway|kong[._-]?ai|gateway|proxy).*"
)
_RUNTIME = (
    r".*(vllm|ollama|llama[._-]?cpp|llama[._-]?server|llamafile|text[._-]generation[._-]"
    r"inference|\btgi\b|sglang|triton[._-]?inference|localai|lm[._-]?studio).*"
)

BUILTIN_RULES: tuple[ChannelRule, ...] = (  # scope rules: SERVER spans only (module docstring)
    ChannelRule(match=RuleMatch(scope=ScopeMatch(name=_GATEWAY)), channel="gw"),
    ChannelRule(match=RuleMatch(resource={"service.name": _GATEWAY}), channel="gw"),
    ChannelRule(match=RuleMatch(scope=ScopeMatch(name=_RUNTIME)), channel="model"),
    ChannelRule(match=RuleMatch(resource={"service.name": _RUNTIME}), channel="model"),
)
"""Default rules: gateway/proxy instrumentations -> ``gw``, model runtimes -> ``model``."""


_CACHE_SIZE = 256
"""(resource, scope) pairs remembered. Spans of one export share their pair, so a few recent
pairs get nearly every hit; a small bound keeps the resources it holds alive few and cheap."""


@dataclass(frozen=True, slots=True)
class _Compiled:
    resource: tuple[tuple[str, re.Pattern[str]], ...]
    scope: re.Pattern[str] | None
    channel: Channel
    serving_only: bool = False
    """A built-in scope rule: it names what serves model calls, so it applies to SERVER spans."""


class ChannelAssigner:
    """Decides the channel of a span from its resource and scope (see the module docstring).

    Results are cached per (resource, scope) object pair, bounded, because every span of one
    export shares the same two objects.
    """

    def __init__(self, rules: list[ChannelRule], *, default_rules: bool = True) -> None:
        builtin = list(BUILTIN_RULES) if default_rules else []
        self._rules = tuple(
            _Compiled(
                resource=tuple(
                    (k, re.compile(v, re.IGNORECASE)) for k, v in r.match.resource.items()
                ),
                scope=re.compile(r.match.scope.name, re.IGNORECASE) if r.match.scope.name else None,
                channel=Channel(r.channel),
                serving_only=i >= len(rules) and bool(r.match.scope.name),
            )
            for i, r in enumerate([*rules, *builtin])
        )
        self._cache: dict[tuple[int, int], tuple[Resource, Scope, tuple[Channel, Channel]]] = {}

    def channel(self, resource: Resource, scope: Scope, *, server: bool = False) -> Channel:
        """The channel of spans under ``resource`` and ``scope`` (of SERVER spans: ``server``)."""
        return self.channels(resource, scope)[1 if server else 0]

    def channels(self, resource: Resource, scope: Scope) -> tuple[Channel, Channel]:
        """The channels of (other spans, SERVER spans) under ``resource`` and ``scope``."""
        key = (id(resource), id(scope))
        hit = self._cache.get(key)
        # The cached objects are kept alive in the entry, so an id cannot be reused meanwhile.
        if hit is not None and hit[0] is resource and hit[1] is scope:
            return hit[2]
        result = (self._decide(resource, scope, False), self._decide(resource, scope, True))
        if len(self._cache) >= _CACHE_SIZE:
            self._cache.clear()
        self._cache[key] = (resource, scope, result)
        return result

    def _decide(self, resource: Resource, scope: Scope, server: bool) -> Channel:
        stated = get_str(resource.attributes, "evidence.channel")
        if stated is not None and stated in {c.value for c in Channel}:
            return Channel(stated)
        for rule in self._rules:
            if rule.serving_only and not server:
                continue
            if rule.scope is not None and not rule.scope.fullmatch(scope.name):
                continue
            if all(
                (value := get_str(resource.attributes, key)) is not None and p.fullmatch(value)
                for key, p in rule.resource
            ):
                return rule.channel
        return Channel.SEM
