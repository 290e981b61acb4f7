"""OS event log records -> process/file/endpoint/executable/session observations or coverage."""

from __future__ import annotations

from typing import Any

import pytest
from otel_span_helpers import HOST, OS_RESOURCE, RUN, os_record

from otel_bridge.identity import endpoint_id, executable_id, file_id, process_id
from otel_bridge.model import (
    Attribution,
    Batch,
    Channel,
    EntityKind,
    LogRecord,
    RelationKind,
    Resource,
    Scope,
)
from otel_bridge.processors.normalize import Normalizer
from otel_bridge.processors.normalize.oslogs import process_entity

START_MS = 1767225600000
PROC = process_id(HOST, 42, START_MS)


def _norm(*records: LogRecord) -> Batch:
    out: Batch = Normalizer()(Batch(logs=records))
    return out


def test_process_start_spawns_and_executes() -> None:
    """process.start: process entity, spawned parent -> child, executed child -> executable."""
    out = _norm(
        os_record(
            "process.start",
            "linux:1",
            process__parent_pid=1,
            process__parent__creation__time="2025-12-31T00:00:00.000Z",
            process__executable__path="/usr/bin/python3",
            process__executable__name="python3",
            process__command_args=["python3", "-c", "pass"],
            process__working_directory="/work",
        )
    )
    entity, executed, spawned = out.observations
    assert entity.subject.id == PROC
    assert entity.subject.kind is EntityKind.PROCESS
    assert entity.subject.attrs["process.command_args"] == ("python3", "-c", "pass")
    assert entity.subject.attrs["host.id"] == HOST
    assert executed.relation is RelationKind.EXECUTED
    assert executed.object is not None
    assert executed.object.id == executable_id("/usr/bin/python3")
    assert spawned.relation is RelationKind.SPAWNED
    assert spawned.subject.id == process_id(HOST, 1, START_MS - 86_400_000)
    assert spawned.object is not None
    assert spawned.object.id == PROC
    assert [o.id for o in out.observations] == ["linux:1#0", "linux:1#1", "linux:1#2"]
    assert all(o.occurrence == "linux:1" for o in out.observations)
    assert spawned.evidence.attribution is Attribution.SYSCALL
    assert spawned.source.channel is Channel.OS
    assert spawned.source.backend == "linux"
    assert spawned.attrs["event.name"] == "process.start"
    assert spawned.attrs["process.executable.name"] == "python3"


def test_process_exec_updates_and_exit_keeps_code() -> None:
    """process.exec gives executed; process.exit gives the entity with exit attributes."""
    out = _norm(
        os_record("process.exec", "linux:2", process__executable__path="/bin/ls"),
        os_record(
            "process.exit",
            "linux:3",
            process__exit__code=2,
            process__exit__time="2026-01-01T00:00:01.000Z",
        ),
    )
    rels = [o.relation for o in out.observations]
    assert rels == [None, RelationKind.EXECUTED, None]
    assert out.observations[2].subject.attrs["process.exit.code"] == 2


@pytest.mark.parametrize(
    ("event", "relation"),
    [
        ("file.open", RelationKind.OPENED),
        ("file.read", RelationKind.READ),
        ("file.write", RelationKind.WROTE),
        ("file.create", RelationKind.CREATED),
        ("file.delete", RelationKind.DELETED),
        ("file.rename", RelationKind.RENAMED),
    ],
)
def test_file_events(event: str, relation: RelationKind) -> None:
    """Each file event relates the process to the file with its relation."""
    (obs,) = _norm(
        os_record(
            event,
            "strace:9",
            file__path="/tmp/a/../b.txt",
            file__open__flags="O_RDONLY",
            file__new_path="/tmp/c.txt",
            evidence__causal=True,
        )
    ).observations
    assert obs.relation is relation
    assert obs.subject.id == PROC
    assert obs.object is not None
    assert obs.object.id == file_id("/tmp/b.txt")
    assert obs.object.kind is EntityKind.FILE
    assert obs.evidence.causal is True
    assert obs.attrs["file.open.flags"] == "O_RDONLY"


def test_file_change_is_session_observation_and_non_causal() -> None:
    """file.change: session -> file, attribution session_observation, causal false."""
    record = os_record(
        "file.change",
        "portable:5",
        file__path="/w/x",
        file__change__type="modified",
        process__pid=None,
        evidence__attribution="session_observation",
    )
    (obs,) = _norm(record).observations
    assert obs.relation is RelationKind.OBSERVED_CHANGE
    assert obs.subject.id == f"session:{RUN}"
    assert obs.subject.kind is EntityKind.SESSION
    assert obs.evidence.attribution is Attribution.SESSION_OBSERVATION
    assert obs.evidence.causal is False
    assert obs.attrs["file.change.type"] == "modified"


