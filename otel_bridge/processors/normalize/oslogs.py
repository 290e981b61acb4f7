"""OS event log records (host receiver, or any OTLP source tagged ``evidence.channel=os``).

The record contract is the table in ``docs/contracts.md`` ("OS events"): the record's
``event_name`` (or an ``event.name`` attribute, for senders that predate the field) names the
event, the resource carries ``host.id``, ``evidence.backend`` and ``otel_bridge.run.id``, and the
attributes carry the process identity and the evidence fields. A record from another host is
processed exactly like a local one: nothing here looks at the local machine.

Each record yields observations with ids ``<evidence.record_id>#<n>`` and occurrence
``<evidence.record_id>`` (two separately recorded opens are two occurrences). A record that
cannot be interpreted yields a :class:`CoverageRecord` saying why, never nothing.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

from otel_bridge.identity import (
    endpoint_id,
    endpoint_key,
    executable_id,
    executable_key,
    file_id,
    file_key,
    iso_to_ms,
    kind_id,
    process_id,
    process_key,
    str_tuple,
)
from otel_bridge.model import (
    AnyValue,
    Attributes,
    Attribution,
    Channel,
    CoverageRecord,
    EndpointFacts,
    Entity,
    EntityKind,
    Evidence,
    ExecutableFacts,
    FileContent,
    FileFacts,
    LogRecord,
    Observation,
    ProcessFacts,
    RelationKind,
    Source,
)

from .entities import SESSION_KEY
from .values import get_bool, get_int, get_str

FILE_RELATIONS: Mapping[str, RelationKind] = {
    "file.open": RelationKind.OPENED,
    "file.read": RelationKind.READ,
    "file.write": RelationKind.WROTE,
    "file.create": RelationKind.CREATED,
    "file.delete": RelationKind.DELETED,
    "file.rename": RelationKind.RENAMED,
}
NETWORK_RELATIONS: Mapping[str, RelationKind] = {
    "network.connect": RelationKind.CONNECTED_TO,
    "network.connect_attempt": RelationKind.ATTEMPTED_CONNECT,
    "network.listen": RelationKind.LISTENED_ON,
    "network.accept": RelationKind.ACCEPTED,
}
_PROCESS_EVENTS = frozenset({"process.start", "process.exec", "process.exit"})
_PROCESS_KEYS = (
    "process.pid",
    "process.parent_pid",
    "process.executable.path",
    "process.executable.name",
    "process.command_args",
    "process.working_directory",
    "process.creation.time",
    "process.exit.code",
    "process.exit.time",
)
_DETAIL_KEYS = (
    "file.open.flags",
    "file.access",
    "file.new_path",
    "file.change.type",
    "evidence.merged_events",
    "evidence.last_time_unix_nano",
    "evidence.earliest_time_unix_nano",
    "network.connect.result",
    "network.local.address",
    "network.local.port",
    "network.observed_at",
    "network.found_by",
    "error.type",
    "process.env.traceparent",
    # The correlator names the parent process by this (identity = pid + start time).
    "process.parent.creation.time",
)


_OBSERVED_KEYS = (*_PROCESS_KEYS, *_DETAIL_KEYS)
"""The record attributes an observation keeps (when not None), in this order."""
_NO_EVIDENCE = Evidence()


@functools.lru_cache(maxsize=1024)
def _kept(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The keys of :data:`_OBSERVED_KEYS` among ``keys`` (a record's attribute keys), in the
    order of :data:`_OBSERVED_KEYS`: records of one kind have the same keys."""
    present = frozenset(keys)
    return tuple(k for k in _OBSERVED_KEYS if k in present)


_ENTITY_KEYS = (
    *_PROCESS_KEYS,
    "process.parent.creation.time",
    "process.command_line",
    "process.env.traceparent",
    "process.owner",
    "process.user.name",
)
"""Every attribute :func:`process_entity` reads: equal values give an equal entity."""
_SHARED = 4096
"""Entries of each entity memo (cleared when full: entities are cheap to rebuild)."""
_processes: dict[tuple[object, ...], Entity] = {}


