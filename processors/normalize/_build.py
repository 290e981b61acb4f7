"""Fast constructors of the model's frozen records, for the normalizer's per-span hot path.

A frozen dataclass's generated ``__init__`` sets each field through ``object.__setattr__`` and,
for :class:`~otel_bridge.model.Observation`, runs ``__post_init__``; per span that is several
microseconds. The builders here allocate the object and fill its slots through the slot
descriptors directly, which is about twice as fast and yields objects equal in every respect
(same class, same field values). Each builder sets **every** field: the field lists are checked
against the dataclasses at import (:func:`otel_bridge.otlp._build.slot_setters`), so a field
added to the model fails loudly here instead of leaving a slot unset. The builders keep the
model's invariants by construction (:func:`entity_observation` has neither relation nor object,
:func:`relation_observation` both).
"""

from __future__ import annotations

from otel_bridge.model import (
    Attributes,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    Observation,
    RelationKind,
    Source,
)
from otel_bridge.otlp._build import slot_setters

_new = object.__new__

(_src_channel, _src_backend, _src_record) = slot_setters(
    Source, ("channel", "backend", "record_id")
)
(_ent_kind, _ent_id, _ent_label, _ent_attrs) = slot_setters(
    Entity, ("kind", "id", "label", "attrs")
)
(
    _obs_id,
    _obs_time,
    _obs_source,
    _obs_subject,
    _obs_relation,
    _obs_object,
    _obs_evidence,
    _obs_occurrence,
    _obs_end,
    _obs_attrs,
) = slot_setters(
    Observation,
    (
        "id",
        "time_unix_nano",
        "source",
        "subject",
        "relation",
        "object",
        "evidence",
        "occurrence",
        "end_time_unix_nano",
        "attrs",
    ),
)


def source(channel: Channel, backend: str, record_id: str) -> Source:
    """``Source(channel=..., backend=..., record_id=...)``."""
    s = _new(Source)
    _src_channel(s, channel)
    _src_backend(s, backend)
    _src_record(s, record_id)
    return s


def entity(kind: EntityKind, id: str, label: str, attrs: Attributes) -> Entity:
    """``Entity(kind=..., id=..., label=..., attrs=...)``."""
    e = _new(Entity)
    _ent_kind(e, kind)
    _ent_id(e, id)
    _ent_label(e, label)
    _ent_attrs(e, attrs)
    return e


def entity_observation(  # noqa: PLR0917 (hot path: positional calls are cheaper)
    id: str,
    time_unix_nano: int,
    end_time_unix_nano: int,
    source: Source,
    subject: Entity,
    evidence: Evidence,
    occurrence: str,
    attrs: Attributes,
    /,
) -> Observation:
    """An observation of ``subject`` alone (no relation, no object)."""
    o = _new(Observation)
    _obs_id(o, id)
    _obs_time(o, time_unix_nano)
    _obs_source(o, source)
    _obs_subject(o, subject)
    _obs_relation(o, None)
    _obs_object(o, None)
    _obs_evidence(o, evidence)
    _obs_occurrence(o, occurrence)
    _obs_end(o, end_time_unix_nano)
    _obs_attrs(o, attrs)
    return o


def relation_observation(  # noqa: PLR0917 (hot path: positional calls are cheaper)
    id: str,
    time_unix_nano: int,
    end_time_unix_nano: int,
    source: Source,
    subject: Entity,
    relation: RelationKind,
    object: Entity,
    evidence: Evidence,
    occurrence: str,
    attrs: Attributes,
    /,
) -> Observation:
    """An observation relating ``subject`` to ``object`` by ``relation``."""
    o = _new(Observation)
    _obs_id(o, id)
    _obs_time(o, time_unix_nano)
    _obs_source(o, source)
    _obs_subject(o, subject)
    _obs_relation(o, relation)
    _obs_object(o, object)
    _obs_evidence(o, evidence)
    _obs_occurrence(o, occurrence)
    _obs_end(o, end_time_unix_nano)
    _obs_attrs(o, attrs)
    return o
