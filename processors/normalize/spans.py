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

**Cost.** This is the collector's per-span hot path. What all spans of one export share (the
channel, ``service.name`` and the resource identity attributes of a (resource, scope) pair) is
computed once per pair; entities that repeat across spans (models, named agents, sessions) and
command extraction results are cached in bounded tables, so repeated spans share one object
(which also lets the graph accumulator skip attribute merges by identity); and observations are
records are built by keyword (a frozen struct costs about 0.15 µs). The output is equal, field for field, to building every object anew.
"""

from __future__ import annotations

from otel_bridge.model import (
    NO_EVIDENCE,
    AnyValue,
    Attributes,
    CoverageRecord,
    Entity,
    EntityKind,
    Observation,
    RelationKind,
    Resource,
    Scope,
    Source,
    Span,
    StatusCode,
)

from ._memo import Cache, Origin
from ._values import get_str
from .ancestry import Ancestry, Missing, PendingLink, Role, SpanInfo
from .channels import ChannelAssigner
from .command import CommandResult, extract_command
from .relations import (
    DELEGATION,
    INVOCATION,
    NESTING,
    REQUEST,
    Ctx,
    found,
    missing,
    rel,
    resolver,
)

_AGENT_OPS = frozenset({"invoke_agent", "create_agent"})
_MODEL_OPS = frozenset({"chat", "text_completion", "embeddings", "generate_content"})
_OI_MODEL = frozenset({"LLM", "EMBEDDING"})
_AGENTS = frozenset({Role.AGENT})
_AGENTS_TOOLS = frozenset({Role.AGENT, Role.TOOL})
_ANY = frozenset({Role.AGENT, Role.TOOL, Role.PLAIN})
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
_REQUEST_KEYS = ("gen_ai.request.model", "gen_ai.response.model", "gen_ai.response.id")
_COMMAND_INPUTS = (
    "gen_ai.tool.call.arguments",
    "input.value",
    "tool.parameters",
    "input.mime_type",
)

# Entity ids are ``identity.kind_id(kind, *parts)``, i.e. ``"<kind>:<part>:..."``; the per-span
# ones are spelled out here to save a call per span.
_TOOL_CALL = f"{EntityKind.TOOL_CALL}:"
_COMMAND = f"{EntityKind.COMMAND}:"
_SPAN = f"{EntityKind.SPAN}:"
_AGENT = f"{EntityKind.AGENT}:"
_MODEL = f"{EntityKind.MODEL}:"
_SESSION = f"{EntityKind.SESSION}:conversation:"

_CACHE_SIZE = 4096
"""Entries of each bounded cache (cleared when full: entries are cheap to rebuild)."""
_ORIGINS = 256
"""(resource, scope) pairs remembered: the spans of one export share theirs, so the few most
recent pairs get nearly every hit, and few resources are kept alive by the table."""
_CACHED_ARGUMENTS = 1024
"""Command inputs longer than this (characters, all inputs together) are not cached; with
:data:`_COMMAND_CACHE` entries at most, the command cache stays around a megabyte."""
_COMMAND_CACHE = 1024


class SpanNormalizer:
    """Turns spans into observations, resolving ancestors through an :class:`Ancestry`."""

    def __init__(self, assigner: ChannelAssigner, ancestry: Ancestry) -> None:
        self._assigner = assigner
        self._ancestry = ancestry
        self._origins: dict[tuple[int, int], Origin] = {}
        self._last: Origin | None = None
        self._last_trace_id = b""
        self._last_trace = ""
        self._models: Cache[tuple[str, str], Entity] = Cache(_CACHE_SIZE)
        self._agents: Cache[tuple[object, ...], Entity] = Cache(_CACHE_SIZE)
        self._sessions: Cache[str, Entity] = Cache(_CACHE_SIZE)
        self._commands: Cache[tuple[str | None, ...], CommandResult] = Cache(_COMMAND_CACHE)
        self._command_attrs: Cache[tuple[str, str], Attributes] = Cache(_CACHE_SIZE)

    def normalize(self, span: Span) -> tuple[list[Observation], list[CoverageRecord]]:
        """Observations and coverage records of one span (plus links it resolved)."""
        out: list[Observation] = []
        coverage: list[CoverageRecord] = []
        self.normalize_into(span, out, coverage)
        return out, coverage

    def normalize_into(
        self, span: Span, out: list[Observation], coverage: list[CoverageRecord]
    ) -> None:
        """Append the observations and coverage records of one span to ``out``/``coverage``."""
        a = span.attributes
        origin = self._origin(span.resource, span.scope)
        trace_id, span_id = span.trace_id, span.span_id
        if trace_id is self._last_trace_id:  # decoders share one id object per trace
            trace = self._last_trace
        else:
            trace = self._last_trace = trace_id.hex()
            self._last_trace_id = trace_id
        span_hex = span_id.hex()
        status = _STATUS.get(span.status.code, "unset")
        if origin.identity:
            obs_attrs: dict[str, AnyValue] = {
                "trace_id": trace,
                "span_id": span_hex,
                **origin.identity,
                "span.name": span.name,
                "span.status": status,
            }
        else:
            obs_attrs = {
                "trace_id": trace,
                "span_id": span_hex,
                "span.name": span.name,
                "span.status": status,
            }
        ctx = Ctx(
            Source(channel=origin.channel, backend="otlp", record_id=span_hex),
            trace,
            span,
            obs_attrs,
        )
        op = get_str(a, "gen_ai.operation.name") or ""
        oi_kind = (get_str(a, "openinference.span.kind") or "").upper() if not op else ""
        parent = (trace_id, span.parent_span_id) if span.parent_span_id else None
        role, node = self._classify(span, op, oi_kind, origin.service, coverage=coverage, ctx=ctx)
        out.append(
            Observation(
                id=span_hex + "#0",
                time_unix_nano=ctx.start,
                end_time_unix_nano=ctx.end,
                source=ctx.source,
                subject=node,
                evidence=NO_EVIDENCE,
                occurrence=ctx.occurrence,
                attrs=obs_attrs,
            )
        )

        if role is Role.AGENT:
            if op != "create_agent":
                self._link(
                    out,
                    coverage,
                    ctx,
                    parent,
                    accept=_AGENTS,
                    kind=DELEGATION,
                    node=node,
                    attrs=obs_attrs,
                )
        elif role is Role.TOOL:
            self._link(
                out,
                coverage,
                ctx,
                parent,
                accept=_AGENTS,
                kind=INVOCATION,
                node=node,
                attrs=obs_attrs,
            )
            self._command(out, coverage, ctx, node, a)
        elif role is Role.MODEL:
            request = _request_attrs(obs_attrs, a)
            self._link(
                out,
                coverage,
                ctx,
                parent,
                accept=_AGENTS_TOOLS,
                kind=REQUEST,
                node=node,
                attrs=request,
            )
        else:
            self._link(
                out, coverage, ctx, parent, accept=_ANY, kind=NESTING, node=node, attrs=obs_attrs
            )
        if role is not Role.MODEL and role is not Role.PLAIN:
            model_name = _model_name(a)
            if model_name:
                model = self._model_entity(a, model_name)
                attrs = _request_attrs(obs_attrs, a)
                out.append(rel(ctx, 3, node, RelationKind.REQUESTED, model, attrs=attrs))
        if role is Role.AGENT or parent is None:
            session_id = get_str(a, "gen_ai.conversation.id", "session.id")
            if session_id:
                session = self._session(session_id)
                out.append(rel(ctx, 4, node, RelationKind.PART_OF, session))

        key = (trace_id, span_id)
        own = node if role is not Role.MODEL else None
        for link in self._ancestry.remember(key, SpanInfo(role, own, parent)):
            self._resume(out, coverage, key, link)

    def drain(self) -> list[CoverageRecord]:
        """Coverage records for every relation still waiting for an ancestor."""
        return [missing(link) for link in self._ancestry.drain()]

    # -- shared per (resource, scope) --------------------------------------------------------

    def _origin(self, resource: Resource, scope: Scope) -> Origin:
        last = self._last
        if last is not None and last.resource is resource and last.scope is scope:
            return last
        key = (id(resource), id(scope))
        origin = self._origins.get(key)
        # The cached objects are kept alive in the entry, so an id cannot be reused meanwhile.
        if origin is None or origin.resource is not resource or origin.scope is not scope:
            origin = Origin(resource, scope, self._assigner.channel(resource, scope))
            if len(self._origins) >= _ORIGINS:
                self._origins.clear()
            self._origins[key] = origin
        self._last = origin
        return origin

    # -- classification ---------------------------------------------------------------------

    def _classify(
        self,
        span: Span,
        op: str,
        oi_kind: str,
        service: str,
        *,
        coverage: list[CoverageRecord],
        ctx: Ctx,
    ) -> tuple[Role, Entity]:
        a = span.attributes
        if op in _AGENT_OPS or (not op and oi_kind == "AGENT"):
            return Role.AGENT, self._agent(span, op, service, ctx)
        if op == "execute_tool" or (not op and oi_kind == "TOOL"):
            tool = _tool_name(span, op)
            attrs: dict[str, AnyValue] = {
                "gen_ai.tool.name": tool,
                "trace_id": ctx.trace,
                "span_id": ctx.record,
            }
            call_id = get_str(a, "gen_ai.tool.call.id", "tool_call.id")
            if call_id is not None:
                attrs["gen_ai.tool.call.id"] = call_id
            tool_id = f"{_TOOL_CALL}{ctx.trace}:{ctx.record}"
            return Role.TOOL, Entity(kind=EntityKind.TOOL_CALL, id=tool_id, label=tool, attrs=attrs)
        if op in _MODEL_OPS or (not op and oi_kind in _OI_MODEL):
            model_name = _model_name(a)
            if model_name:
                return Role.MODEL, self._model_entity(a, model_name)
            coverage.append(
                CoverageRecord(
                    source=ctx.source,
                    reason="model_name_missing",
                    time_unix_nano=ctx.start,
                    detail=f"model call span {span.name!r} names no model; kept as a plain span",
                )
            )
        attrs = _pick(a)
        attrs["span.name"] = span.name
        attrs["trace_id"] = ctx.trace
        attrs["span_id"] = ctx.record
        attrs["service.name"] = service
        span_node = f"{_SPAN}{ctx.trace}:{ctx.record}"
        return Role.PLAIN, Entity(kind=EntityKind.SPAN, id=span_node, label=span.name, attrs=attrs)

    def _agent(self, span: Span, op: str, service: str, ctx: Ctx) -> Entity:
        a = span.attributes
        name = get_str(a, "gen_ai.agent.name", "agent.name", "gen_ai.agent.id")
        if name is None:
            stripped = span.name.removeprefix(op).strip() if op else span.name.strip()
            name = stripped or None
        attrs = _pick(a)
        attrs["service.name"] = service
        if name is None:  # keyed by the span itself: nothing to share
            agent_id = f"{_AGENT}{service}:span:{ctx.trace}:{ctx.record}"
            return Entity(kind=EntityKind.AGENT, id=agent_id, label=span.name, attrs=attrs)
        for value in attrs.values():
            if value.__class__ is not str:  # only plain strings compare exactly as keys
                return Entity(
                    kind=EntityKind.AGENT, id=f"{_AGENT}{service}:{name}", label=name, attrs=attrs
                )
        key = (service, name, *attrs.items())
        cached = self._agents.get(key)
        if cached is not None:
            return cached
        agent = Entity(
            kind=EntityKind.AGENT, id=f"{_AGENT}{service}:{name}", label=name, attrs=attrs
        )
        self._agents.put(key, agent)
        return agent

    def _model_entity(self, a: Attributes, name: str) -> Entity:
        provider = get_str(a, "gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
        provider = (provider or "unknown").lower()
        key = (provider, name)
        cached = self._models.get(key)
        if cached is not None:
            return cached
        model = Entity(
            kind=EntityKind.MODEL,
            id=f"{_MODEL}{provider}:{name}",
            label=name,
            attrs={"gen_ai.provider.name": provider, "gen_ai.request.model": name},
        )
        self._models.put(key, model)
        return model

    def _session(self, session_id: str) -> Entity:
        cached = self._sessions.get(session_id)
        if cached is not None:
            return cached
        session = Entity(
            kind=EntityKind.SESSION,
            id=_SESSION + session_id,
            label=session_id,
            attrs={"session.id": session_id},
        )
        self._sessions.put(session_id, session)
        return session

    # -- relations to ancestors ---------------------------------------------------------------

    def _link(
        self,
        out: list[Observation],
        coverage: list[CoverageRecord],
        ctx: Ctx,
        parent: tuple[bytes, bytes] | None,
        *,
        accept: frozenset[Role],
        kind: int,
        node: Entity,
        attrs: Attributes,
    ) -> None:
        if parent is None:  # a root: no ancestor, no fallback, no relation
            return
        info = self._ancestry.lookup(parent)
        if info is not None and info.entity is not None and info.role in accept:
            # The usual case, the parent itself is the ancestor: what ``walk`` would find.
            relation = found(kind, ctx, node, attrs, info.entity)
            if relation is not None:
                out.append(relation)
            return
        outcome, fallback = self._ancestry.walk(parent, accept)
        resolve = resolver(kind, ctx, node, attrs)
        if isinstance(outcome, Missing):
            link = PendingLink(
                accept, fallback, resolve, ctx.source, ctx.start, f"span {ctx.occurrence}"
            )
            for lost in self._ancestry.wait(outcome.key, link):
                coverage.append(missing(lost))
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
                coverage.append(missing(lost))
            return
        out.extend(link.resolve(outcome))

    def _command(
        self,
        out: list[Observation],
        coverage: list[CoverageRecord],
        ctx: Ctx,
        tool: Entity,
        a: Attributes,
    ) -> None:
        result = self._extract(tool.label, a)
        if result.command is not None:
            attrs_key = (result.command, tool.label)
            attrs = self._command_attrs.get(attrs_key)
            if attrs is None:
                attrs = {"command.line": result.command, "gen_ai.tool.name": tool.label}
                self._command_attrs.put(attrs_key, attrs)
            command = Entity(
                kind=EntityKind.COMMAND,
                id=f"{_COMMAND}{ctx.trace}:{ctx.record}",
                label=result.command,
                attrs=attrs,
            )
            out.append(rel(ctx, 2, tool, RelationKind.DECLARED_COMMAND, command))
        elif result.reason is not None:
            coverage.append(
                CoverageRecord(
                    source=ctx.source,
                    reason="command_not_extracted",
                    time_unix_nano=ctx.start,
                    detail=f"tool {tool.label!r}: {result.reason}",
                )
            )

    def _extract(self, tool: str, a: Attributes) -> CommandResult:
        """``extract_command(tool, a)``, memoized on the attributes it reads when they are short.

        Agents repeat the same commands; extraction (JSON decoding, redaction) is a pure function
        of the tool name and these four attributes, so equal inputs share one result.
        """
        key: list[str | None] = [tool]
        size = 0
        for name in _COMMAND_INPUTS:
            value = a.get(name)
            if value is None:
                key.append(None)
            elif isinstance(value, str) and value.__class__ is str:
                key.append(value)
                size += len(value)
            else:  # a mapping or another structure: not cached
                return extract_command(tool, a)
        if size > _CACHED_ARGUMENTS:
            return extract_command(tool, a)
        cached = self._commands.get(tuple(key))
        if cached is not None:
            return cached
        result = extract_command(tool, a)
        self._commands.put(tuple(key), result)
        return result


def _pick(a: Attributes) -> dict[str, AnyValue]:
    out: dict[str, AnyValue] = {}
    for key in _ENTITY_KEYS:
        value = a.get(key)
        if value is not None:
            out[key] = value
    return out


def _tool_name(span: Span, op: str) -> str:
    name = get_str(span.attributes, "gen_ai.tool.name", "tool.name")
    if name is None:
        name = span.name.removeprefix(op).strip() if op else span.name.strip()
    return name or "unknown_tool"


def _model_name(a: Attributes) -> str | None:
    return get_str(
        a, "gen_ai.request.model", "gen_ai.response.model", "llm.model_name", "embedding.model_name"
    )


def _request_attrs(obs_attrs: Attributes, a: Attributes) -> Attributes:
    attrs = dict(obs_attrs)
    request_id = get_str(a, "gen_ai.response.id", "request.id")
    if request_id is not None:
        attrs["request.id"] = request_id
    for key in _REQUEST_KEYS:
        if key in a:
            attrs[key] = a[key]
    return attrs
