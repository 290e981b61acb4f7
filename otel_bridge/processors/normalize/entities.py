"""The entities spans stand for, each with its typed facts and stable key.

Pure builders: equal inputs give equal entities. The identity (``id``) names the node of this run,
the key (``otel_bridge.identity``'s ``*_key``) names the same thing across runs and the facts say
what the span stated about it (``docs/model.md``, "Typed facts" and "Stable keys").

:meth:`.spans.SpanNormalizer.reference_into` calls these directly; the hot path
(:meth:`.spans.SpanNormalizer.normalize_into`) keeps what repeats across spans (agents, models,
sessions, command facts) in bounded caches and spells the per-span ones out, with equal results.
"""

from __future__ import annotations

import msgspec

from otel_bridge.identity import (
    agent_key,
    command_key,
    model_key,
    operation_key,
    span_key,
    tool_call_key,
)
from otel_bridge.model import (
    AgentFacts,
    AnyValue,
    Attributes,
    CommandFacts,
    Entity,
    EntityKind,
    ModelFacts,
    OperationFacts,
    ToolCallFacts,
)

from .conventions import AGENT_NAME_KEYS, CLAUDE_CODE_AGENT, operation_name
from .values import get_str

ENTITY_KEYS = (
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
"""Span attributes an agent or plain span entity keeps in its ``attrs``."""

SESSION_KEY = str(EntityKind.SESSION)
"""The stable key of every session: a conversation id is run-local, so only the kind is left."""

# Entity ids are ``identity.kind_id(kind, *parts)``, i.e. ``"<kind>:<part>:..."``; the prefixes
# are spelled out once here (the hot path builds them per span without a call).
TOOL_CALL_PREFIX = f"{EntityKind.TOOL_CALL}:"
COMMAND_PREFIX = f"{EntityKind.COMMAND}:"
SPAN_PREFIX = f"{EntityKind.SPAN}:"
AGENT_PREFIX = f"{EntityKind.AGENT}:"
MODEL_PREFIX = f"{EntityKind.MODEL}:"
SESSION_PREFIX = f"{EntityKind.SESSION}:conversation:"


def pick(a: Attributes) -> dict[str, AnyValue]:
    """The :data:`ENTITY_KEYS` that ``a`` holds, in that order."""
    out: dict[str, AnyValue] = {}
    for key in ENTITY_KEYS:
        value = a.get(key)
        if value is not None:
            out[key] = value
    return out


def name_from_span(span_name: str, op: str) -> str | None:
    """What a span's name says beyond its operation (``invoke_agent planner`` -> ``planner``;
    Claude Code's ``claude_code.interaction`` -> ``claude_code``)."""
    if span_name == "claude_code.interaction":
        return CLAUDE_CODE_AGENT
    stripped = span_name.removeprefix(op).strip() if op else span_name.strip()
    return stripped or None


def agent_entity(
    a: Attributes, span_name: str, op: str, service: str, *, trace: str, span_hex: str
) -> Entity:
    """The agent of an agent span: ``agent:<service>:<id or name>``.

    An agent that states an id (``gen_ai.agent.id``) is that id's node: two agents sharing a name
    under different ids are two nodes. The name is ``gen_ai.agent.name`` (or ``agent.name``,
    OpenLLMetry's ``traceloop.entity.name``); with neither nor an id, what the span name says
    after the operation. With no name or id at all the agent is this span's alone
    (``agent:<service>:span:<trace>:<span>``) and its facts say neither. The stable key stays
    ``agent:<service>:<name or id>`` (:func:`otel_bridge.identity.agent_key`).
    """
    stated = get_str(a, *AGENT_NAME_KEYS)
    agent_id = get_str(a, "gen_ai.agent.id")
    name = stated if stated is not None or agent_id is not None else name_from_span(span_name, op)
    attrs = pick(a)
    attrs["service.name"] = service
    facts = AgentFacts(service=service, name=name, agent_id=agent_id)
    key = agent_key(service, name, agent_id) or ""
    shown = name or agent_id
    if shown is None:  # nothing to share the node with
        node_id = f"{AGENT_PREFIX}{service}:span:{trace}:{span_hex}"
        return Entity(
            kind=EntityKind.AGENT, id=node_id, label=span_name, attrs=attrs, facts=facts, key=key
        )
    return Entity(
        kind=EntityKind.AGENT,
        id=f"{AGENT_PREFIX}{service}:{agent_id or name}",
        label=shown,
        attrs=attrs,
        facts=facts,
        key=key,
    )


def calling_agent(agent: Entity) -> str | None:
    """How a tool call names the agent ``agent``: its name, else its id, else None."""
    facts = agent.facts
    if isinstance(facts, AgentFacts):
        return facts.name or facts.agent_id
    return None


def with_calling_agent(tool_call: Entity, agent: Entity) -> Entity:
    """``tool_call`` naming the agent that invoked it, when its facts do not name one yet.

    A tool span often arrives before its agent's span (SDKs export children first), so the tool
    call's own observation cannot name the agent; the ``invoked`` relation, built once the agent
    is known (at once or later), carries the tool call with the agent filled in. The graph merges
    both sightings per field, so the result does not depend on arrival order.
    """
    facts = tool_call.facts
    if not isinstance(facts, ToolCallFacts) or facts.agent is not None:
        return tool_call
    name = calling_agent(agent)
    if name is None:
        return tool_call
    return msgspec.structs.replace(
        tool_call,
        facts=msgspec.structs.replace(facts, agent=name),
        key=tool_call_key(name, facts.tool) or "",
    )


def tool_call_entity(
    tool: str, call_id: str | None, agent: str | None, trace: str, span_hex: str
) -> Entity:
    """The tool call of one span: ``tool_call:<trace>:<span>``, keyed by agent and tool."""
    attrs: dict[str, AnyValue] = {"gen_ai.tool.name": tool, "trace_id": trace, "span_id": span_hex}
    if call_id is not None:
        attrs["gen_ai.tool.call.id"] = call_id
    return Entity(
        kind=EntityKind.TOOL_CALL,
        id=f"{TOOL_CALL_PREFIX}{trace}:{span_hex}",
        label=tool,
        attrs=attrs,
        facts=ToolCallFacts(
            tool=tool, call_id=call_id, agent=agent, trace_id=trace, span_id=span_hex
        ),
        key=tool_call_key(agent, tool) or "",
    )


def model_entity(provider: str, name: str) -> Entity:
    """A model as calls name it: ``model:<provider>:<name>`` (provider already lower case)."""
    return Entity(
        kind=EntityKind.MODEL,
        id=f"{MODEL_PREFIX}{provider}:{name}",
        label=name,
        attrs={"gen_ai.provider.name": provider, "gen_ai.request.model": name},
        facts=ModelFacts(provider=provider, name=name),
        key=model_key(provider, name) or "",
    )


def session_entity(session_id: str) -> Entity:
    """The session (conversation) a span states: ``session:conversation:<id>``."""
    return Entity(
        kind=EntityKind.SESSION,
        id=SESSION_PREFIX + session_id,
        label=session_id,
        attrs={"session.id": session_id},
        key=SESSION_KEY,
    )


CommandParts = tuple[Attributes, CommandFacts, str]
"""What every command entity of one command text and tool shares: attrs, facts and key."""


def command_parts(command: str, tool: str) -> CommandParts:
    """What every command entity of ``command`` declared through ``tool`` shares."""
    return (
        {"command.line": command, "gen_ai.tool.name": tool},
        CommandFacts(command=command, tool=tool),
        command_key(tool, command) or "",
    )


def command_entity(parts: CommandParts, trace: str, span_hex: str) -> Entity:
    """The command a tool call span declared: ``command:<trace>:<span>``."""
    attrs, facts, key = parts
    return Entity(
        kind=EntityKind.COMMAND,
        id=f"{COMMAND_PREFIX}{trace}:{span_hex}",
        label=facts.command,
        attrs=attrs,
        facts=facts,
        key=key,
    )


def operation_entity(  # noqa: PLR0917 (the parts of one span, as the hot path has them)
    kind: EntityKind,
    a: Attributes,
    span_name: str,
    op: str,
    service: str,
    trace: str,
    span_hex: str,
) -> Entity:
    """A typed operation span (workflow, chain, retrieval, ...): ``<kind>:<trace>:<span>``.

    Every run of the operation is its own node, like a tool call; the key
    (:func:`otel_bridge.identity.operation_key`) joins the runs of one named operation across
    runs. The name is what the span states (:func:`.conventions.operation_name`), else the span
    name after the operation (``invoke_workflow travel`` -> ``travel``), else for a retrieval
    its data source. The attributes are a plain span's, so displays keep working.
    """
    name = operation_name(kind, a) or name_from_span(span_name, op)
    data_source = get_str(a, "gen_ai.data_source.id")
    if name is None:
        name = data_source
    attrs = pick(a)
    attrs["span.name"] = span_name
    attrs["trace_id"] = trace
    attrs["span_id"] = span_hex
    attrs["service.name"] = service
    return Entity(
        kind=kind,
        id=f"{kind}:{trace}:{span_hex}",
        label=name or span_name,
        attrs=attrs,
        facts=OperationFacts(
            operation=str(kind),
            service=service,
            name=name,
            data_source=data_source,
            trace_id=trace,
            span_id=span_hex,
        ),
        key=operation_key(str(kind), service, name) or "",
    )


def span_entity(a: Attributes, name: str, service: str, trace: str, span_hex: str) -> Entity:
    """A plain operation span: ``span:<trace>:<span>``, keyed by service and name; no facts."""
    attrs = pick(a)
    attrs["span.name"] = name
    attrs["trace_id"] = trace
    attrs["span_id"] = span_hex
    attrs["service.name"] = service
    return Entity(
        kind=EntityKind.SPAN,
        id=f"{SPAN_PREFIX}{trace}:{span_hex}",
        label=name,
        attrs=attrs,
        key=span_key(service, name) or "",
    )