@pytest.mark.parametrize(
    ("event", "relation", "endpoint"),
    [
        ("network.connect", RelationKind.CONNECTED_TO, endpoint_id("tcp", "127.0.0.1", 11434)),
        (
            "network.connect_attempt",
            RelationKind.ATTEMPTED_CONNECT,
            endpoint_id("tcp", "127.0.0.1", 11434),
        ),
        ("network.listen", RelationKind.LISTENED_ON, endpoint_id("tcp", "0.0.0.0", 8080)),
    ],
)
def test_network_events(event: str, relation: RelationKind, endpoint: str) -> None:
    """Network events relate the process to an endpoint (peer, or local for listen)."""
    (obs,) = _norm(
        os_record(
            event,
            "linux:7",
            network__transport="tcp",
            network__peer__address="127.0.0.1",
            network__peer__port=11434,
            network__local__address="0.0.0.0",
            network__local__port=8080,
            network__connect__result="failed",
            error__type="ECONNREFUSED",
        )
    ).observations
    assert obs.relation is relation
    assert obs.object is not None
    assert obs.object.id == endpoint
    assert obs.object.kind is EntityKind.ENDPOINT
    if event == "network.connect_attempt":
        assert obs.attrs["error.type"] == "ECONNREFUSED"


def test_collection_state_becomes_coverage() -> None:
    """collection.state gives a coverage record naming collection and state."""
    out = _norm(
        os_record(
            "collection.state",
            "linux:c1",
            collection__name="network",
            collection__state="unavailable",
            collection__reason="no permission",
        )
    )
    assert out.observations == ()
    (cov,) = out.coverage
    assert cov.reason == "collection.network.unavailable"
    assert cov.detail == "no permission"
    assert cov.source.channel is Channel.OS


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (os_record("process.teleport", "x:1"), "unknown_os_event"),
        (os_record("file.open", "x:2"), "missing_attribute"),
        (os_record("file.open", "x:3", file__path="/a", process__pid="many"), "missing_attribute"),
        (os_record("network.connect", "x:4"), "missing_attribute"),
        (os_record("file.change", "x:5"), "missing_attribute"),
    ],
)
def test_uninterpretable_records_become_coverage(record: LogRecord, reason: str) -> None:
    """Unknown events and records missing required attributes are reported, never dropped."""
    out = _norm(record)
    assert out.observations == ()
    assert [c.reason for c in out.coverage] == [reason]
    assert out.coverage[0].detail


def test_non_os_log_is_reported_as_not_interpreted() -> None:
    """An application log record (no os channel) gives a log_not_interpreted record."""
    record = LogRecord(
        resource=Resource(attributes={"service.name": "app"}),
        scope=Scope(),
        time_unix_nano=7,
        severity_text="INFO",
        body="hello",
    )
    out = _norm(record)
    assert [c.reason for c in out.coverage] == ["log_not_interpreted"]
    assert out.logs == (record,)


def test_records_from_another_host_are_processed_alike() -> None:
    """A record from another machine uses that machine's host.id, nothing local."""
    other = Resource(attributes={**OS_RESOURCE.attributes, "host.id": "remote-9"})
    (obs,) = _norm(os_record("file.write", "linux:8", resource=other, file__path="/x")).observations
    assert obs.subject.id == process_id("remote-9", 42, START_MS)
    assert obs.attrs["host.id"] == "remote-9"


def test_unknown_start_time_is_marked_in_identity() -> None:
    """Without process.creation.time the identity says the start is unknown."""
    (obs,) = _norm(
        os_record("file.read", "l:1", file__path="/x", process__creation__time=None)
    ).observations
    assert obs.subject.id == process_id(HOST, 42, None)


def test_record_without_record_id_gets_a_derived_one() -> None:
    """A record lacking evidence.record_id still gets a deterministic source id."""
    record = os_record("file.read", "ignored", file__path="/x", evidence__record_id=None)
    (obs,) = _norm(record).observations
    assert obs.source.record_id == "linux:file.read:5000:0"
    assert _norm(record).observations[0].id == obs.id


def test_shared_entities_equal_the_reference() -> None:
    """The hot path shares one entity object between events that state the same values; each
    shared object equals what the readable builder (``process_entity``) makes of its record,
    and values that compare equal across types (1, 1.0, True) are never conflated."""
    variants: list[dict[str, Any]] = [
        {},
        {"process__executable__name": "python3"},
        {"process__exit__code": 1},
        {"process__exit__code": 1.0},
        {"process__exit__code": True},
        {"process__command_args": ["python3", "-c", "pass"]},
        {"process__working_directory": "/w"},
    ]
    records = [
        os_record("file.open", f"linux:{n}:{i}", file__path=f"/w/f{n % 3}", **extra)
        for n in range(6)
        for i, extra in enumerate(variants)
    ]
    out = _norm(*records)
    by_record = {o.source.record_id: o for o in out.observations}
    for record in records:
        subject = by_record[record.attributes["evidence.record_id"]].subject  # type: ignore[index]
        assert subject == process_entity(record.attributes, HOST, "file.open")
        assert subject.attrs == process_entity(record.attributes, HOST, "file.open").attrs
    for i, extra in enumerate(variants):
        seen = [by_record[f"linux:{n}:{i}"] for n in range(6)]
        assert all(o.subject is seen[0].subject for o in seen), extra
        codes = {o.subject.attrs.get("process.exit.code").__class__ for o in seen}
        assert len(codes) == 1
    exits = [by_record[f"linux:0:{i}"].subject.attrs.get("process.exit.code") for i in (2, 3, 4)]
    assert [type(v) for v in exits] == [int, float, bool]
    files = [by_record[f"linux:{n}:0"].object for n in (0, 3)]
    assert files[0] is files[1]
