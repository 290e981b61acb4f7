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

Every entity carries its typed facts and stable key (:mod:`.entities`). A tool call's facts name
the calling agent only when the span memory already knows it (its agent ancestor arrived
earlier); otherwise ``agent`` is None, never guessed.

**Two implementations, one output.** :meth:`SpanNormalizer.reference_into` is the readable
specification: small steps, no caches, nothing inlined. :meth:`SpanNormalizer.normalize_into` is
the collector's per-span hot path and the only function here that inlines: what all spans of one
export share (channel, ``service.name``, the resource identity attributes of a (resource, scope)
pair) is computed once per pair, entities that repeat across spans (models, named agents,
sessions, command facts) come from bounded caches, so repeated spans share one object (which also
lets the graph accumulator skip attribute merges by identity), and records are built directly (a
frozen struct costs about 0.15 µs). ``tests/normalize/test_normalize_reference.py`` checks that
both give equal observations and coverage records, one by one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec.structs import replace

from otel_bridge.identity import UNKNOWN_TOOL
from otel_bridge.model import (
    UNSET_STATUS,
    AgentFacts,
    AnyValue,
    Attributes,
    Channel,
    CoverageRecord,
    Entity,
    EntityKind,
    Observation,
    RelationKind,
    Resource,
    Scope,
    Source,
    Span,
    SpanKind,
    StatusCode,
    ToolCallFacts,
)

from ._memo import RESOURCE_IDENTITY, Cache, Origin, emitter_facts
from .ancestry import Ancestry, Found, Missing, Outcome, PendingLink, Role, SpanInfo, SpanKey
from .channels import ChannelAssigner
from .command import CommandResult, extract_command
from .conventions import (
    AGENT_NAME_KEYS,
    CLAUDE_CODE_SPANS,
    KIND_KEYS,
    TOOL_NAME_KEYS,
    call_attrs,
    claude_code_tool,
    has_convention,
    implied_operation,
    model_name,
    model_provider,
    names_model,
    not_interpreted,
    operation_kind,
    output_tool_calls,
    tool_call_id,
)
from .entities import (
    COMMAND_PREFIX,
    SPAN_PREFIX,
    TOOL_CALL_PREFIX,
    CommandParts,
    agent_entity,
    calling_agent,
    command_entity,
    command_parts,
    model_entity,
    name_from_span,
    operation_entity,
    pick,
    session_entity,
    span_entity,
    tool_call_entity,
)
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
from .tool_calls import CallLinks
from .values import get_str

# Enum members the hot path uses per span, as module constants: on Python 3.11 reading a member
# as a class attribute (``Role.AGENT``) goes through ``EnumType``'s ``__getattr__`` hook (a generic
# call of ``type.__getattribute__``): about 900 machine instructions, roughly 0.2 µs, more than
# loading a module constant (cachegrind over 200,000 reads; ``BENCHMARKS.md`` says the same).
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
_SERVER = SpanKind.SERVER
_AGENT_OPS = frozenset({"invoke_agent", "create_agent"})
_MODEL_OPS = frozenset({"chat", "text_completion", "embeddings", "generate_content"})
_OI_MODEL = frozenset({"LLM", "EMBEDDING"})
_AGENTS = frozenset({Role.AGENT})
_AGENTS_TOOLS = frozenset({Role.AGENT, Role.TOOL})
_ANY = frozenset({Role.AGENT, Role.TOOL, Role.PLAIN})
_ANCESTOR: dict[Role, tuple[int, frozenset[Role]]] = {
    Role.AGENT: (DELEGATION, _AGENTS),
    Role.TOOL: (INVOCATION, _AGENTS),
    Role.MODEL: (REQUEST, _AGENTS_TOOLS),
    Role.PLAIN: (NESTING, _ANY),
}
"""Per role: how its relation to an ancestor is built, and which ancestors it accepts."""
_STATUS = {StatusCode.OK: "ok", StatusCode.ERROR: "error", StatusCode.UNSET: "unset"}
_REQUEST_KEYS = ("gen_ai.request.model", "gen_ai.response.model", "gen_ai.response.id")
_COMMAND_INPUTS = (
    "gen_ai.tool.call.arguments",
    "input.value",
    "tool.parameters",
    "input.mime_type",
)