class CoverageError(Exception):
    """A record that cannot be interpreted; the message is the coverage reason and detail."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def is_os_record(record: LogRecord) -> bool:
    """True when ``record`` belongs to the OS channel."""
    return is_os_resource(record.resource.attributes)


def is_os_resource(resource: Attributes) -> bool:
    """True when the records of a resource with these attributes belong to the OS channel."""
    return get_str(resource, "evidence.channel") == Channel.OS.value


def record_source(record: LogRecord) -> Source:
    """The :class:`Source` of an OS record (record id falls back to a content-derived id)."""
    backend = get_str(record.resource.attributes, "evidence.backend") or "unknown"
    record_id = get_str(record.attributes, "evidence.record_id")
    name = event_name(record)
    if record_id is None:
        shown = name or "record"
        record_id = f"{backend}:{shown}:{record.time_unix_nano}:{record.observed_time_unix_nano}"
    return Source(channel=Channel.OS, backend=backend, record_id=record_id, event=name)


def event_name(record: LogRecord) -> str:
    """The event name: the LogRecord field, else an ``event.name`` attribute."""
    return record.event_name or get_str(record.attributes, "event.name") or ""


def normalize_os_record(
    record: LogRecord, source: Source | None = None, host: str | None = None
) -> tuple[list[Observation], list[CoverageRecord]]:
    """Observations (or a coverage record) for one OS event record.

    ``source`` (:func:`record_source` of the record) and ``host`` (:func:`resource_host` of its
    resource) may be passed when the caller has them already: the result is the same.
    """
    if source is None:
        source = record_source(record)
    time = record.time_unix_nano or record.observed_time_unix_nano
    name = source.event
    try:
        if name == "collection.state":
            return [], [_collection_state(record, source, time)]
        if host is None:
            host = resource_host(record.resource.attributes)
        return _observations(record, source, time, name, host), []
    except CoverageError as exc:
        return [], [
            CoverageRecord(source=source, reason=exc.reason, time_unix_nano=time, detail=exc.detail)
        ]


def resource_host(resource: Attributes) -> str:
    """The host an OS record's resource names (``unknown_host`` when it names none)."""
    return get_str(resource, "host.id") or "unknown_host"


def resource_backend(resource: Attributes) -> str:
    """The backend an OS record's resource names (``unknown`` when it names none)."""
    return get_str(resource, "evidence.backend") or "unknown"


def fast_source(record: LogRecord, backend: str) -> Source:
    """:func:`record_source` of a record whose resource names ``backend``
    (:func:`resource_backend`): the same value, without reading the resource again."""
    a = record.attributes
    record_id = a.get("evidence.record_id")
    name = record.event_name or get_str(a, "event.name") or ""
    if record_id.__class__ is not str or not record_id:
        record_id = get_str(a, "evidence.record_id")
        if record_id is None:
            shown = name or "record"
            record_id = (
                f"{backend}:{shown}:{record.time_unix_nano}:{record.observed_time_unix_nano}"
            )
    return Source(channel=Channel.OS, backend=backend, record_id=record_id, event=name)


