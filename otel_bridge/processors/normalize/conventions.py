"""What a span means when it states no GenAI operation name: the other conventions, read alike.

The GenAI semantic conventions name a span's operation in ``gen_ai.operation.name``; OpenInference
(``openinference.span.kind``) and OpenLLMetry (``traceloop.span.kind``) name a kind instead. Spans
that state neither still often say what they are, and are read here as the GenAI operation they
stand for (:func:`implied_operation`), so one set of rules builds their nodes:

=========================================  ==============================================
span                                       read as
=========================================  ==============================================
Vercel AI SDK ``ai.operationId`` ending    ``chat`` (a model call: ``gen_ai.request.model``
``.doGenerate`` / ``.doStream``            or ``ai.model.id``)
Vercel AI SDK ``ai.embed.doEmbed`` /       ``embeddings``
``ai.embedMany.doEmbed``
Vercel AI SDK ``ai.toolCall``              ``execute_tool`` (``ai.toolCall.name``/``.id``)
OpenLLMetry ``llm.request.type``           ``chat``/``text_completion``/``embeddings``
Claude Code ``claude_code.interaction``    ``invoke_agent`` (agent ``claude_code``)
Claude Code ``claude_code.llm_request``    ``chat`` (``gen_ai.request.model`` or ``model``)
Claude Code ``claude_code.tool``           ``execute_tool`` (``tool_name``, ``tool_use_id``)
a CLIENT span naming a GenAI model or      ``chat``: the spec's own client span 2 states no
provider (``gen_ai.request.model``,        operation; a client span to a model API is a
``gen_ai.provider.name``, ``gen_ai.system``)  model call
=========================================  ==============================================

Claude Code's spans are its traces beta (``CLAUDE_CODE_ENHANCED_TELEMETRY_BETA=1``,
``OTEL_TRACES_EXPORTER=otlp``): one trace per user prompt (``claude_code.interaction``), its model
requests and tool calls as children, and under each tool call ``claude_code.tool.blocked_on_user``
(the permission wait) and ``claude_code.tool.execution`` (the run; a plain span). Claude Code
gives the processes its Bash tool starts a ``TRACEPARENT``, so they link exactly.

A span that carries GenAI attributes but matches none of these (say an INTERNAL span with only
``gen_ai.system``) is kept as a plain span with a ``genai_operation_unknown`` coverage record, so
what was not interpreted is visible. The Vercel AI SDK's wrapper spans (``ai.generateText``,
``ai.streamText``, ...) enclose the model call span and are plain operation spans.

The model a call names is its *request* model: ``gen_ai.request.model``, else OpenInference's
``llm.invocation_parameters`` ``model`` (what the client asked for), else the response model
(``gen_ai.response.model``, ``llm.model_name``), else the Vercel AI SDK's ``ai.model.id``, so one
model gets one node whichever instrumentor reported the call. Its provider is
``gen_ai.provider.name``, else the Vercel AI SDK's ``ai.model.provider`` up to its first dot
(``openai.responses`` -> ``openai``), else ``gen_ai.system``, ``llm.system``, ``llm.provider``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

from otel_bridge.model import (
    AnyValue,
    Attributes,
    CoverageRecord,
    EntityKind,
    Source,
    Span,
    SpanKind,
)

from .values import get_str

_VERCEL_MODEL = frozenset({"doGenerate", "doStream"})
_VERCEL_EMBED = frozenset({"ai.embed.doEmbed", "ai.embedMany.doEmbed"})
_LLM_REQUEST_TYPES = {"chat": "chat", "completion": "text_completion", "embedding": "embeddings"}
_CLIENT = SpanKind.CLIENT
_GENAI_MARKERS = ("gen_ai.request.model", "gen_ai.provider.name", "gen_ai.system")

KIND_KEYS = ("openinference.span.kind", "traceloop.span.kind")
"""The span-kind attributes of OpenInference and OpenLLMetry (``AGENT``/``TOOL``/``LLM``/...;
OpenLLMetry's ``agent``/``tool``/``workflow``/``task`` read upper case alike)."""

MODEL_KEYS = ("gen_ai.request.model", "gen_ai.response.model", "llm.model_name")
"""Model name attributes after the request model and before the Vercel AI SDK's."""


CLAUDE_CODE_SPANS = {
    "claude_code.interaction": "invoke_agent",
    "claude_code.llm_request": "chat",
    "claude_code.tool": "execute_tool",
}
"""Claude Code's span names and the GenAI operation each stands for (see the module docstring)."""

CLAUDE_CODE_AGENT = "claude_code"
"""The agent name of a ``claude_code.interaction`` span (it states none)."""


def has_convention(a: Attributes) -> bool:
    """Whether ``a`` holds anything :func:`implied_operation` reads (cheap: five lookups)."""
    return (
        "ai.operationId" in a
        or "llm.request.type" in a
        or "gen_ai.request.model" in a
        or "gen_ai.provider.name" in a
        or "gen_ai.system" in a
    )


ENDPOINT_KEYS = ("server.address", "server.port", "gen_ai.openai.api_base")
"""Where a model call states the API endpoint it called (OpenLLMetry: its API base URL)."""


def call_attrs(attrs: dict[str, AnyValue], a: Attributes, root: bool) -> None:
    """Add to a model call's observation attributes what ``correlate`` joins it by.

    The endpoint the span states (:data:`ENDPOINT_KEYS`, as stated) and ``span.root`` (true when
    the span has no parent: then no agent or tool call is its caller, and its process is).
    """
    if root:
        attrs["span.root"] = True
    if "server.address" not in a and "gen_ai.openai.api_base" not in a:
        return  # a port alone names no endpoint
    for key in ENDPOINT_KEYS:
        value = a.get(key)
        if value is not None:
            attrs[key] = value


def names_model(a: Attributes) -> bool:
    """Whether an agent or tool span names a model it uses (read then by :func:`model_name`)."""
    return (
        "gen_ai.request.model" in a
        or "gen_ai.response.model" in a
        or "llm.model_name" in a
        or "embedding.model_name" in a
    )


def implied_operation(span: Span, source: Source, coverage: list[CoverageRecord]) -> str:
    """The GenAI operation a span with no operation name and no span-kind attribute stands for.

    ``""`` when none; a span carrying GenAI attributes that says no operation also leaves a
    ``genai_operation_unknown`` coverage record.
    """
    claude = CLAUDE_CODE_SPANS.get(span.name)
    if claude is not None:
        return claude
    a = span.attributes
    vercel = get_str(a, "ai.operationId")
    if vercel is not None:
        if vercel in _VERCEL_EMBED:
            return "embeddings"
        if vercel == "ai.toolCall":
            return "execute_tool"
        if vercel.rpartition(".")[2] in _VERCEL_MODEL:
            return "chat"
        return ""  # a wrapper (ai.generateText, ...): the model call is its child span
    request_type = get_str(a, "llm.request.type")
    if request_type is not None and request_type in _LLM_REQUEST_TYPES:
        return _LLM_REQUEST_TYPES[request_type]
    if any(get_str(a, key) for key in _GENAI_MARKERS):
        if span.kind is _CLIENT:
            return "chat"
        coverage.append(
            CoverageRecord(
                source=source,
                reason="genai_operation_unknown",
                time_unix_nano=span.start_time_unix_nano,
                detail=(
                    f"span {span.name!r} carries GenAI attributes but states no operation and "
                    "is not a CLIENT span; kept as a plain span"
                ),
            )
        )
    return ""


def model_name(a: Attributes) -> str | None:
    """The model a call names (the request model first; see the module docstring)."""
    name = get_str(a, "gen_ai.request.model")
    if name is not None:
        return name
    params = a.get("llm.invocation_parameters")
    if isinstance(params, str) and '"model"' in params:
        try:
            decoded = orjson.loads(params)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict):
            requested = decoded.get("model")
            if isinstance(requested, str) and requested:
                return requested
    return get_str(a, *MODEL_KEYS) or get_str(a, "embedding.model_name", "ai.model.id")


