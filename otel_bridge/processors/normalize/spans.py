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
(which also lets the graph accumulator skip attribute merges by identity); the common cases of
:meth:`SpanNormalizer.normalize_into` are inline, and records are built directly (a frozen
struct costs about 0.15 µs). The output is equal, field for field, to building every object
anew.
"""

from __future__ import annotations

from otel_bridge.model import (
    NO_EVIDENCE,
    UNSET_STATUS,
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
from .ancestry import Ancestry, Missing, PendingLink, Role, SpanInfo, SpanKey
from .channels import ChannelAssigner
from .command import CommandResult, extract_command
from .relations import (
    DELEGATION,
    INVOCATION,
    LINKS,
    NESTING,
    REPORTED,
    REQUEST,
    Ctx,
    missing,
    rel,
    resolver,
)

# Enum members used per span, as module constants: on Python 3.11 reading a member as a class
# attribute goes through ``EnumType``'s attribute hook (about 60 ns), a module constant does not.
_AGENT_ROLE, _TOOL_ROLE, _MODEL_ROLE, _PLAIN_ROLE = Role.AGENT, Role.TOOL, Role.MODEL, Role.PLAIN
_KIND_TOOL_CALL, _KIND_SPAN, _KIND_COMMAND = (
    EntityKind.TOOL_CALL,
    EntityKind.SPAN,
    EntityKind.COMMAND,
)
_DECLARED_COMMAND, _REQUESTED, _PART_OF = (
    RelationKind.DECLARED_COMMAND,
    RelationKind.REQUESTED,
    RelationKind.PART_OF,
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
        self._lookup = ancestry.lookup
        self._remember = ancestry.remember
        self._origins: dict[tuple[int, int], Origin] = {}
        self._last: Origin | None = None
        self._last_trace_id = b""
        self._last_trace = ""
        self._models: Cache[tuple[str, str], Entity] = Cache(_CACHE_SIZE)
        self._last_model: tuple[str, str, Entity] | None = None
        self._agents: Cache[tuple[object, ...], Entity] = Cache(_CACHE_SIZE)
        self._sessions: Cache[str, Entity] = Cache(_CACHE_SIZE)
        self._commands: Cache[tuple[str | None, ...], tuple[CommandResult, Attributes | None]] = (
            Cache(_COMMAND_CACHE)
        )
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
        """Append the observations and coverage records of one span to ``out``/``coverage``.

        The common cases (an attribute read as a non-empty string, a parent already known) are
        spelled out inline; everything else goes through the same helpers as before
        (:func:`get_str`, :meth:`_link`), so the result does not depend on which path ran.
        """
        a = span.attributes
        origin = self._last
        if origin is None or origin.resource is not span.resource or origin.scope is not span.scope:
            origin = self._origin(span.resource, span.scope)
        trace_id = span.trace_id
        if trace_id is self._last_trace_id:  # decoders share one id object per trace
            trace = self._last_trace
        else:
            trace = self._last_trace = trace_id.hex()
            self._last_trace_id = trace_id
        span_hex = span.span_id.hex()
        status = span.status
        state = "unset" if status is UNSET_STATUS else _STATUS.get(status.code, "unset")
        name = span.name
        # A copy of the origin's template keeps the key order; only per-span values change.
        obs_attrs = origin.template.copy()
        obs_attrs["trace_id"] = trace
        obs_attrs["span_id"] = span_hex
        obs_attrs["span.name"] = name
        obs_attrs["span.status"] = state
        source = Source(channel=origin.channel, backend="otlp", record_id=span_hex)
        occurrence = f"{trace}:{span_hex}"
        start = span.start_time_unix_nano
        end = span.end_time_unix_nano
        ctx: Ctx | None = None  # built only where a helper needs it
        op = a.get("gen_ai.operation.name")
        if op.__class__ is not str or not op:
            op = get_str(a, "gen_ai.operation.name") or ""
        assert isinstance(op, str)
        oi_kind = "" if op else (get_str(a, "openinference.span.kind") or "").upper()
        parent_id = span.parent_span_id
        parent = trace_id + parent_id if parent_id else None

        # -- classify: the node this span stands for -----------------------------------------
        role = _PLAIN_ROLE
        node: Entity | None = None
        if op in _AGENT_OPS or (not op and oi_kind == "AGENT"):
            role = _AGENT_ROLE
            node = self._agent(span, op, origin.service, trace, span_hex)
        elif op == "execute_tool" or (not op and oi_kind == "TOOL"):
            role = _TOOL_ROLE
            tool = a.get("gen_ai.tool.name")
            if tool.__class__ is not str or not tool:
                tool = _tool_name(span, op)
            assert isinstance(tool, str)
            attrs: dict[str, AnyValue] = {
                "gen_ai.tool.name": tool,
                "trace_id": trace,
                "span_id": span_hex,
            }
            call_id = a.get("gen_ai.tool.call.id")
            if call_id.__class__ is not str or not call_id:
                call_id = get_str(a, "gen_ai.tool.call.id", "tool_call.id")
            if call_id is not None:
                attrs["gen_ai.tool.call.id"] = call_id
            node = Entity(
                kind=_KIND_TOOL_CALL,
                id=f"{_TOOL_CALL}{trace}:{span_hex}",
                label=tool,
                attrs=attrs,
            )
        elif op in _MODEL_OPS or (not op and oi_kind in _OI_MODEL):
            model_name = a.get("gen_ai.request.model")
            if model_name.__class__ is not str or not model_name:
                model_name = _model_name(a)
            if model_name:
                assert isinstance(model_name, str)
                role = _MODEL_ROLE
                node = self._model_entity(a, model_name)
            else:
                coverage.append(
                    CoverageRecord(
                        source=source,
                        reason="model_name_missing",
                        time_unix_nano=start,
                        detail=f"model call span {name!r} names no model; kept as a plain span",
                    )
                )
        if node is None:
            picked = _pick(a)
            picked["span.name"] = name
            picked["trace_id"] = trace
            picked["span_id"] = span_hex
            picked["service.name"] = origin.service
            node = Entity(
                kind=_KIND_SPAN, id=f"{_SPAN}{trace}:{span_hex}", label=name, attrs=picked
            )
        out.append(
            Observation(
                id=span_hex + "#0",
                time_unix_nano=start,
                end_time_unix_nano=end,
                source=source,
                subject=node,
                evidence=NO_EVIDENCE,
                occurrence=occurrence,
                attrs=obs_attrs,
            )
        )

        # -- relation to the ancestor (#1) ---------------------------------------------------
        if role is _MODEL_ROLE:
            kind, accept = REQUEST, _AGENTS_TOOLS
            link_attrs = _request_attrs(obs_attrs, a)
        elif role is _TOOL_ROLE:
            kind, accept, link_attrs = INVOCATION, _AGENTS, obs_attrs
        elif role is _AGENT_ROLE:
            kind, accept, link_attrs = DELEGATION, _AGENTS, obs_attrs
        else:
            kind, accept, link_attrs = NESTING, _ANY, obs_attrs
        if parent is not None and (role is not _AGENT_ROLE or op != "create_agent"):
            info = self._lookup(parent)
            ancestor = None if info is None else info.entity
            if ancestor is not None and info is not None and info.role in accept:
                # The usual case, the parent itself is the ancestor: what ``walk`` would find
                # (and :func:`.relations.found` would build, without a Ctx).
                if kind != DELEGATION or ancestor.id != node.id:
                    relation, from_span = LINKS[kind]
                    out.append(
                        Observation(
                            id=span_hex + "#1",
                            time_unix_nano=start,
                            end_time_unix_nano=end,
                            source=source,
                            subject=node if from_span else ancestor,
                            relation=relation,
                            object=ancestor if from_span else node,
                            evidence=REPORTED,
                            occurrence=occurrence,
                            attrs=link_attrs,
                        )
                    )
            else:
                ctx = Ctx(source, trace, occurrence, start, end, obs_attrs)
                self._link(
                    out,
                    coverage,
                    ctx,
                    parent,
                    accept=accept,
                    kind=kind,
                    node=node,
                    attrs=link_attrs,
                )

        # -- the declared command (#2), a model the agent or tool names (#3), a session (#4) --
        if role is _TOOL_ROLE:
            label = node.label
            args = a.get("gen_ai.tool.call.arguments")
            if (
                args.__class__ is str
                and "input.value" not in a
                and "tool.parameters" not in a
                and "input.mime_type" not in a
            ):  # the usual tool span: arguments alone, the same key as _command_entry's
                entry = self._commands.get((label, args, None, None, None))
                if entry is None:
                    entry = self._command_entry(label, a)
            else:
                entry = self._command_entry(label, a)
            result, command_attrs = entry
            if command_attrs is not None:
                assert result.command is not None
                command = Entity(
                    kind=_KIND_COMMAND,
                    id=f"{_COMMAND}{trace}:{span_hex}",
                    label=result.command,
                    attrs=command_attrs,
                )
                out.append(
                    Observation(
                        id=span_hex + "#2",
                        time_unix_nano=start,
                        end_time_unix_nano=end,
                        source=source,
                        subject=node,
                        relation=_DECLARED_COMMAND,
                        object=command,
                        evidence=REPORTED,
                        occurrence=occurrence,
                        attrs=obs_attrs,
                    )
                )
            elif result.reason is not None:
                coverage.append(
                    CoverageRecord(
                        source=source,
                        reason="command_not_extracted",
                        time_unix_nano=start,
                        detail=f"tool {label!r}: {result.reason}",
                    )
                )
        if (role is _AGENT_ROLE or role is _TOOL_ROLE) and (
            "gen_ai.request.model" in a
            or "gen_ai.response.model" in a
            or "llm.model_name" in a
            or "embedding.model_name" in a
        ):
            model_name = _model_name(a)
            if model_name:
                ctx = ctx or Ctx(source, trace, occurrence, start, end, obs_attrs)
                model = self._model_entity(a, model_name)
                requested = _request_attrs(obs_attrs, a)
                out.append(rel(ctx, 3, node, _REQUESTED, model, attrs=requested))
        if role is _AGENT_ROLE or parent is None:
            session_id = get_str(a, "gen_ai.conversation.id", "session.id")
            if session_id:
                ctx = ctx or Ctx(source, trace, occurrence, start, end, obs_attrs)
                session = self._session(session_id)
                out.append(rel(ctx, 4, node, _PART_OF, session))

        key = trace_id + span.span_id
        own = node if role is not _MODEL_ROLE else None
        waiting = self._remember(key, SpanInfo(role, own, parent))
        if waiting:
            for link in waiting:
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

    # -- entities that repeat across spans -------------------------------------------------

    def _agent(self, span: Span, op: str, service: str, trace: str, span_hex: str) -> Entity:
        a = span.attributes
        name = get_str(a, "gen_ai.agent.name", "agent.name", "gen_ai.agent.id")
        if name is None:
            stripped = span.name.removeprefix(op).strip() if op else span.name.strip()
            name = stripped or None
        attrs = _pick(a)
        attrs["service.name"] = service
        if name is None:  # keyed by the span itself: nothing to share
            agent_id = f"{_AGENT}{service}:span:{trace}:{span_hex}"
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
        provider = a.get("gen_ai.provider.name")
        if provider.__class__ is not str or not provider:  # the fallbacks decide: no memo
            return self._find_model(a, name)
        assert isinstance(provider, str)
        last = self._last_model
        # Consecutive model calls usually name the same provider and model.
        if last is not None and last[0] == provider and last[1] == name:
            return last[2]
        model = self._find_model(a, name)
        self._last_model = (provider, name, model)
        return model

    def _find_model(self, a: Attributes, name: str) -> Entity:
        provider = a.get("gen_ai.provider.name")
        if provider.__class__ is not str or not provider:
            provider = get_str(
                a, "gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system"
            )
        assert provider is None or isinstance(provider, str)
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
        parent: SpanKey | None,
        *,
        accept: frozenset[Role],
        kind: int,
        node: Entity,
        attrs: Attributes,
    ) -> None:
        if parent is None:  # a root: no ancestor, no fallback, no relation
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
        key: SpanKey,
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

    def _command_entry(self, tool: str, a: Attributes) -> tuple[CommandResult, Attributes | None]:
        """``extract_command(tool, a)`` and the command entity's attributes, memoized.

        Agents repeat the same commands; extraction (JSON decoding, redaction) is a pure function
        of the tool name and the four attributes it reads, so when those are short strings (or
        absent) equal inputs share one entry. The attributes are ``None`` when no command was
        extracted.
        """
        key: list[str | None] = [tool]
        size = 0
        cacheable = True
        for name in _COMMAND_INPUTS:
            value = a.get(name)
            if value is None:
                key.append(None)
            elif value.__class__ is str:
                assert isinstance(value, str)
                key.append(value)
                size += len(value)
            else:  # a mapping or another structure: not cached
                cacheable = False
                break
        result = extract_command(tool, a)
        attrs: Attributes | None = None
        if result.command is not None:
            attrs_key = (result.command, tool)
            attrs = self._command_attrs.get(attrs_key)
            if attrs is None:
                attrs = {"command.line": result.command, "gen_ai.tool.name": tool}
                self._command_attrs.put(attrs_key, attrs)
        entry = (result, attrs)
        if cacheable and size <= _CACHED_ARGUMENTS:
            self._commands.put(tuple(key), entry)
        return entry


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


def _request_attrs(obs_attrs: dict[str, AnyValue], a: Attributes) -> Attributes:
    attrs = obs_attrs.copy()
    request_id = a.get("gen_ai.response.id")
    if request_id.__class__ is not str or not request_id:
        request_id = get_str(a, "gen_ai.response.id", "request.id")
    if request_id is not None:
        attrs["request.id"] = request_id
    for key in _REQUEST_KEYS:
        value = a.get(key, _ABSENT)
        if value is not _ABSENT:
            attrs[key] = value
    return attrs


_ABSENT: AnyValue = ("absent",)
"""A default for ``Mapping.get`` that no decoded attribute value is (compared by identity)."""