def _observations(
    record: LogRecord, source: Source, time: int, name: str, host: str
) -> list[Observation]:
    a = record.attributes
    evidence = _evidence(record)
    attrs: dict[str, AnyValue] = {"event.name": name, "host.id": host}
    attrs["evidence.record_id"] = source.record_id
    for key in _kept(tuple(a)):
        value = a[key]
        if value is not None:
            attrs[key] = value

    def obs(
        n: int, subject: Entity, rel: _Rel = None, obj: _Obj = None, end: int = 0
    ) -> Observation:
        return Observation(
            id=f"{source.record_id}#{n}",
            time_unix_nano=time,
            end_time_unix_nano=end,
            source=source,
            subject=subject,
            relation=rel,
            object=obj,
            evidence=evidence if rel is not None else _NO_EVIDENCE,
            occurrence=source.record_id,
            attrs=attrs,
        )

    if name == "file.change":
        path = _require_str(a, "file.path", name)
        run = get_str(record.resource.attributes, "otel_bridge.run.id") or "unknown_run"
        session = Entity(
            kind=EntityKind.SESSION,
            id=kind_id(EntityKind.SESSION, run),
            label=run,
            attrs={"otel_bridge.run.id": run},
            key=SESSION_KEY,
        )
        change = Evidence(
            attribution=evidence.attribution or Attribution.SESSION_OBSERVATION,
            causal=False if evidence.causal is None else evidence.causal,
        )
        return [
            Observation(
                id=f"{source.record_id}#0",
                time_unix_nano=time,
                source=source,
                subject=session,
                relation=RelationKind.OBSERVED_CHANGE,
                object=_file(path),
                evidence=change,
                occurrence=source.record_id,
                attrs=attrs,
            )
        ]
    if name == "file.content":  # the receiver read a written file (opt-in capture)
        return [obs(0, _file_content(a, time))]
    if name in FILE_RELATIONS:  # nearly every record: first
        proc = _process(a, host, name)
        file = _file(_require_str(a, "file.path", name))
        return [obs(0, proc, FILE_RELATIONS[name], file, _merged_end(a, time))]
    if name not in _PROCESS_EVENTS and name not in NETWORK_RELATIONS:
        raise CoverageError("unknown_os_event", f"event {name!r} is not part of the OS contract")
    proc = _process(a, host, name)
    if name in _PROCESS_EVENTS:
        out = [obs(0, proc)]
        if name != "process.exit":
            exe_path = get_str(a, "process.executable.path")
            if exe_path:
                exe_name = get_str(a, "process.executable.name")
                out.append(obs(1, proc, RelationKind.EXECUTED, _executable(exe_path, exe_name)))
        facts = proc.facts
        assert isinstance(facts, ProcessFacts)
        if name == "process.start" and facts.parent_start_time_ms is not None:
            # a parent the record names by its pid alone (one the plane does not follow: the
            # root's) is no node: the child keeps parent_pid as a fact (docs/host.md)
            out.append(obs(2, _parent(facts), RelationKind.SPAWNED, proc))
        return out
    return [obs(0, proc, NETWORK_RELATIONS[name], _endpoint(a, name))]


_Rel = RelationKind | None
_Obj = Entity | None


def _merged_end(a: Attributes, time: int) -> int:
    """A merged file record's last event time (``docs/host.md``, "Merged file records"), 0 when
    it stands for one event."""
    last = a.get("evidence.last_time_unix_nano")
    return last if type(last) is int and last > time else 0


def _process(a: Attributes, host: str, name: str) -> Entity:
    """Fast path of :func:`process_entity`: events that state the same values (every file and
    network event of one process states only its pid and start time) share one entity object.

    The memo's key is every attribute :func:`process_entity` reads, with each value's type (so
    ``1``, ``1.0`` and ``True`` stay apart); a record with an unhashable value (a map) is built
    afresh. Sharing the immutable object changes nothing in the output
    (``tests/normalize/test_normalize_os.py`` compares both), and lets the graph accumulator
    skip the merge checks of consecutive observations of one process (the accumulator's
    subject memo).
    """
    present = _stated(tuple(a))
    values = tuple(map(a.get, present))
    argv = a.get("process.command_args")
    if isinstance(argv, tuple) and not all(x.__class__ is str for x in argv):
        return process_entity(a, host, name)  # mixed element types: no sharing
    memo = (host, present, values, tuple(map(type, values)))
    try:
        entity = _processes.get(memo)
    except TypeError:  # an unhashable attribute value: no sharing
        return process_entity(a, host, name)
    if entity is None:
        entity = process_entity(a, host, name)
        if len(_processes) >= _SHARED:
            _processes.clear()
        _processes[memo] = entity
    return entity