def claude_code_tool(span_name: str, a: Attributes) -> str | None:
    """The tool a ``claude_code.tool`` span names (``tool_name``); None for any other span."""
    return get_str(a, "tool_name") if span_name == "claude_code.tool" else None


def model_provider(a: Attributes) -> str:
    """The provider a model call names, lower case (``unknown`` when it names none)."""
    provider = get_str(a, "gen_ai.provider.name")
    if provider is None:
        vercel = get_str(a, "ai.model.provider")
        if vercel is not None:
            provider = vercel.partition(".")[0]
        else:
            provider = get_str(a, "gen_ai.system", "llm.system", "llm.provider")
    return (provider or "unknown").lower()


def tool_call_id(a: Attributes) -> str | None:
    """The id of a tool call: GenAI, OpenInference (``tool_call.id``, ``tool.id``), Vercel,
    Claude Code (``tool_use_id``)."""
    return get_str(
        a, "gen_ai.tool.call.id", "tool_call.id", "tool.id", "ai.toolCall.id", "tool_use_id"
    )


TOOL_NAME_KEYS = ("gen_ai.tool.name", "tool.name", "ai.toolCall.name", "traceloop.entity.name")
"""Where a tool span names its tool, in order."""

AGENT_NAME_KEYS = ("gen_ai.agent.name", "agent.name", "traceloop.entity.name")
"""Where an agent span names its agent, in order."""


# -- typed operation spans: workflows, chains, retrievals, rerankers, guardrails, evaluators ----

OPERATION_OPS: dict[str, EntityKind] = {
    "invoke_workflow": EntityKind.WORKFLOW,
    "retrieval": EntityKind.RETRIEVAL,
}
"""GenAI operations that stand for a typed operation node (not an agent, tool or model call)."""

OPERATION_SPAN_KINDS: dict[str, EntityKind] = {
    "CHAIN": EntityKind.CHAIN,
    "RETRIEVER": EntityKind.RETRIEVAL,
    "RERANKER": EntityKind.RERANKER,
    "GUARDRAIL": EntityKind.GUARDRAIL,
    "EVALUATOR": EntityKind.EVALUATOR,
    "WORKFLOW": EntityKind.WORKFLOW,
    "TASK": EntityKind.CHAIN,
}
"""OpenInference (upper case) and OpenLLMetry (``workflow``, ``task``, read upper case) span kinds
that stand for a typed operation node. OpenLLMetry's ``task`` is a step of a workflow: a chain."""

