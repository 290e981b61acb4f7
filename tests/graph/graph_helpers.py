"""Test helpers: build canonical observations directly."""

from __future__ import annotations

from otel_bridge.identity import file_id, kind_id, process_id
from otel_bridge.model import (
    AnyValue,
    Attribution,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    Observation,
    RelationKind,
    Source,
)

PROC = Entity(
    kind=EntityKind.PROCESS,
    id=process_id("h", 10, 1),
    label="python3 (10)",
    attrs={"process.pid": 10},
)


def file_entity(path: str, **attrs: AnyValue) -> Entity:
    """A file entity."""
    return Entity(
        kind=EntityKind.FILE, id=file_id(path), label=path, attrs={"file.path": path, **attrs}
    )


def agent(name: str) -> Entity:
    """An agent entity."""
    return Entity(kind=EntityKind.AGENT, id=kind_id(EntityKind.AGENT, "svc", name), label=name)


def obs(
    record: str,
    *,
    subject: Entity = PROC,
    relation: RelationKind | None = RelationKind.OPENED,
    obj: Entity | None = None,
    evidence: Evidence | None = None,
    occurrence: str | None = None,
    time: int = 1_000,
    end: int = 0,
    channel: Channel = Channel.OS,
    backend: str = "linux",
    attrs: dict[str, AnyValue] | None = None,
    n: int = 0,
) -> Observation:
    """One observation; defaults to a syscall-attributed causal open of /tmp/f."""
    if relation is not None and obj is None:
        obj = file_entity("/tmp/f")
    return Observation(
        id=f"{record}#{n}",
        time_unix_nano=time,
        end_time_unix_nano=end,
        source=Source(channel=channel, backend=backend, record_id=record),
        subject=subject,
        relation=relation,
        object=obj if relation is not None else None,
        evidence=evidence
        if evidence is not None
        else Evidence(attribution=Attribution.SYSCALL, causal=True),
        occurrence=record if occurrence is None else occurrence,
        attrs=attrs or {},
    )