@functools.lru_cache(maxsize=1024)
def _stated(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The keys of :data:`_ENTITY_KEYS` among ``keys`` (a record's attribute keys): the other
    keys of :data:`_ENTITY_KEYS` read as absent, so the values of these decide the entity."""
    present = frozenset(keys)
    return tuple(k for k in _ENTITY_KEYS if k in present)


def process_entity(a: Attributes, host: str, name: str) -> Entity:
    """The process an event is about, with everything the event states of it as facts
    (the reference of :func:`_process`, which shares the objects this builds)."""
    facts = process_facts(a, host)
    if facts is None:
        raise CoverageError("missing_attribute", f"{name}: no integer process.pid")
    pid = facts.pid
    attrs = {k: a[k] for k in _PROCESS_KEYS if k in a and a[k] is not None}
    attrs["host.id"] = host
    label = facts.executable_name or str(pid)
    return Entity(
        kind=EntityKind.PROCESS,
        id=process_id(host, pid, facts.start_time_ms),
        label=f"{label} ({pid})" if label != str(pid) else label,
        attrs=attrs,
        facts=facts,
        key=_process_key(facts.executable_path, facts.argv) or "",
    )


def process_facts(a: Attributes, host: str) -> ProcessFacts | None:
    """What an OS event's attributes state about its process (None without a ``process.pid``).

    Every field the event does not state is None (unknown): a record without
    ``process.command_args`` (a string array) has ``argv`` None, whatever its parent ran.
    """
    pid = get_int(a, "process.pid")
    if pid is None:
        return None
    return ProcessFacts(
        host_id=host,
        pid=pid,
        start_time_ms=iso_to_ms(get_str(a, "process.creation.time")),
        parent_pid=get_int(a, "process.parent_pid"),
        parent_start_time_ms=iso_to_ms(get_str(a, "process.parent.creation.time")),
        executable_path=get_str(a, "process.executable.path"),
        executable_name=get_str(a, "process.executable.name"),
        argv=str_tuple(a.get("process.command_args")),
        command_line=get_str(a, "process.command_line"),
        cwd=get_str(a, "process.working_directory"),
        traceparent=get_str(a, "process.env.traceparent"),
        exit_code=get_int(a, "process.exit.code"),
        user=get_str(a, "process.owner", "process.user.name"),
    )


_process_key = functools.lru_cache(maxsize=4096)(process_key)
""":func:`~otel_bridge.identity.process_key`, memoized: a workload runs the same commands often."""


def _parent(child: ProcessFacts) -> Entity:
    """The parent in a ``spawned`` observation: only its identity is stated (by the child's
    event), so its facts hold host, pid and start time, and it has no stable key (its own
    ``process.start`` states what it runs)."""
    assert child.parent_pid is not None
    assert child.parent_start_time_ms is not None
    pid = child.parent_pid
    return Entity(
        kind=EntityKind.PROCESS,
        id=process_id(child.host_id, pid, child.parent_start_time_ms),
        label=str(pid),
        attrs={"process.pid": pid, "host.id": child.host_id},
        facts=ProcessFacts(
            host_id=child.host_id, pid=pid, start_time_ms=child.parent_start_time_ms
        ),
        key="",  # nothing stable is known of it (identity.process_key)
    )


@functools.lru_cache(maxsize=_SHARED)
def _executable(path: str, stated_name: str | None) -> Entity:
    """The executable at ``path`` (named ``stated_name`` when the event names it); memoized, so
    the events of one image share the entity object, as for :func:`_process`."""
    name = stated_name or path.rsplit("/", 1)[-1]
    return Entity(
        kind=EntityKind.EXECUTABLE,
        id=executable_id(path),
        label=name,
        attrs={"process.executable.path": path, "process.executable.name": name},
        facts=ExecutableFacts(path=os.path.normpath(path), name=name),
        key=executable_key(path) or "",
    )


@functools.lru_cache(maxsize=_SHARED)
def _file(path: str) -> Entity:
    """The file at ``path``; memoized (the events of one file share the entity object)."""
    return Entity(
        kind=EntityKind.FILE,
        id=file_id(path),
        label=path,
        attrs={"file.path": path},
        facts=FileFacts(path=os.path.normpath(path)),
        key=file_key(path) or "",
    )


def _file_content(a: Attributes, time: int) -> Entity:
    """The file a ``file.content`` event read, its facts stating what was read and when."""
    path = _require_str(a, "file.path", "file.content")
    state = _require_str(a, "file.content.state", "file.content")
    content = FileContent(
        state=state,
        read_at=get_str(a, "file.content.read_at") or "run_end",
        time_unix_nano=time,
        size=get_int(a, "file.size"),
        sha256=get_str(a, "file.hash.sha256") if state == "hashed" else None,
        detail=get_str(a, "file.content.detail"),
    )
    entity = _file(path)
    return Entity(
        kind=entity.kind,
        id=entity.id,
        label=entity.label,
        attrs=entity.attrs,
        facts=FileFacts(path=os.path.normpath(path), content=content),
        key=entity.key,
    )


def _endpoint(a: Attributes, name: str) -> Entity:
    local = name == "network.listen"
    addr_key = "network.local.address" if local else "network.peer.address"
    port_key = "network.local.port" if local else "network.peer.port"
    transport = get_str(a, "network.transport") or "tcp"
    address = get_str(a, addr_key)
    port = get_int(a, port_key)
    if address is None:
        raise CoverageError("missing_attribute", f"{name}: no {addr_key}")
    return _endpoint_entity(transport, address, 0 if port is None else port)


@functools.lru_cache(maxsize=_SHARED)
def _endpoint_entity(transport: str, address: str, port: int) -> Entity:
    """The endpoint (memoized, as :func:`_file`)."""
    return Entity(
        kind=EntityKind.ENDPOINT,
        id=endpoint_id(transport, address, port),
        label=f"{address}:{port}" if transport != "unix" else address,
        attrs={
            "network.transport": transport,
            "network.peer.address": address,
            "network.peer.port": port,
        },
        facts=EndpointFacts(transport=transport.lower(), address=address, port=port),
        key=endpoint_key(transport, address, port) or "",
    )


_EVIDENCE_KEYS = (
    "evidence.attribution",
    "evidence.causal",
    "evidence.inferred",
    "evidence.identity_exact",
)
_evidences: dict[tuple[object, ...], Evidence] = {}


def _evidence(record: LogRecord) -> Evidence:
    """The evidence a record states (shared objects: :func:`_shared_evidence`), remembered by
    the four values it is read from and their types (``True`` and ``1`` stay apart)."""
    raw = tuple(map(record.attributes.get, _EVIDENCE_KEYS))
    key = (*raw, *map(type, raw))
    try:
        found = _evidences.get(key)
    except TypeError:  # an unhashable value: read afresh
        return _read_evidence(record)
    if found is None:
        found = _read_evidence(record)
        if len(_evidences) >= 256:
            _evidences.clear()
        _evidences[key] = found
    return found


def _read_evidence(record: LogRecord) -> Evidence:
    a = record.attributes
    mode = get_str(a, "evidence.attribution")
    attribution = None
    if mode is not None:
        try:
            attribution = Attribution(mode)
        except ValueError:
            attribution = None
    return _shared_evidence(
        attribution,
        get_bool(a, "evidence.causal"),
        get_bool(a, "evidence.inferred"),
        get_bool(a, "evidence.identity_exact"),
    )


@functools.lru_cache(maxsize=256)
def _shared_evidence(
    attribution: Attribution | None,
    causal: bool | None,
    inferred: bool | None,
    identity_exact: bool | None,
) -> Evidence:
    # Records share a handful of evidence combinations; sharing the (immutable) objects saves
    # memory and lets the graph accumulator cache their packed form by identity.
    return Evidence(
        attribution=attribution, causal=causal, inferred=inferred, identity_exact=identity_exact
    )


def _require_str(a: Attributes, key: str, name: str) -> str:
    value = get_str(a, key)
    if value is None:
        raise CoverageError("missing_attribute", f"{name}: no {key}")
    return value


def _collection_state(record: LogRecord, source: Source, time: int) -> CoverageRecord:
    a = record.attributes
    collection = get_str(a, "collection.name") or "unknown"
    state = get_str(a, "collection.state") or "unknown"
    reason = get_str(a, "collection.reason") or ""
    return CoverageRecord(
        source=source,
        reason=f"collection.{collection}.{state}",
        time_unix_nano=time,
        detail=reason,
    )