INTERPRETED_OPS = frozenset(
    {
        "invoke_agent",
        "create_agent",
        "execute_tool",
        "chat",
        "text_completion",
        "embeddings",
        "generate_content",
        *OPERATION_OPS,
    }
)
"""Every ``gen_ai.operation.name`` value the normalizer builds a node for."""

INTERPRETED_SPAN_KINDS = frozenset({"AGENT", "TOOL", "LLM", "EMBEDDING", *OPERATION_SPAN_KINDS})
"""Every OpenInference / OpenLLMetry span kind the normalizer builds a node for."""


def operation_kind(op: str, span_kind: str) -> EntityKind | None:
    """The typed operation node a span stands for, by its GenAI operation (stated or implied)
    or, when it states none, its OpenInference / OpenLLMetry span kind (upper case); else None."""
    if op:
        return OPERATION_OPS.get(op)
    return OPERATION_SPAN_KINDS.get(span_kind) if span_kind else None


def not_interpreted(span: Span, source: Source, op: str, span_kind: str) -> CoverageRecord | None:
    """The coverage record of a span whose stated operation or span kind no rule reads, else None.

    Such a span is kept as a plain span; the record says which value was not understood, so a
    convention the normalizer does not know yet is visible rather than silently flattened.
    """
    if op:
        if op in INTERPRETED_OPS:
            return None
        reason, what = "genai_operation_not_interpreted", f"gen_ai.operation.name {op!r}"
    elif span_kind and span_kind not in INTERPRETED_SPAN_KINDS:
        reason, what = "span_kind_not_interpreted", f"span kind {span_kind!r}"
    else:
        return None
    return CoverageRecord(
        source=source,
        reason=reason,
        time_unix_nano=span.start_time_unix_nano,
        detail=f"span {span.name!r} states {what}, which no rule reads; kept as a plain span",
    )


def operation_name(kind: EntityKind, a: Attributes) -> str | None:
    """The name an operation span states: a workflow's ``gen_ai.workflow.name``, else (every
    kind) OpenLLMetry's ``traceloop.entity.name``; None when neither (the caller then takes the
    span name after the operation). ``traceloop.workflow.name`` is not read: OpenLLMetry sets it
    on every span of a workflow, so it names the enclosing workflow, not the span."""
    if kind is EntityKind.WORKFLOW:
        name = get_str(a, "gen_ai.workflow.name")
        if name is not None:
            return name
    return get_str(a, "traceloop.entity.name")


# -- tool calls a model call's output asks for ------------------------------------------------

_OI_OUTPUT = "llm.output_messages."
_OI_CALL_ID = ".tool_call.id"
_LLMETRY_OUTPUT = "gen_ai.completion."
_LLMETRY_CALL = ".tool_calls."


def output_tool_calls(a: Attributes) -> tuple[str, ...]:
    """The ids of the tool calls a model call's output asks for, in order, without repeats.

    Read from ``gen_ai.output.messages`` (GenAI: ``tool_call`` parts with an ``id``; a JSON string
    or the structured value), OpenInference's flattened
    ``llm.output_messages.<i>.message.tool_calls.<j>.tool_call.id``, OpenLLMetry's older
    ``gen_ai.completion.<i>.tool_calls.<j>.id`` and the Vercel AI SDK's ``ai.response.toolCalls``
    (a JSON array of objects with ``toolCallId``). The flattened forms are scanned only when the
    span states an output message role (``...0.message.role`` / ``gen_ai.completion.0.role``).
    """
    ids: list[str] = []
    messages = a.get("gen_ai.output.messages")
    if messages is not None:
        for message in _as_list(_decoded(messages)):
            if isinstance(message, Mapping):
                for part in _as_list(message.get("parts")):
                    if isinstance(part, Mapping) and part.get("type") == "tool_call":
                        ids.append(part.get("id"))  # type: ignore[arg-type]
    vercel = a.get("ai.response.toolCalls")
    if vercel is not None:
        for call in _as_list(_decoded(vercel)):
            if isinstance(call, Mapping):
                ids.append(call.get("toolCallId"))  # type: ignore[arg-type]
    if "llm.output_messages.0.message.role" in a or "gen_ai.completion.0.role" in a:
        for key, value in a.items():
            if (key.startswith(_OI_OUTPUT) and key.endswith(_OI_CALL_ID)) or (
                key.startswith(_LLMETRY_OUTPUT) and _LLMETRY_CALL in key and key.endswith(".id")
            ):
                ids.append(value)  # type: ignore[arg-type]
    return tuple(dict.fromkeys(i for i in ids if isinstance(i, str) and i))


def _decoded(value: AnyValue) -> object:
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    return value


def _as_list(value: object) -> Sequence[object]:
    return value if isinstance(value, (list, tuple)) else ()
