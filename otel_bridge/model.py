"""The one data model of otel-bridge.

Everything that flows through a pipeline is defined here, as frozen, keyword-only records and
``StrEnum``s. Dicts exist only at the edges (YAML, OTLP/JSON, files); inside the pipeline data is
typed and immutable, which makes fan-out to several consumers safe.

**Why msgspec structs, not dataclasses.** The records are :class:`msgspec.Struct` classes
(``frozen=True, kw_only=True, gc=False``) rather than frozen stdlib dataclasses. They behave the
same for this code base (typed fields with defaults, keyword construction, equality and hashing by
field, immutability, pickling, :func:`msgspec.structs.replace` for copies), but the collector builds
several of them per received span: a frozen dataclass's ``__init__`` costs about 1.5 µs for an
:class:`Observation` and a struct's about 0.15 µs, and ``gc=False`` keeps these millions of short-
and long-lived records out of the cyclic garbage collector, whose passes over them were a fifth of
the collector's CPU time (``BENCHMARKS.md``). ``gc=False`` is safe because a frozen record cannot
be made to refer to itself: the records form trees (a span refers to its resource, an observation
to its entities), never cycles.

Three layers live side by side in one :class:`Batch`:

* **Telemetry** as OpenTelemetry defines it: :class:`Span` and :class:`LogRecord`, each pointing at
  its shared :class:`Resource` and :class:`Scope`. Receivers produce these; OTLP exporters encode
  them back. The host receiver emits OS events as log records whose resource carries
  ``evidence.channel=os`` (see ``docs/architecture.md``).
* **Observations**, the canonical evidence model of the ExecWeave paper (sections IV and V): an
  :class:`Entity` and, where the record relates two entities, a relation to a second entity, each
  with its :class:`Source` and :class:`Evidence` fields. The ``normalize`` processor turns
  telemetry into observations; the ``correlate`` processor adds derived observations.
* **Coverage records**: a record that could not be interpreted is reported, never dropped silently.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeAlias

import msgspec

# An OTLP AnyValue. Arrays are tuples and key-value lists are read-only mappings, so values stay
# hashable where it matters and nobody mutates them in place.
AnyValue: TypeAlias = (
    str | bool | int | float | bytes | tuple["AnyValue", ...] | Mapping[str, "AnyValue"] | None
)
Attributes = Mapping[str, AnyValue]


def _attrs() -> Attributes:
    return {}


class Channel(enum.StrEnum):
    """Evidence channel (ExecWeave section IV-A): who produced an observation."""

    SEM = "sem"
    """Agent or framework instrumentation: what an agent reported."""
    GW = "gw"
    """LLM gateways and proxies."""
    MODEL = "model"
    """Model runtimes (a local model server)."""
    OS = "os"
    """Independent operating-system observation: what the machine saw."""


class EntityKind(enum.StrEnum):
    """Node kinds of the evidence graph."""

    AGENT = "agent"
    SESSION = "session"
    TOOL_CALL = "tool_call"
    COMMAND = "command"
    MODEL = "model"
    PROCESS = "process"
    EXECUTABLE = "executable"
    FILE = "file"
    ENDPOINT = "endpoint"
    SPAN = "span"
    """A span the normalizer kept as a plain operation (neither agent, tool nor model call)."""
    WORKFLOW = "workflow"
    """A workflow run: GenAI ``invoke_workflow``, OpenLLMetry ``workflow`` (``OperationFacts``)."""
    CHAIN = "chain"
    """A step linking other steps: OpenInference CHAIN, OpenLLMetry ``task``."""
    RETRIEVAL = "retrieval"
    """A retrieval from a data source: GenAI ``retrieval``, OpenInference RETRIEVER."""
    RERANKER = "reranker"
    """A reranking of documents: OpenInference RERANKER."""
    GUARDRAIL = "guardrail"
    """A guardrail check: OpenInference GUARDRAIL."""
    EVALUATOR = "evaluator"
    """An evaluation: OpenInference EVALUATOR."""


OPERATION_KINDS: frozenset[EntityKind] = frozenset(
    {
        EntityKind.WORKFLOW,
        EntityKind.CHAIN,
        EntityKind.RETRIEVAL,
        EntityKind.RERANKER,
        EntityKind.GUARDRAIL,
        EntityKind.EVALUATOR,
    }
)
"""Kinds of the typed operation spans (:class:`OperationFacts`): in the trace's structure they
stand where a plain span would (``child_of`` their parent's node, and a model call under them
with no agent or tool call above is still their process's own call)."""


class RelationKind(enum.StrEnum):
    """Edge relations of the evidence graph (``docs/model.md`` documents each)."""

    DELEGATED_TO = "delegated_to"
    INVOKED = "invoked"
    REQUESTED = "requested"
    DECLARED_COMMAND = "declared_command"
    CORRELATED_WITH_PROCESS = "correlated_with_process"
    SAME_REQUEST = "same_request"
    """sem/gw/model spans that share a request id (exact identity, non-causal)."""
    SERVED_AT = "served_at"
    """model -> endpoint: a call of the model reached the API at that observed endpoint."""
    PART_OF = "part_of"
    """An entity belongs to a session or run (agent in session, span in trace)."""
    CHILD_OF = "child_of"
    """A plain span nested in its parent span, as the trace reported it."""
    SPAWNED = "spawned"
    EXECUTED = "executed"
    OPENED = "opened"
    READ = "read"
    WROTE = "wrote"
    CREATED = "created"
    DELETED = "deleted"
    RENAMED = "renamed"
    OBSERVED_CHANGE = "observed_change"
    ASKED_FOR = "asked_for"
    """model -> tool_call: a model call's output asked for the tool call that a tool span
    executed, matched by call id in one trace (exact identity, non-causal)."""
    CONNECTED_TO = "connected_to"
    ATTEMPTED_CONNECT = "attempted_connect"
    LISTENED_ON = "listened_on"
    ACCEPTED = "accepted"
    """process -> endpoint: the process accepted a TCP connection from that peer (os)."""
    CONNECTED_TO_PROCESS = "connected_to_process"
    """process -> process on another host: one TCP connection, both ends observed with the same
    4-tuple (derived by the gateway's ``crosshost`` processor, exact, non-causal)."""
    REMOTE_CHILD_OF = "remote_child_of"
    """span node on one host -> its parent span's node on another host: one trace carried
    across hosts by W3C trace context (derived by ``crosshost``, exact, non-causal)."""


class Attribution(enum.StrEnum):
    """How a relation was attributed (``evidence.attribution``)."""

    SYSCALL = "syscall"
    SAMPLED_PROCESS = "sampled_process"
    SESSION_OBSERVATION = "session_observation"
    EXACT_IDENTITY = "exact_identity"
    HEURISTIC = "heuristic"
    REPORTED = "reported"
    """Stated by the instrumented application itself (a span); not independently observed."""


class Grade(enum.StrEnum):
    """Evidence grade (ExecWeave Table II). Ordered strongest first."""

    A = "A"
    B = "B"
    C = "C"
    D = "D"
    U = "U"


GRADE_ORDER: tuple[Grade, ...] = (Grade.A, Grade.B, Grade.C, Grade.D, Grade.U)


class CollectionState(enum.StrEnum):
    """Terminal state of one collection of the host receiver (ExecWeave section VI-B)."""

    AVAILABLE = "available"
    DEGRADED = "degraded"
    UNAVAILABLE = "unavailable"
    NOT_SAMPLED = "not_sampled"
    NOT_REQUESTED = "not_requested"


class SpanKind(enum.IntEnum):
    """OTLP ``Span.SpanKind`` values."""

    UNSPECIFIED = 0
    INTERNAL = 1
    SERVER = 2
    CLIENT = 3
    PRODUCER = 4
    CONSUMER = 5


class StatusCode(enum.IntEnum):
    """OTLP ``Status.StatusCode`` values."""

    UNSET = 0
    OK = 1
    ERROR = 2


# --------------------------------------------------------------------------------------------
# Telemetry (OpenTelemetry's data model, typed)
# --------------------------------------------------------------------------------------------


class TransportPeer(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The TCP peer an OTLP request came from, as the receiving socket saw it: the sender's
    end of the connection (its address and port), the receiver's own bound port, the host the
    receiver runs on and when the request arrived. Set by the ``otlp`` receiver once per
    request; what the sender *stated* is in the resource's attributes, this is what the
    receiver *observed*."""

    protocol: str
    """``grpc``, ``http/protobuf`` or ``http/json``."""
    address: str
    """The peer's IP address (IPv4-mapped IPv6 written as IPv4)."""
    port: int
    """The peer's port: the sender's local port of the connection."""
    local_port: int
    """The receiver's bound port the request came in on."""
    host_id: str
    """The receiving host (``identity.host_id``)."""
    time_unix_nano: int = 0
    """When the request arrived (receiver clock)."""


class Resource(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The entity producing telemetry (OTLP ``Resource``)."""

    attributes: Attributes = msgspec.field(default_factory=_attrs)
    dropped_attributes_count: int = 0
    schema_url: str = ""
    peer: TransportPeer | None = None
    """Where the request carrying this resource came from (receiver-owned, never an OTLP
    attribute: OTLP encoders write only the three fields above, so forwarding and exporting
    stay as received). None for a resource no ``otlp`` receiver decoded."""


class Scope(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The instrumentation scope (OTLP ``InstrumentationScope``)."""

    name: str = ""
    version: str = ""
    attributes: Attributes = msgspec.field(default_factory=_attrs)
    dropped_attributes_count: int = 0
    schema_url: str = ""


class SpanEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A timed event inside a span."""

    time_unix_nano: int
    name: str
    attributes: Attributes = msgspec.field(default_factory=_attrs)
    dropped_attributes_count: int = 0


class SpanLink(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A link from a span to another span context."""

    trace_id: bytes
    span_id: bytes
    trace_state: str = ""
    attributes: Attributes = msgspec.field(default_factory=_attrs)
    dropped_attributes_count: int = 0
    flags: int = 0


class Status(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A span's status."""

    code: StatusCode = StatusCode.UNSET
    message: str = ""


UNSET_STATUS = Status()
"""The status of a span that states none (shared: records are immutable)."""


class Span(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One OTLP span with its resource and scope. Ids are raw bytes (16 and 8)."""

    resource: Resource
    scope: Scope
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes = b""
    trace_state: str = ""
    flags: int = 0
    name: str = ""
    kind: SpanKind = SpanKind.UNSPECIFIED
    start_time_unix_nano: int = 0
    end_time_unix_nano: int = 0
    attributes: Attributes = msgspec.field(default_factory=_attrs)
    dropped_attributes_count: int = 0
    events: tuple[SpanEvent, ...] = ()
    dropped_events_count: int = 0
    links: tuple[SpanLink, ...] = ()
    dropped_links_count: int = 0
    status: Status = UNSET_STATUS


class LogRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One OTLP log record with its resource and scope.

    The host receiver's OS events are log records with an ``event_name`` such as
    ``process.start`` and semantic-convention attributes (``process.pid``, ``file.path``, ...).
    """

    resource: Resource
    scope: Scope
    time_unix_nano: int = 0
    observed_time_unix_nano: int = 0
    severity_number: int = 0
    severity_text: str = ""
    body: AnyValue = None
    attributes: Attributes = msgspec.field(default_factory=_attrs)
    dropped_attributes_count: int = 0
    flags: int = 0
    trace_id: bytes = b""
    span_id: bytes = b""
    event_name: str = ""


# --------------------------------------------------------------------------------------------
# Canonical evidence
# --------------------------------------------------------------------------------------------


class EmitterFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="emitter"):
    """The process that emitted a span, as the span's resource states it (``None``: the
    resource does not state it), and the transport peer the receiver saw the span come from.
    Read once per resource by ``normalize``."""

    host_id: str | None = None
    """Resource ``host.id``."""
    pid: int | None = None
    """Resource ``process.pid``."""
    start_time_ms: int | None = None
    """Resource ``process.creation.time``, parsed (``identity.iso_to_ms``)."""
    peer: TransportPeer | None = None
    """The transport peer of the request that carried the span (:class:`TransportPeer`):
    not stated by the resource but observed by the receiver."""


class Source(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Where an observation came from. Derived observations name the deriving component."""

    channel: Channel
    backend: str
    """``otlp`` for spans; ``portable``/``linux``/``strace``/``ebpf`` for OS events;
    ``correlate`` for derived relations."""
    record_id: str
    """Id of the source record: span id (hex), OS event id, or derived record id."""
    emitter: EmitterFacts | None = None
    """For a span's observations, the process that emitted the span when its resource states
    any of pid, host or start time (one shared object per resource); None otherwise."""
    trace_id: str = ""
    """The trace (hex) of the span the observation comes from (a span's observations) or links
    to a process (a derived ``correlated_with_process`` link that names one span: ``traceparent``,
    a singleton bridge); empty otherwise."""
    span_id: str = ""
    """That span's id (hex); for a span's own observations the same as ``record_id``."""
    event: str = ""
    """For an OS event's observations, the event's name (``process.start``, ``file.open``, ...,
    as the host receiver writes it); empty otherwise."""


class Evidence(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The evidence fields of ExecWeave sections IV and V. ``None`` means *not stated*.

    ``causal`` is never defaulted to ``False``: an absent flag and an explicit ``False`` mean
    different things (invariant I1).
    """

    attribution: Attribution | None = None
    causal: bool | None = None
    inferred: bool | None = None
    identity_exact: bool | None = None
    method: str | None = None
    score: float | None = None
    support: tuple[str, ...] = ()
    """Ids of the observations a derived relation rests on."""
    grade: Grade | None = None


NO_EVIDENCE = Evidence()


# --------------------------------------------------------------------------------------------
# Typed facts: what an entity *is*, read from fields, never parsed again from attribute strings
# --------------------------------------------------------------------------------------------
#
# ``normalize`` fills one facts record per entity it builds from a source (an OS event, a span);
# ``correlate``, ``enrich``, the graph and every later layer read these fields. ``None`` in a
# facts field means *not observed* (unknown), never "empty": an argv that could not be read is
# ``None``, an observed empty argv is ``()``. ``docs/model.md`` lists every field.


class ProcessFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="process"):
    """A process as one OS event saw it (``process.*`` semantic conventions, typed)."""

    host_id: str
    pid: int
    start_time_ms: int | None = None
    """Start time in ms since the epoch (the identity's), None when unknown."""
    parent_pid: int | None = None
    parent_start_time_ms: int | None = None
    executable_path: str | None = None
    executable_name: str | None = None
    argv: tuple[str, ...] | None = None
    """The executed argument vector; None when it could not be read (unknown, not empty)."""
    command_line: str | None = None
    cwd: str | None = None
    traceparent: str | None = None
    """A W3C ``traceparent`` found in the process environment (exact identity, when present)."""
    exit_code: int | None = None
    user: str | None = None


class ExecutableFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="executable"):
    """An executable image."""

    path: str
    name: str


class FileContent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What the host receiver read of a written file's content (opt-in: ``capture.file_hashes``).

    ``state`` says what the reading found: ``hashed`` (``size`` and ``sha256`` of the bytes
    read), ``too_large`` (``size`` only: above ``max_bytes``, not read), ``changed`` (the file
    changed while it was read: no hash), ``unreadable`` (``detail`` says why), ``missing`` (gone
    when read), ``not_regular`` (not a regular file: not read). ``read_at`` says when:
    ``close_write`` (at the writer's close, from the kernel's descriptor: ``linux``) or
    ``run_end`` (after the workload ended: every backend), ``time_unix_nano`` exactly when."""

    state: str
    read_at: str
    time_unix_nano: int
    size: int | None = None
    sha256: str | None = None
    detail: str | None = None


class FileFacts(
    msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="file", omit_defaults=True
):
    """A file, by normalised absolute path; ``content`` only when content capture was on and
    the file was written (None: not read)."""

    path: str
    content: FileContent | None = None


class EndpointFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="endpoint"):
    """A network endpoint: transport, address and port (0 when unknown or not applicable)."""

    transport: str
    address: str
    port: int


class ModelFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="model"):
    """A model as calls name it: provider (lower case, ``unknown`` when unstated) and name."""

    provider: str
    name: str


class AgentFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="agent"):
    """An agent: its id and name as the spans state them, and the emitting service."""

    service: str
    name: str | None = None
    agent_id: str | None = None


class ToolCallFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="tool_call"):
    """One tool call: the tool's name, the call id, the calling agent when known."""

    tool: str
    call_id: str | None = None
    agent: str | None = None
    """The calling agent's name (or id when it has no name), when the trace states it."""
    trace_id: str = ""
    span_id: str = ""


class CommandFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="command"):
    """A command a tool call declared (what the agent said it would run)."""

    command: str
    tool: str = ""


class OperationFacts(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag="operation"):
    """One typed operation span (workflow, chain, retrieval, reranker, guardrail, evaluator)."""

    operation: str
    """The entity kind (``workflow``, ``chain``, ``retrieval``, ...)."""
    service: str
    """The emitting service (resource ``service.name``, ``unknown_service`` when unstated)."""
    name: str | None = None
    """The operation's name as the span states it (workflow name, ...), else None."""
    data_source: str | None = None
    """The data source a retrieval states (``gen_ai.data_source.id``), else None."""
    trace_id: str = ""
    span_id: str = ""


Facts: TypeAlias = (
    ProcessFacts
    | ExecutableFacts
    | FileFacts
    | EndpointFacts
    | ModelFacts
    | AgentFacts
    | ToolCallFacts
    | CommandFacts
    | OperationFacts
)
"""Every facts record; encoded with a ``type`` tag (``process``, ``file``, ...)."""


class Entity(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A thing with a stable identity: ``(kind, id)`` names one graph node.

    ``id`` names one node of one run: a process is ``process:<host.id>:<pid>:<start ms>``, an
    endpoint ``endpoint:<transport>:<addr>:<port>``, a file ``file:<resolved path>``. ``key`` names
    the same thing across runs. Use :mod:`otel_bridge.identity` to build both.
    """

    kind: EntityKind
    id: str
    label: str = ""
    attrs: Attributes = msgspec.field(default_factory=_attrs)
    facts: Facts | None = None
    """Typed facts about the entity, as this observation saw it (None: none stated)."""
    key: str = ""
    """The run-independent *stable key* (``otel_bridge.identity``'s ``*_key`` functions): the same
    thing in two runs has the same key, while ``id`` is run-local (it embeds pids, start times,
    trace ids). Empty when no stable key can be given."""


class Observation(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One canonical observation: an entity, or a relation between two entities.

    ``occurrence`` is the logical occurrence this observation reports: two observations of one
    occurrence count twice as evidence and once logically (evidence count 2, logical count 1);
    two separately recorded file opens are two occurrences. ``id`` is unique per observation:
    receiving the same span twice yields the same observations (same ids) again, copies that
    the ``graph`` exporter applies once (``docs/graph.md``, "Counting").

    An observation has both a relation and an object, or neither. Producers (``normalize``,
    ``correlate``, ``crosshost``) build them so; what arrives from outside (a journal, a run
    directory's files, the store, another host's evidence) is checked where it is decoded
    (:func:`relation_problem`), not on every construction: a ``__post_init__`` runs a Python
    call for every observation the pipeline makes (about 730 instructions each, 1,800 a span on
    the throughput benchmark's stream).
    """

    id: str
    time_unix_nano: int
    source: Source
    subject: Entity
    relation: RelationKind | None = None
    object: Entity | None = None
    evidence: Evidence = NO_EVIDENCE
    occurrence: str = ""
    end_time_unix_nano: int = 0
    attrs: Attributes = msgspec.field(default_factory=_attrs)
    """Per-observation details (open flags, time delta, ...) that do not describe an entity."""

    @property
    def is_relation(self) -> bool:
        """True when this observation relates ``subject`` to ``object``."""
        return self.relation is not None

    @property
    def derived(self) -> bool:
        """True for observations derived by a processor rather than reported by a source."""
        return bool(self.evidence.support) or self.evidence.inferred is True


def relation_problem(observation: Observation) -> str:
    """What breaks "a relation and an object, or neither" in ``observation``, or ``""``."""
    if (observation.relation is None) != (observation.object is None):
        return "an observation has both a relation and an object, or neither"
    return ""


BRIDGE_SKIP_ATTR = "correlate.skip"
"""A ``tool_call`` entity attribute: why the ``correlate`` processor's singleton bridge linked no
process to that call (the reason it counts as ``skip.<reason>``, e.g. ``no_candidate`` or
``unsupported_command.control_operator``), set on a derived sighting of the call."""

SENDER_SKIP_ATTR = "correlate.sender"
"""An ``agent`` (or ``model``) entity attribute: why the ``correlate`` processor found no process
that sent its spans over their transport peer (``no_connection``, ``several_processes``,
``not_loopback``: what it counts as ``exact.transport_peer.<reason>``), set on a derived sighting
of the entity when its spans' resource states no ``process.pid``."""

SENDER_CORRECTED_ATTR = "correlate.sender.corrected"
"""``true`` on a derived sighting of an entity whose ``no_connection`` verdict
(:data:`SENDER_SKIP_ATTR`) a later observation contradicted: it was linked to a process after
all (its ``correlated_with_process`` or ``requested`` edge is the answer), or its connection was
found held by several processes. A graph node's attributes are first-available, so the node
keeps the verdict beside this mark."""


class CoverageRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A record the pipeline could not interpret, or a known gap in what was observed.

    Coverage is how "not observed" stays visible as unknown instead of looking absent.
    """

    source: Source
    reason: str
    time_unix_nano: int = 0
    detail: str = ""


class Batch(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The unit passed between components through ``consume(batch)``. Immutable."""

    spans: tuple[Span, ...] = ()
    logs: tuple[LogRecord, ...] = ()
    observations: tuple[Observation, ...] = ()
    coverage: tuple[CoverageRecord, ...] = ()

    def __len__(self) -> int:
        return len(self.spans) + len(self.logs) + len(self.observations) + len(self.coverage)

    def replace(
        self,
        *,
        spans: tuple[Span, ...] | None = None,
        logs: tuple[LogRecord, ...] | None = None,
        observations: tuple[Observation, ...] | None = None,
        coverage: tuple[CoverageRecord, ...] | None = None,
    ) -> Batch:
        """A copy with the given parts replaced."""
        return Batch(
            spans=self.spans if spans is None else spans,
            logs=self.logs if logs is None else logs,
            observations=self.observations if observations is None else observations,
            coverage=self.coverage if coverage is None else coverage,
        )

    @staticmethod
    def concat(batches: tuple[Batch, ...] | list[Batch]) -> Batch:
        """One batch holding every record of ``batches`` in order."""
        return Batch(
            spans=tuple(s for b in batches for s in b.spans),
            logs=tuple(r for b in batches for r in b.logs),
            observations=tuple(o for b in batches for o in b.observations),
            coverage=tuple(c for b in batches for c in b.coverage),
        )


EMPTY_BATCH = Batch()