CACHE_SIZE = 4096
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

    def __init__(
        self, assigner: ChannelAssigner, ancestry: Ancestry, call_capacity: int = 100_000
    ) -> None:
        self._assigner = assigner
        self._calls = CallLinks(call_capacity)
        self._ancestry = ancestry
        self._remember = ancestry.remember
        self._origins: dict[tuple[int, int], Origin] = {}
        self._last: Origin | None = None
        self._last_trace_id = b""
        self._last_trace = ""
        self._models: Cache[tuple[str, str], Entity] = Cache(CACHE_SIZE)
        self._last_model: tuple[str, str, Entity] | None = None
        self._last_caller: Entity | None = None
        self._last_agent: str | None = None
        self._tool_key: tuple[str | None, str | None, str] = ("", None, "")
        self._agents: Cache[tuple[object, ...], Entity] = Cache(CACHE_SIZE)
        self._sessions: Cache[str, Entity] = Cache(CACHE_SIZE)
        self._commands: Cache[tuple[str | None, ...], tuple[CommandResult, CommandParts | None]] = (
            Cache(_COMMAND_CACHE)
        )
        self._command_parts: Cache[tuple[str, str], CommandParts] = Cache(CACHE_SIZE)

    def normalize(self, span: Span) -> tuple[list[Observation], list[CoverageRecord]]:
        """Observations and coverage records of one span (plus links it resolved)."""
        out: list[Observation] = []
        coverage: list[CoverageRecord] = []
        self.normalize_into(span, out, coverage)
        return out, coverage

    def normalize_into(
        self, span: Span, out: list[Observation], coverage: list[CoverageRecord]
    ) -> None:
        """Hot path: :meth:`reference_into` with its common cases inlined and its entities cached.

        The collector calls this once per received span. It inlines the reference's small steps
        where they are common (an attribute read as a plain non-empty string, the span's context,
        classification, the tool call, plain span and command entities, the relation to a parent
        that is already known, the span memory's look-up and store and the call-id join when
        nothing waits), because each Python call it saves is a visible share of the
        per-span cost (``benchmarks/pipeline_instructions.py``), and takes the repeated parts
        (per (resource, scope) origin, agents, models, sessions, command facts) from caches.
        Every other case goes through the reference's helpers (:func:`get_str`, :meth:`_link`,
        :mod:`.entities`), so the output does not depend on which path ran: it equals
        :meth:`reference_into`'s, record for record (``test_normalize_reference.py``).
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
        template = origin.source
        if origin.serving and span.kind is _SERVER:  # a scope rule names who serves the calls
            template = origin.server_source
        # The origin's Source with this span's ids: three keywords instead of six (``replace``
        # copies the other fields in C), about 180 instructions a span fewer.
        source = replace(template, record_id=span_hex, trace_id=trace, span_id=span_hex)
        occurrence = f"{trace}:{span_hex}"
        start = span.start_time_unix_nano
        end = span.end_time_unix_nano
        ctx: Ctx | None = None  # built only where a helper needs it
        op = a.get("gen_ai.operation.name")
        if op.__class__ is not str or not op:
            op = get_str(a, "gen_ai.operation.name") or ""
        if TYPE_CHECKING:  # the class test above narrows at run time, for free
            assert isinstance(op, str)
        oi_kind = "" if op else (get_str(a, *KIND_KEYS) or "").upper()
        if (
            not op
            and not oi_kind
            and (
                "ai.operationId" in a
                or "llm.request.type" in a
                or "gen_ai.request.model" in a
                or "gen_ai.provider.name" in a
                or "gen_ai.system" in a
                or span.name in CLAUDE_CODE_SPANS
            )
        ):  # conventions.has_convention, spelled out, or a Claude Code span
            op = implied_operation(span, source, coverage)
        parent_id = span.parent_span_id
        parent = trace_id + parent_id if parent_id else None
        ancestry = self._ancestry
        info: SpanInfo | None = None
        if parent is not None:  # Ancestry.lookup, spelled out
            info = ancestry.current.get(parent)
            if info is None and ancestry.previous:
                info = ancestry.previous.get(parent)
        walked: tuple[Outcome, Entity | None] | None = None  # a tool's walk to its agent
        called: str | None = None  # a tool call's call id

        # -- classify: the node this span stands for (reference: _reference_node) -------------
        role = _PLAIN_ROLE
        node: Entity | None = None
        if op in _AGENT_OPS or (not op and oi_kind == "AGENT"):
            role = _AGENT_ROLE
            node = self._agent(span, op, origin.service, trace, span_hex)
        elif (op == "execute_tool" and span.kind is not _SERVER) or (not op and oi_kind == "TOOL"):
            role = _TOOL_ROLE
            tool = a.get("gen_ai.tool.name")
            if tool.__class__ is not str or not tool:
                tool = _tool_name(span, op)
            if TYPE_CHECKING:  # the class test above narrows at run time, for free
                assert isinstance(tool, str)
            attrs: dict[str, AnyValue] = {
                "gen_ai.tool.name": tool,
                "trace_id": trace,
                "span_id": span_hex,
            }
            call_id = a.get("gen_ai.tool.call.id")
            if call_id.__class__ is not str or not call_id:
                call_id = tool_call_id(a)
            if TYPE_CHECKING:  # the class test above narrows at run time, for free
                assert call_id is None or isinstance(call_id, str)
            if call_id is not None:
                attrs["gen_ai.tool.call.id"] = call_id
                called = call_id
            # The calling agent (reference: _calling_agent): usually the parent itself; else the
            # walk, which the relation to the ancestor (#1) reuses.
            agent: str | None = None
            if info is not None and info.role is _AGENT_ROLE:
                caller = info.entity
                if caller is self._last_caller:  # the spans of one agent share its entity
                    agent = self._last_agent
                else:
                    facts = None if caller is None else caller.facts
                    if isinstance(facts, AgentFacts):
                        agent = facts.name or facts.agent_id
                    self._last_caller, self._last_agent = caller, agent
            elif parent is not None:
                walked = self._ancestry.walk(parent, _AGENTS)
                if isinstance(walked[0], Found):
                    agent = calling_agent(walked[0].entity)
            memo = self._tool_key  # identity.tool_call_key of the previous tool span
            if memo[0] is agent and memo[1] is tool:
                tool_key = memo[2]
            else:
                tool_key = (
                    f"{TOOL_CALL_PREFIX}{agent or '?'}:{tool}" if tool != UNKNOWN_TOOL else ""
                )
                self._tool_key = (agent, tool, tool_key)
            node = Entity(
                kind=_KIND_TOOL_CALL,
                id=f"{TOOL_CALL_PREFIX}{trace}:{span_hex}",
                label=tool,
                attrs=attrs,
                facts=ToolCallFacts(
                    tool=tool, call_id=call_id, agent=agent, trace_id=trace, span_id=span_hex
                ),
                key=tool_key,
            )
        elif op in _MODEL_OPS or (not op and oi_kind in _OI_MODEL):
            model_name = a.get("gen_ai.request.model")
            if model_name.__class__ is not str or not model_name:
                model_name = _model_name(a)
            if model_name:
                if TYPE_CHECKING:  # the class test above narrows at run time, for free
                    assert isinstance(model_name, str)
                role = _MODEL_ROLE
                last = self._last_model  # _model_entity's memo of the previous call, spelled out
                if (
                    last is not None
                    and last[1] == model_name
                    and last[0] == a.get("gen_ai.provider.name")
                ):
                    node = last[2]
                else:
                    node = self._model_entity(a, model_name)
                # conventions.call_attrs, spelled out for the usual call (no endpoint stated)
                if parent is None:
                    obs_attrs["span.root"] = True
                if "server.address" in a or "gen_ai.openai.api_base" in a:
                    call_attrs(obs_attrs, a, False)
            else:
                coverage.append(_no_model_name(source, start, name))
        if node is None and (op or oi_kind):  # a typed operation, or a kind no rule reads
            operation = operation_kind(op, oi_kind)
            if operation is not None:
                node = operation_entity(operation, a, name, op, origin.service, trace, span_hex)
            else:
                unread = not_interpreted(span, source, op, oi_kind)
                if unread is not None:
                    coverage.append(unread)
        if node is None:
            picked = pick(a)
            picked["span.name"] = name
            picked["trace_id"] = trace
            picked["span_id"] = span_hex
            picked["service.name"] = origin.service
            node = Entity(
                kind=_KIND_SPAN,
                id=f"{SPAN_PREFIX}{trace}:{span_hex}",
                label=name,
                attrs=picked,
                key=f"{SPAN_PREFIX}{origin.service}:{name}" if name else "",  # identity.span_key
            )
        out.append(
            Observation(
                # Keywords in field order, defaults left out: msgspec matches each keyword at
                # the field it expects first (about 90 instructions a keyword either way).
                id=span_hex + "#0",
                time_unix_nano=start,
                source=source,
                subject=node,
                occurrence=occurrence,
                end_time_unix_nano=end,
                attrs=obs_attrs,
            )
        )

        # -- relation to the ancestor (#1; reference: _reference_link) ------------------------
        if role is _MODEL_ROLE:
            kind, accept = REQUEST, _AGENTS_TOOLS
            # _request_attrs, spelled out (a call and a loop per model span saved)
            link_attrs = obs_attrs.copy()
            request_id = a.get("gen_ai.response.id")
            if request_id.__class__ is not str or not request_id:
                request_id = get_str(a, "gen_ai.response.id", "request.id")
            if request_id is not None:
                link_attrs["request.id"] = request_id
            value = a.get("gen_ai.request.model", _ABSENT)
            if value is not _ABSENT:
                link_attrs["gen_ai.request.model"] = value
            value = a.get("gen_ai.response.model", _ABSENT)
            if value is not _ABSENT:
                link_attrs["gen_ai.response.model"] = value
            value = a.get("gen_ai.response.id", _ABSENT)
            if value is not _ABSENT:
                link_attrs["gen_ai.response.id"] = value
        elif role is _TOOL_ROLE:
            kind, accept, link_attrs = INVOCATION, _AGENTS, obs_attrs
        elif role is _AGENT_ROLE:
            kind, accept, link_attrs = DELEGATION, _AGENTS, obs_attrs
        else:
            kind, accept, link_attrs = NESTING, _ANY, obs_attrs
        if parent is not None and (role is not _AGENT_ROLE or op != "create_agent"):
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
                            source=source,
                            subject=node if from_span else ancestor,
                            relation=relation,
                            object=ancestor if from_span else node,
                            evidence=REPORTED,
                            occurrence=occurrence,
                            end_time_unix_nano=end,
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
                    walked=walked,
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
            result, parts = entry
            if parts is not None:
                command_attrs, command_facts, command_key = parts
                command = Entity(
                    kind=_KIND_COMMAND,
                    id=f"{COMMAND_PREFIX}{trace}:{span_hex}",
                    label=command_facts.command,
                    attrs=command_attrs,
                    facts=command_facts,
                    key=command_key,
                )
                out.append(
                    Observation(
                        id=span_hex + "#2",
                        time_unix_nano=start,
                        source=source,
                        subject=node,
                        relation=_DECLARED_COMMAND,
                        object=command,
                        evidence=REPORTED,
                        occurrence=occurrence,
                        end_time_unix_nano=end,
                        attrs=obs_attrs,
                    )
                )
            elif result.reason is not None:
                coverage.append(_no_command(source, start, label, result.reason))
        if (role is _AGENT_ROLE or role is _TOOL_ROLE) and (
            "gen_ai.request.model" in a
            or "gen_ai.response.model" in a
            or "llm.model_name" in a
            or "embedding.model_name" in a
        ):  # conventions.names_model, spelled out
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

        # -- tool calls joined by call id (reference: _call_links) ------------------------------
        if role is _TOOL_ROLE:
            if called is not None:
                calls = self._calls
                call_key = trace + called
                recent = calls.recent
                seen = recent.get(call_key)
                # CallLinks.executed's two usual cases, spelled out: the same span again (its
                # links were made the first time), or a new call id while nothing waits.
                if seen is not None and len(seen) == 1 and seen[0][1] == span_hex:
                    pass
                elif (
                    seen is None
                    and not calls.waiting
                    and call_key not in calls.older
                    and len(recent) < calls.room
                ):
                    recent[call_key] = ((node, span_hex),)
                else:
                    links = calls.executed(trace, called, node, span_hex)
                    if links:
                        out.extend(links)
        elif role is _MODEL_ROLE and (
            "gen_ai.output.messages" in a
            or "llm.output_messages.0.message.role" in a
            or "ai.response.toolCalls" in a
            or "gen_ai.completion.0.role" in a
        ):  # conventions.output_tool_calls reads nothing else
            self._call_links(out, coverage, role, node, a, trace, source, start, end)

        key = trace_id + span.span_id
        own = node if role is not _MODEL_ROLE else None
        current = ancestry.current
        if len(current) < ancestry.room and not ancestry.pending:
            # Ancestry.remember when no generation starts and no link waits, spelled out
            current[key] = SpanInfo(role, own, parent)
            if ancestry.previous:
                ancestry.previous.pop(key, None)
        else:
            waiting = ancestry.remember(key, SpanInfo(role, own, parent))
            for link in waiting:
                self._resume(out, coverage, key, link)

    # -- the reference implementation -----------------------------------------------------------

    def reference_into(
        self, span: Span, out: list[Observation], coverage: list[CoverageRecord]
    ) -> None:
        """Reference implementation of :meth:`normalize_into`: the same output, step by step.

        Small functions, no caches, nothing inlined: the span's shared context, the node it
        stands for (``#0``), its relation to an ancestor (``#1``), the command a tool call
        declares (``#2``), a model an agent or tool span names (``#3``), the session of an agent
        or root span (``#4``); then the span is remembered and relations that were waiting for
        it are resolved. Read this to know what the hot path does.
        """
        a = span.attributes
        ctx, service = self._reference_context(span)
        parent = span.trace_id + span.parent_span_id if span.parent_span_id else None
        op = operation_of(span, ctx.source, coverage)
        role, node = self._reference_node(span, ctx, service, op, parent, coverage)
        if role is Role.MODEL:
            attrs = dict(ctx.attrs)
            call_attrs(attrs, a, parent is None)
            ctx.attrs = attrs
        out.append(_entity_observation(ctx, node))
        if parent is not None and not (role is Role.AGENT and op == "create_agent"):
            self._reference_link(out, coverage, ctx, parent, role, node, a)
        if role is Role.TOOL:
            _reference_command(out, coverage, ctx, node, a)
        if role is Role.AGENT or role is Role.TOOL:
            _reference_named_model(out, ctx, node, a)
        if role is Role.AGENT or parent is None:
            _reference_session(out, ctx, node, a)
        if role is Role.MODEL or role is Role.TOOL:
            self._call_links(
                out,
                coverage,
                role,
                node,
                a,
                ctx.trace,
                ctx.source,
                ctx.start,
                ctx.end,
            )
        key = span.trace_id + span.span_id
        info = SpanInfo(role, None if role is Role.MODEL else node, parent)
        for link in self._remember(key, info):
            self._resume(out, coverage, key, link)

    def _reference_context(self, span: Span) -> tuple[Ctx, str]:
        """What every observation of ``span`` shares, and the emitting service's name."""
        resource = span.resource.attributes
        service = get_str(resource, "service.name") or "unknown_service"
        trace, span_hex = span.trace_id.hex(), span.span_id.hex()
        attrs: dict[str, AnyValue] = {"trace_id": trace, "span_id": span_hex}
        for key in RESOURCE_IDENTITY:
            value = resource.get(key)
            if value is not None:
                attrs[key] = value
        attrs["span.name"] = span.name
        attrs["span.status"] = _STATUS.get(span.status.code, "unset")
        server = span.kind is SpanKind.SERVER
        channel = self._assigner.channel(span.resource, span.scope, server=server)
        emitter = emitter_facts(resource, span.resource.peer)
        source = Source(
            channel=channel,
            backend="otlp",
            record_id=span_hex,
            emitter=emitter,
            trace_id=trace,
            span_id=span_hex,
        )
        start, end = span.start_time_unix_nano, span.end_time_unix_nano
        return Ctx(source, trace, f"{trace}:{span_hex}", start, end, attrs), service

    def _reference_node(  # noqa: PLR0917 (the reference's steps pass what they share)
        self,
        span: Span,
        ctx: Ctx,
        service: str,
        op: str,
        parent: SpanKey | None,
        coverage: list[CoverageRecord],
    ) -> tuple[Role, Entity]:
        """The role of ``span`` and the node it stands for (a model call naming no model is
        reported and kept as a plain span)."""
        a = span.attributes
        role = span_role(op, a, span.kind)
        if role is Role.AGENT:
            node = agent_entity(a, span.name, op, service, trace=ctx.trace, span_hex=ctx.record)
            return role, node
        if role is Role.TOOL:
            tool = _tool_name(span, op)
            call_id = tool_call_id(a)
            agent = self._calling_agent(parent)
            return role, tool_call_entity(tool, call_id, agent, ctx.trace, ctx.record)
        if role is Role.MODEL:
            model_name = _model_name(a)
            if model_name:
                return role, model_entity(_model_provider(a), model_name)
            coverage.append(_no_model_name(ctx.source, ctx.start, span.name))
        span_kind = "" if op else (get_str(a, *KIND_KEYS) or "").upper()
        kind = operation_kind(op, span_kind)
        if kind is not None:
            node = operation_entity(kind, a, span.name, op, service, ctx.trace, ctx.record)
            return Role.PLAIN, node
        unread = not_interpreted(span, ctx.source, op, span_kind)
        if unread is not None:
            coverage.append(unread)
        return Role.PLAIN, span_entity(a, span.name, service, ctx.trace, ctx.record)

    def _calling_agent(self, parent: SpanKey | None) -> str | None:
        """The name (else id) of the nearest agent ancestor the span memory knows, else None."""
        if parent is None:
            return None
        outcome, _ = self._ancestry.walk(parent, _AGENTS)
        return calling_agent(outcome.entity) if isinstance(outcome, Found) else None

    def _reference_link(  # noqa: PLR0917 (the reference's steps pass what they share)
        self,
        out: list[Observation],
        coverage: list[CoverageRecord],
        ctx: Ctx,
        parent: SpanKey,
        role: Role,
        node: Entity,
        a: Attributes,
    ) -> None:
        """The relation (``#1``) of the node to its accepted ancestor, now or once it arrives."""
        kind, accept = _ANCESTOR[role]
        attrs = _request_attrs(dict(ctx.attrs), a) if role is Role.MODEL else ctx.attrs
        self._link(out, coverage, ctx, parent, accept=accept, kind=kind, node=node, attrs=attrs)

    def drain(self) -> list[CoverageRecord]:
        """Coverage records for every relation still waiting for an ancestor, then for every
        tool call a model asked for that no tool span executed (:mod:`.tool_calls`)."""
        return [missing(link) for link in self._ancestry.drain()] + self._calls.drain()

    def _call_links(  # noqa: PLR0917 (both implementations pass what they hold)
        self,
        out: list[Observation],
        coverage: list[CoverageRecord],
        role: Role,
        node: Entity,
        a: Attributes,
        trace: str,
        source: Source,
        start: int,
        end: int,
    ) -> None:
        """A model call's asked-for tool calls, or a tool span's call id, joined by id
        (:mod:`.tool_calls`): the ``asked_for`` relations this span completes."""
        if role is _MODEL_ROLE:
            call_ids = output_tool_calls(a)
            if call_ids:
                at = end or start
                self._calls.asked(call_ids, node, source, trace, at, out, coverage)
            return
        facts = node.facts
        if isinstance(facts, ToolCallFacts) and facts.call_id is not None:
            out.extend(self._calls.executed(trace, facts.call_id, node, facts.span_id))

    # -- shared per (resource, scope) --------------------------------------------------------

    def _origin(self, resource: Resource, scope: Scope) -> Origin:
        last = self._last
        if last is not None and last.resource is resource and last.scope is scope:
            return last
        key = (id(resource), id(scope))
        origin = self._origins.get(key)
        # The cached objects are kept alive in the entry, so an id cannot be reused meanwhile.
        if origin is None or origin.resource is not resource or origin.scope is not scope:
            origin = Origin(resource, scope, self._assigner.channels(resource, scope))
            if len(self._origins) >= _ORIGINS:
                self._origins.clear()
            self._origins[key] = origin
        self._last = origin
        return origin

    # -- entities that repeat across spans (cached around the .entities builders) ------------

    def _agent(self, span: Span, op: str, service: str, trace: str, span_hex: str) -> Entity:
        """:func:`.entities.agent_entity`, shared by the spans of one named agent."""
        a = span.attributes
        name = get_str(a, *AGENT_NAME_KEYS, "gen_ai.agent.id")
        if name is None:
            name = name_from_span(span.name, op)
        attrs = pick(a)
        entity_name = a.get("traceloop.entity.name")  # not among the picked attributes
        if (
            name is None
            or (entity_name is not None and entity_name.__class__ is not str)
            or any(v.__class__ is not str for v in attrs.values())
        ):
            # Keyed by the span itself, or a value that does not compare exactly as a key.
            return agent_entity(a, span.name, op, service, trace=trace, span_hex=span_hex)
        # Everything agent_entity reads: the picked attributes hold the other name keys and the
        # id; ``traceloop.entity.name`` is read beside them.
        key = (service, name, entity_name, *attrs.items())
        cached = self._agents.get(key)
        if cached is not None:
            return cached
        agent = agent_entity(a, span.name, op, service, trace=trace, span_hex=span_hex)
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
        provider = _model_provider(a)
        key = (provider, name)
        cached = self._models.get(key)
        if cached is not None:
            return cached
        model = model_entity(provider, name)
        self._models.put(key, model)
        return model

    def _session(self, session_id: str) -> Entity:
        cached = self._sessions.get(session_id)
        if cached is not None:
            return cached
        session = session_entity(session_id)
        self._sessions.put(session_id, session)
        return session

    def _command_entry(self, tool: str, a: Attributes) -> tuple[CommandResult, CommandParts | None]:
        """``extract_command(tool, a)`` and what its command entities share, memoized.

        Agents repeat the same commands; extraction (JSON decoding, redaction) is a pure function
        of the tool name and the four attributes it reads, so when those are short strings (or
        absent) equal inputs share one entry. The parts (:func:`.entities.command_parts`: attrs,
        facts and key, shared by every command of one text and tool) are None when no command
        was extracted.
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
        parts: CommandParts | None = None
        if result.command is not None:
            parts_key = (result.command, tool)
            parts = self._command_parts.get(parts_key)
            if parts is None:
                parts = command_parts(result.command, tool)
                self._command_parts.put(parts_key, parts)
        entry = (result, parts)
        if cacheable and size <= _CACHED_ARGUMENTS:
            self._commands.put(tuple(key), entry)
        return entry

    # -- relations to ancestors ---------------------------------------------------------------

    def _link(
        self,
        out: list[Observation],
        coverage: list[CoverageRecord],
        ctx: Ctx,
        parent: SpanKey,
        *,
        accept: frozenset[Role],
        kind: int,
        node: Entity,
        attrs: Attributes,
        walked: tuple[Outcome, Entity | None] | None = None,
    ) -> None:
        """The relation of ``node`` to its accepted ancestor: now, or parked until it arrives.

        ``walked`` is ``self._ancestry.walk(parent, accept)`` when the caller already has it.
        """
        outcome, fallback = self._ancestry.walk(parent, accept) if walked is None else walked
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


# -- steps of the reference implementation (the hot path spells them out) ---------------------


def operation_of(span: Span, source: Source, coverage: list[CoverageRecord]) -> str:
    """The GenAI operation ``span`` states, else the one its conventions imply when it states
    no span-kind attribute either (``""`` for none; see :func:`.conventions.implied_operation`
    for the coverage record it may leave)."""
    a = span.attributes
    op = get_str(a, "gen_ai.operation.name") or ""
    if (
        not op
        and not get_str(a, *KIND_KEYS)
        and (has_convention(a) or span.name in CLAUDE_CODE_SPANS)
    ):
        op = implied_operation(span, source, coverage)
    return op


_READER = Source(channel=Channel.SEM, backend="otlp", record_id="")


def role_of(span: Span) -> Role:
    """What a stored span stands for, read as ``normalize`` reads it (:func:`operation_of`, then
    :func:`span_role`): for the layers that read a run's spans again (``compare``'s metrics),
    so that a span is an agent or a model call by one rule everywhere."""
    return span_role(operation_of(span, _READER, []), span.attributes, span.kind)


def span_role(op: str, a: Attributes, kind: SpanKind = SpanKind.UNSPECIFIED) -> Role:
    """What a span stands for: by its GenAI operation name (stated or implied, see
    :mod:`.conventions`), else its OpenInference or OpenLLMetry span kind.

    An ``execute_tool`` SERVER span is the serving side of a tool call (an MCP server's
    ``tools/call``), whose client span is the tool call: it is a plain span, not a second call.
    """
    if op:
        if op in _AGENT_OPS:
            return Role.AGENT
        if op == "execute_tool":
            return Role.TOOL if kind is not SpanKind.SERVER else Role.PLAIN
        return Role.MODEL if op in _MODEL_OPS else Role.PLAIN
    oi_kind = (get_str(a, *KIND_KEYS) or "").upper()
    if oi_kind == "AGENT":
        return Role.AGENT
    if oi_kind == "TOOL":
        return Role.TOOL
    return Role.MODEL if oi_kind in _OI_MODEL else Role.PLAIN


def _entity_observation(ctx: Ctx, node: Entity) -> Observation:
    """Observation ``#0``: the node the span stands for."""
    return Observation(
        id=f"{ctx.record}#0",
        time_unix_nano=ctx.start,
        end_time_unix_nano=ctx.end,
        source=ctx.source,
        subject=node,
        occurrence=ctx.occurrence,
        attrs=ctx.attrs,
    )


def _reference_command(
    out: list[Observation],
    coverage: list[CoverageRecord],
    ctx: Ctx,
    node: Entity,
    a: Attributes,
) -> None:
    """``#2``: the command a tool call declares, or why a command-like call yields none."""
    tool = node.label
    result = extract_command(tool, a)
    if result.command is not None:
        command = command_entity(command_parts(result.command, tool), ctx.trace, ctx.record)
        out.append(rel(ctx, 2, node, RelationKind.DECLARED_COMMAND, command))
    elif result.reason is not None:
        coverage.append(_no_command(ctx.source, ctx.start, tool, result.reason))


def _reference_named_model(out: list[Observation], ctx: Ctx, node: Entity, a: Attributes) -> None:
    """``#3``: the model an agent or tool span names itself."""
    if not names_model(a):
        return
    model_name = _model_name(a)
    if model_name:
        model = model_entity(_model_provider(a), model_name)
        requested = _request_attrs(dict(ctx.attrs), a)
        out.append(rel(ctx, 3, node, RelationKind.REQUESTED, model, attrs=requested))


def _reference_session(out: list[Observation], ctx: Ctx, node: Entity, a: Attributes) -> None:
    """``#4``: the session (conversation) an agent or root span states."""
    session_id = get_str(a, "gen_ai.conversation.id", "session.id")
    if session_id:
        out.append(rel(ctx, 4, node, RelationKind.PART_OF, session_entity(session_id)))


# -- attribute readers and records both implementations use ---------------------------------


def _tool_name(span: Span, op: str) -> str:
    name = get_str(span.attributes, *TOOL_NAME_KEYS)
    if name is None:
        name = claude_code_tool(span.name, span.attributes) or name_from_span(span.name, op)
    return name or UNKNOWN_TOOL


_model_name = model_name
_model_provider = model_provider


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


def _no_model_name(source: Source, start: int, name: str) -> CoverageRecord:
    return CoverageRecord(
        source=source,
        reason="model_name_missing",
        time_unix_nano=start,
        detail=f"model call span {name!r} names no model; kept as a plain span",
    )


def _no_command(source: Source, start: int, tool: str, reason: str) -> CoverageRecord:
    return CoverageRecord(
        source=source,
        reason="command_not_extracted",
        time_unix_nano=start,
        detail=f"tool {tool!r}: {reason}",
    )


_ABSENT: AnyValue = ("absent",)
"""A default for ``Mapping.get`` that no decoded attribute value is (compared by identity)."""
