"""Spans -> canonical observations (GenAI semantic conventions, OpenInference, plain spans).

Every span yields one entity observation (``#0``) for the node it stands for, then relations:

=====================  ============================================  ===========================
span                   node                                          relations
=====================  ============================================  ===========================
``invoke_agent`` /     agent ``agent:<service>:<name or id>``        ``delegated_to`` nearest
OpenInference AGENT                                                  agent ancestor -> agent
``create_agent``       agent                                         none
``execute_tool`` /     tool call ``tool_call:<trace>:<span>``        ``invoked`` nearest agent
OpenInference TOOL                                                   ancestor -> tool call;
                                                                     ``declared_command``
``chat`` / ``text_``   model ``model:<provider>:<name>``             ``requested`` nearest agent
``completion`` /                                                     or tool call ancestor (else
``embeddings`` / LLM /                                               nearest span) -> model
EMBEDDING
anything else          span ``span:<trace>:<span>``                  ``child_of`` -> parent's node
=====================  ============================================  ===========================

An agent or tool call with no agent ancestor is linked ``child_of`` its nearest ancestor node,
so a trace stays connected. An agent or tool span that itself names a model adds ``requested``
(``#3``); a span carrying a conversation or session id at an agent or root adds ``part_of`` a
session (``#4``). Observation ids are ``<span hex>#<slot>`` with a fixed slot per role, so a
relation resolved late (its ancestor arrived in a later batch) has the same id it would have had.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from otel_bridge.identity import kind_id
from otel_bridge.model import (
    AnyValue,
    Attributes,
    Attribution,
    CoverageRecord,
    Entity,
    EntityKind,
    Evidence,
    Observation,
    RelationKind,
    Source,
    Span,
    StatusCode,
)

from ._values import get_str
from .ancestry import Ancestry, Found, Missing, Outcome, PendingLink, Role, Root, SpanInfo
from .channels import ChannelAssigner
from .command import extract_command

REPORTED = Evidence(attribution=Attribution.REPORTED)
"""Evidence of every relation a span states about itself (no causal flag)."""

_AGENT_OPS = frozenset({"invoke_agent", "create_agent"})
_MODEL_OPS = frozenset({"chat", "text_completion", "embeddings", "generate_content"})
_OI_MODEL = frozenset({"LLM", "EMBEDDING"})
_AGENTS = frozenset({Role.AGENT})
_AGENTS_TOOLS = frozenset({Role.AGENT, Role.TOOL})
_ANY = frozenset({Role.AGENT, Role.TOOL, Role.PLAIN})
_RESOURCE_IDENTITY = ("process.pid", "host.id", "process.creation.time")
_STATUS = {StatusCode.OK: "ok", StatusCode.ERROR: "error", StatusCode.UNSET: "unset"}
_ENTITY_KEYS = (
    "gen_ai.agent.name",
    "gen_ai.agent.id",
    "gen_ai.conversation.id",
    "gen_ai.provider.name",
    "gen_ai.system",
    "agent.name",
    "session.id",
    "graph.node.id",
    "graph.node.name",
    "openinference.span.kind",
)


@dataclass(frozen=True, slots=True)
class _Ctx:
    """What every observation of one span shares."""

    source: Source
    occurrence: str
    start: int
    end: int
    attrs: Attributes
    record: str


class SpanNormalizer:
    """Turns spans into observations, resolving ancestors through an :class:`Ancestry`."""

    def __init__(self, assigner: ChannelAssigner, ancestry: Ancestry) -> None:
        self._assigner = assigner
        self._ancestry = ancestry

    def normalize(self, span: Span) -> tuple[list[Observation], list[CoverageRecord]]:
        """Observations and coverage records of one span (plus links it resolved)."""
        a = span.attributes
        channel = self._assigner.channel(span.resource, span.scope)
        trace, span_hex = span.trace_id.hex(), span.span_id.hex()
        obs_attrs: dict[str, AnyValue] = {"trace_id": trace, "span_id": span_hex}
        for key in _RESOURCE_IDENTITY:
            value = span.resource.attributes.get(key)
            if value is not None:
                obs_attrs[key] = value
        obs_attrs["span.name"] = span.name
        obs_attrs["span.status"] = _STATUS.get(span.status.code, "unset")
        ctx = _Ctx(
            source=Source(channel=channel, backend="otlp", record_id=span_hex),
            occurrence=f"{trace}:{span_hex}",
            start=span.start_time_unix_nano,
            end=span.end_time_unix_nano,
            attrs=obs_attrs,
            record=span_hex,
        )
        out: list[Observation] = []
        coverage: list[CoverageRecord] = []
        op = get_str(a, "gen_ai.operation.name") or ""
        oi_kind = (get_str(a, "openinference.span.kind") or "").upper()
        service = get_str(span.resource.attributes, "service.name") or "unknown_service"
        parent = (span.trace_id, span.parent_span_id) if span.parent_span_id else None
        role, entity = self._classify(span, op, oi_kind, service, coverage=coverage, ctx=ctx)
        out.append(_obs(ctx, 0, entity))
        own = entity if role is not Role.MODEL else None

        if role is Role.AGENT:
            if op != "create_agent":
                self._link(
                    out,
                    coverage,
                    ctx,
                    parent,
                    accept=_AGENTS,
                    resolve=_delegation(ctx, entity),
                )
        elif role is Role.TOOL:
            self._link(out, coverage, ctx, parent, accept=_AGENTS, resolve=_invocation(ctx, entity))
            self._command(out, coverage, ctx, entity, a)
        elif role is Role.MODEL:
            request = _request(ctx, entity, _request_attrs(ctx, a))
            self._link(out, coverage, ctx, parent, accept=_AGENTS_TOOLS, resolve=request)
        else:
            self._link(out, coverage, ctx, parent, accept=_ANY, resolve=_nesting(ctx, entity))
        if role in (Role.AGENT, Role.TOOL) and _model_name(a):
            model = _model_entity(a)
            out.append(
                _rel(ctx, 3, entity, RelationKind.REQUESTED, model, attrs=_request_attrs(ctx, a))
            )
        session_id = get_str(a, "gen_ai.conversation.id", "session.id")
        if session_id and (role is Role.AGENT or parent is None):
            session = Entity(
                kind=EntityKind.SESSION,
                id=kind_id(EntityKind.SESSION, "conversation", session_id),
                label=session_id,
                attrs={"session.id": session_id},
            )
            out.append(_rel(ctx, 4, entity, RelationKind.PART_OF, session))

        for link in self._ancestry.remember(
            (span.trace_id, span.span_id), SpanInfo(role, own, parent)
        ):
            self._resume(out, coverage, (span.trace_id, span.span_id), link)
        return out, coverage

    def drain(self) -> list[CoverageRecord]:
        """Coverage records for every relation still waiting for an ancestor."""
        return [_missing(link) for link in self._ancestry.drain()]

    # -- classification ---------------------------------------------------------------------

    def _classify(
        self,
        span: Span,
        op: str,
        oi_kind: str,
        service: str,
        *,
        coverage: list[CoverageRecord],
        ctx: _Ctx,
    ) -> tuple[Role, Entity]:
        a = span.attributes
        trace, span_hex = span.trace_id.hex(), span.span_id.hex()
        if op in _AGENT_OPS or (not op and oi_kind == "AGENT"):
            name = get_str(a, "gen_ai.agent.name", "agent.name", "gen_ai.agent.id")
            if name is None:
                stripped = span.name.removeprefix(op).strip() if op else span.name.strip()
                name = stripped or None
            agent_key = name if name is not None else f"span:{trace}:{span_hex}"
            attrs = _pick(a, _ENTITY_KEYS)
            attrs["service.name"] = service
            return Role.AGENT, Entity(
                kind=EntityKind.AGENT,
                id=kind_id(EntityKind.AGENT, service, agent_key),
                label=name or span.name,
                attrs=attrs,
            )
        if op == "execute_tool" or (not op and oi_kind == "TOOL"):
            tool = _tool_name(span, op)
            attrs = {"gen_ai.tool.name": tool, "trace_id": trace, "span_id": span_hex}
            call_id = get_str(a, "gen_ai.tool.call.id", "tool_call.id")
            if call_id is not None:
                attrs["gen_ai.tool.call.id"] = call_id
            return Role.TOOL, Entity(
                kind=EntityKind.TOOL_CALL,
                id=kind_id(EntityKind.TOOL_CALL, trace, span_hex),
                label=tool,
                attrs=attrs,
            )
        if op in _MODEL_OPS or (not op and oi_kind in _OI_MODEL):
            if _model_name(a):
                return Role.MODEL, _model_entity(a)
            coverage.append(
                CoverageRecord(
                    source=ctx.source,
                    reason="model_name_missing",
                    time_unix_nano=ctx.start,
                    detail=f"model call span {span.name!r} names no model; kept as a plain span",
                )
            )
        attrs = _pick(a, _ENTITY_KEYS)
        attrs.update({"span.name": span.name, "trace_id": trace, "span_id": span_hex})
        attrs["service.name"] = service
        return Role.PLAIN, Entity(
            kind=EntityKind.SPAN,
            id=kind_id(EntityKind.SPAN, trace, span_hex),
            label=span.name,
            attrs=attrs,
        )

    # -- relations to ancestors ---------------------------------------------------------------

    def _link(
        self,
        out: list[Observation],
        coverage: list[CoverageRecord],
        ctx: _Ctx,
        parent: tuple[bytes, bytes] | None,
        *,
        accept: frozenset[Role],
        resolve: Callable[[Outcome], list[Observation]],
    ) -> None:
        outcome, fallback = self._ancestry.walk(parent, accept)
        if isinstance(outcome, Missing):
            link = PendingLink(
                accept, fallback, resolve, ctx.source, ctx.start, f"span {ctx.occurrence}"
            )
            for lost in self._ancestry.wait(outcome.key, link):
                coverage.append(_missing(lost))
            return
        out.extend(resolve(outcome))

    def _resume(
        self,
        out: list[Observation],
        coverage: list[CoverageRecord],
        key: tuple[bytes, bytes],
        link: PendingLink,
    ) -> None:
        outcome, fallback = self._ancestry.walk(key, link.accept, link.fallback)
        if isinstance(outcome, Missing):
            moved = PendingLink(
                link.accept, fallback, link.resolve, link.source, link.time_unix_nano, link.describe
            )
            for lost in self._ancestry.wait(outcome.key, moved):
                coverage.append(_missing(lost))
            return
        out.extend(link.resolve(outcome))

    def _command(
        self,
        out: list[Observation],
        coverage: list[CoverageRecord],
        ctx: _Ctx,
        tool: Entity,
        a: Attributes,
    ) -> None:
        result = extract_command(tool.label, a)
        if result.command is not None:
            trace, span_hex = ctx.occurrence.split(":")
            command = Entity(
                kind=EntityKind.COMMAND,
                id=kind_id(EntityKind.COMMAND, trace, span_hex),
                label=result.command,
                attrs={"command.line": result.command, "gen_ai.tool.name": tool.label},
            )
            out.append(_rel(ctx, 2, tool, RelationKind.DECLARED_COMMAND, command))
        elif result.reason is not None:
            coverage.append(
                CoverageRecord(
                    source=ctx.source,
                    reason="command_not_extracted",
                    time_unix_nano=ctx.start,
                    detail=f"tool {tool.label!r}: {result.reason}",
                )
            )


# -- builders ---------------------------------------------------------------------------------


def _obs(ctx: _Ctx, slot: int, entity: Entity) -> Observation:
    return Observation(
        id=f"{ctx.record}#{slot}",
        time_unix_nano=ctx.start,
        end_time_unix_nano=ctx.end,
        source=ctx.source,
        subject=entity,
        occurrence=ctx.occurrence,
        attrs=ctx.attrs,
    )


def _rel(
    ctx: _Ctx,
    slot: int,
    subject: Entity,
    relation: RelationKind,
    obj: Entity,
    *,
    attrs: Attributes | None = None,
) -> Observation:
    return Observation(
        id=f"{ctx.record}#{slot}",
        time_unix_nano=ctx.start,
        end_time_unix_nano=ctx.end,
        source=ctx.source,
        subject=subject,
        relation=relation,
        object=obj,
        evidence=REPORTED,
        occurrence=ctx.occurrence,
        attrs=ctx.attrs if attrs is None else attrs,
    )


def _delegation(ctx: _Ctx, agent: Entity) -> Callable[[Outcome], list[Observation]]:
    def resolve(outcome: Outcome) -> list[Observation]:
        if isinstance(outcome, Found):
            if outcome.entity.id == agent.id:
                return []  # an agent's own nested invocation is not a delegation
            return [_rel(ctx, 1, outcome.entity, RelationKind.DELEGATED_TO, agent)]
        return _fallback(ctx, agent, outcome)

    return resolve


def _invocation(ctx: _Ctx, tool: Entity) -> Callable[[Outcome], list[Observation]]:
    def resolve(outcome: Outcome) -> list[Observation]:
        if isinstance(outcome, Found):
            return [_rel(ctx, 1, outcome.entity, RelationKind.INVOKED, tool)]
        return _fallback(ctx, tool, outcome)

    return resolve


def _request(ctx: _Ctx, model: Entity, attrs: Attributes) -> Callable[[Outcome], list[Observation]]:
    def resolve(outcome: Outcome) -> list[Observation]:
        caller = outcome.entity if isinstance(outcome, Found) else None
        if isinstance(outcome, Root):
            caller = outcome.fallback
        if caller is None:
            return []
        return [_rel(ctx, 1, caller, RelationKind.REQUESTED, model, attrs=attrs)]

    return resolve


def _nesting(ctx: _Ctx, span: Entity) -> Callable[[Outcome], list[Observation]]:
    def resolve(outcome: Outcome) -> list[Observation]:
        if isinstance(outcome, Found):
            return [_rel(ctx, 1, span, RelationKind.CHILD_OF, outcome.entity)]
        return _fallback(ctx, span, outcome)

    return resolve


def _fallback(ctx: _Ctx, child: Entity, outcome: Outcome) -> list[Observation]:
    if isinstance(outcome, Root) and outcome.fallback is not None:
        return [_rel(ctx, 1, child, RelationKind.CHILD_OF, outcome.fallback)]
    return []


def _missing(link: PendingLink) -> CoverageRecord:
    return CoverageRecord(
        source=link.source,
        reason="parent_span_missing",
        time_unix_nano=link.time_unix_nano,
        detail=f"{link.describe}: an ancestor span never arrived; relation left unresolved",
    )


def _pick(a: Attributes, keys: tuple[str, ...]) -> dict[str, AnyValue]:
    return {k: a[k] for k in keys if k in a and a[k] is not None}


def _tool_name(span: Span, op: str) -> str:
    name = get_str(span.attributes, "gen_ai.tool.name", "tool.name")
    if name is None:
        name = span.name.removeprefix(op).strip() if op else span.name.strip()
    return name or "unknown_tool"


def _model_name(a: Attributes) -> str | None:
    return get_str(
        a, "gen_ai.request.model", "gen_ai.response.model", "llm.model_name", "embedding.model_name"
    )


def _model_entity(a: Attributes) -> Entity:
    name = _model_name(a) or "unknown"
    provider = get_str(a, "gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
    provider = (provider or "unknown").lower()
    return Entity(
        kind=EntityKind.MODEL,
        id=kind_id(EntityKind.MODEL, provider, name),
        label=name,
        attrs={"gen_ai.provider.name": provider, "gen_ai.request.model": name},
    )


def _request_attrs(ctx: _Ctx, a: Attributes) -> Attributes:
    attrs = dict(ctx.attrs)
    request_id = get_str(a, "gen_ai.response.id", "request.id")
    if request_id is not None:
        attrs["request.id"] = request_id
    for key in ("gen_ai.request.model", "gen_ai.response.model", "gen_ai.response.id"):
        if key in a:
            attrs[key] = a[key]
    return attrs
