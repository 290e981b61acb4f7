"""Lossless JSON encoding of :class:`Observation` and :class:`CoverageRecord` (JSON lines).

Used by the ``file`` exporter and the run directory. ``x == observation_from_dict(
json.loads(json.dumps(observation_to_dict(x))))`` holds for every observation, including
attribute values JSON has no type for:

* ``bytes`` are written as ``{"$bytes": "<base64>"}``;
* non-finite floats as ``{"$float": "nan" | "inf" | "-inf"}``;
* a mapping whose only key is one of these markers (or ``$map``) is wrapped as
  ``{"$map": {...}}`` so it cannot be mistaken for one.

Tuples become JSON arrays and come back as tuples; ``int`` and ``float`` keep their type
(Python's ``json`` writes ``1.0`` for a float). Evidence fields are always written, so an absent
``causal`` (``null``) and an explicit ``false`` stay distinct. Decoding checks every field and
raises :class:`~otel_bridge.errors.DecodeError` naming the field.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
import orjson

from otel_bridge.errors import DecodeError
from otel_bridge.model import (
    AnyValue,
    Attribution,
    Channel,
    CoverageRecord,
    EmitterFacts,
    Entity,
    EntityKind,
    Evidence,
    Facts,
    Grade,
    Observation,
    RelationKind,
    Source,
    relation_problem,
)

_MARKERS = frozenset({"$bytes", "$float", "$map"})

# --------------------------------------------------------------------------------------------
# Attribute values
# --------------------------------------------------------------------------------------------


_PLAIN = frozenset({str, int, bool, type(None)})
"""Types written as they are (exact types: the common case, tested before anything else)."""


def value_to_json(value: AnyValue) -> Any:
    """A JSON-ready form of an attribute value (see the module docstring)."""
    if type(value) in _PLAIN or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple | list):
        return [value_to_json(v) for v in value]
    if isinstance(value, Mapping):
        out = {str(k): value_to_json(v) for k, v in value.items()}
        if len(out) == 1 and next(iter(out)) in _MARKERS:
            return {"$map": out}
        return out
    raise TypeError(f"not an attribute value: {type(value).__name__}")


def value_from_json(data: Any, path: str = "value") -> AnyValue:
    """The attribute value encoded by :func:`value_to_json`."""
    if data is None or isinstance(data, bool | int | float | str):
        return data
    if isinstance(data, list):
        return tuple(value_from_json(v, f"{path}[{i}]") for i, v in enumerate(data))
    if isinstance(data, dict):
        if len(data) == 1:
            ((key, inner),) = data.items()
            if key == "$bytes":
                if not isinstance(inner, str):
                    raise DecodeError(f"{path}: $bytes must be a base64 string")
                try:
                    return base64.b64decode(inner, validate=True)
                except binascii.Error as exc:
                    raise DecodeError(f"{path}: invalid base64: {exc}") from None
            if key == "$float":
                if inner not in ("nan", "inf", "-inf"):
                    raise DecodeError(f"{path}: $float must be nan, inf or -inf")
                return float(inner)
            if key == "$map":
                if not isinstance(inner, dict):
                    raise DecodeError(f"{path}: $map must hold a mapping")
                return {k: value_from_json(v, f"{path}.{k}") for k, v in inner.items()}
        return {k: value_from_json(v, f"{path}.{k}") for k, v in data.items()}
    raise DecodeError(f"{path}: not a JSON value: {type(data).__name__}")


def attrs_to_json(attrs: Mapping[str, AnyValue]) -> dict[str, Any]:
    """Attributes as a JSON object, each value encoded by :func:`value_to_json`."""
    plain = _PLAIN
    return {
        k if type(k) is str else str(k): v if type(v) in plain else value_to_json(v)
        for k, v in attrs.items()
    }


def attrs_from_json(data: Any, path: str) -> dict[str, AnyValue]:
    """Attributes decoded from a JSON object."""
    if not isinstance(data, dict):
        raise DecodeError(f"{path}: expected an object")
    return {k: value_from_json(v, f"{path}.{k}") for k, v in data.items()}


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


def source_to_dict(source: Source) -> dict[str, Any]:
    """A :class:`Source` as a plain dict (the optional typed fields only when set)."""
    out: dict[str, Any] = {
        "channel": str(source.channel),
        "backend": source.backend,
        "record_id": source.record_id,
    }
    if source.emitter is not None:
        out["emitter"] = msgspec.to_builtins(source.emitter)
    for name in _SOURCE_STRINGS:
        if value := getattr(source, name):
            out[name] = value
    return out


_SOURCE_STRINGS = ("trace_id", "span_id", "event")


def entity_to_dict(entity: Entity) -> dict[str, Any]:
    """An :class:`Entity` as a plain dict."""
    out: dict[str, Any] = {
        "kind": str(entity.kind),
        "id": entity.id,
        "label": entity.label,
        "attrs": attrs_to_json(entity.attrs),
    }
    if entity.key:
        out["key"] = entity.key
    if entity.facts is not None:
        out["facts"] = msgspec.to_builtins(entity.facts)  # tagged with "type"
    return out


def evidence_to_dict(evidence: Evidence) -> dict[str, Any]:
    """:class:`Evidence` as a plain dict; every field is written (``null`` = not stated)."""
    return {
        "attribution": None if evidence.attribution is None else str(evidence.attribution),
        "causal": evidence.causal,
        "inferred": evidence.inferred,
        "identity_exact": evidence.identity_exact,
        "method": evidence.method,
        "score": value_to_json(evidence.score),
        "support": list(evidence.support),
        "grade": None if evidence.grade is None else str(evidence.grade),
    }


def observation_to_dict(
    observation: Observation, entity: Callable[[Entity], dict[str, Any]] = entity_to_dict
) -> dict[str, Any]:
    """An :class:`Observation` as a plain, JSON-ready dict. ``entity`` encodes its subject
    and object (a caller encoding many observations may pass a memo of
    :func:`entity_to_dict`: the dicts are only read)."""
    return {
        "id": observation.id,
        "time_unix_nano": observation.time_unix_nano,
        "end_time_unix_nano": observation.end_time_unix_nano,
        "source": source_to_dict(observation.source),
        "subject": entity(observation.subject),
        "relation": None if observation.relation is None else str(observation.relation),
        "object": None if observation.object is None else entity(observation.object),
        "evidence": evidence_to_dict(observation.evidence),
        "occurrence": observation.occurrence,
        "attrs": attrs_to_json(observation.attrs),
    }


def coverage_to_dict(record: CoverageRecord) -> dict[str, Any]:
    """A :class:`CoverageRecord` as a plain, JSON-ready dict."""
    return {
        "source": source_to_dict(record.source),
        "reason": record.reason,
        "time_unix_nano": record.time_unix_nano,
        "detail": record.detail,
    }


def _field(data: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], path: str) -> Any:
    if key not in data:
        raise DecodeError(f"{path}.{key}: missing")
    value = data[key]
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in _tuple(kinds)):
        raise DecodeError(f"{path}.{key}: wrong type {type(value).__name__}")
    return value


def _tuple(kinds: type | tuple[type, ...]) -> tuple[type, ...]:
    return kinds if isinstance(kinds, tuple) else (kinds,)


def _optional(data: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], path: str) -> Any:
    if data.get(key) is None:
        return None
    return _field(data, key, kinds, path)


def _enum(enum_type: Any, value: Any, path: str) -> Any:
    try:
        return enum_type(value)
    except ValueError:
        raise DecodeError(f"{path}: unknown value {value!r}") from None


def _int(data: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int:
    if key not in data and default is not None:
        return default
    value = _field(data, key, (int, str), path)
    if isinstance(value, str):
        if not value.lstrip("-").isdigit():
            raise DecodeError(f"{path}.{key}: not an integer")
        return int(value)
    return int(value)


def _object(data: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(data, dict):
        raise DecodeError(f"{path}: expected an object")
    return data


def source_from_dict(data: Any, path: str = "source") -> Source:
    """The :class:`Source` encoded by :func:`source_to_dict`."""
    d = _object(data, path)
    emitter = d.get("emitter")
    try:
        typed = None if emitter is None else msgspec.convert(emitter, type=EmitterFacts)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"{path}.emitter: {exc}") from None
    return Source(
        channel=_enum(Channel, _field(d, "channel", str, path), f"{path}.channel"),
        backend=_field(d, "backend", str, path),
        record_id=_field(d, "record_id", str, path),
        emitter=typed,
        trace_id=_optional(d, "trace_id", str, path) or "",
        span_id=_optional(d, "span_id", str, path) or "",
        event=_optional(d, "event", str, path) or "",
    )


def entity_from_dict(data: Any, path: str = "entity") -> Entity:
    """The :class:`Entity` encoded by :func:`entity_to_dict`."""
    d = _object(data, path)
    return Entity(
        kind=_enum(EntityKind, _field(d, "kind", str, path), f"{path}.kind"),
        id=_field(d, "id", str, path),
        label=d.get("label") or "",
        attrs=attrs_from_json(d.get("attrs", {}), f"{path}.attrs"),
        facts=_facts(d.get("facts"), f"{path}.facts"),
        key=d.get("key") or "",
    )


def _facts(data: Any, path: str) -> Facts | None:
    if data is None:
        return None
    try:
        facts: Facts = msgspec.convert(data, type=Facts)
        return facts
    except msgspec.ValidationError as exc:
        raise DecodeError(f"{path}: {exc}") from None


def evidence_from_dict(data: Any, path: str = "evidence") -> Evidence:
    """The :class:`Evidence` encoded by :func:`evidence_to_dict`."""
    d = _object(data, path)
    attribution = _optional(d, "attribution", str, path)
    grade = _optional(d, "grade", str, path)
    score = value_from_json(d.get("score"), f"{path}.score")
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        raise DecodeError(f"{path}.score: expected a number")
    support = d.get("support", [])
    if not isinstance(support, list) or not all(isinstance(s, str) for s in support):
        raise DecodeError(f"{path}.support: expected a list of strings")
    return Evidence(
        attribution=None
        if attribution is None
        else _enum(Attribution, attribution, f"{path}.attribution"),
        causal=_optional(d, "causal", bool, path),
        inferred=_optional(d, "inferred", bool, path),
        identity_exact=_optional(d, "identity_exact", bool, path),
        method=_optional(d, "method", str, path),
        score=None if score is None else score,  # int scores stay ints: lossless
        support=tuple(support),
        grade=None if grade is None else _enum(Grade, grade, f"{path}.grade"),
    )


def observation_from_dict(data: Any, path: str = "observation") -> Observation:
    """The :class:`Observation` encoded by :func:`observation_to_dict`."""
    d = _object(data, path)
    relation = _optional(d, "relation", str, path)
    obj = d.get("object")
    try:
        observation = Observation(
            id=_field(d, "id", str, path),
            time_unix_nano=_int(d, "time_unix_nano", path),
            end_time_unix_nano=_int(d, "end_time_unix_nano", path, default=0),
            source=source_from_dict(d.get("source"), f"{path}.source"),
            subject=entity_from_dict(d.get("subject"), f"{path}.subject"),
            relation=None
            if relation is None
            else _enum(RelationKind, relation, f"{path}.relation"),
            object=None if obj is None else entity_from_dict(obj, f"{path}.object"),
            evidence=evidence_from_dict(d.get("evidence", {}), f"{path}.evidence"),
            occurrence=d.get("occurrence") or "",
            attrs=attrs_from_json(d.get("attrs", {}), f"{path}.attrs"),
        )
    except ValueError as exc:
        raise DecodeError(f"{path}: {exc}") from None
    problem = relation_problem(observation)
    if problem:
        raise DecodeError(f"{path}: {problem}")
    return observation


def coverage_from_dict(data: Any, path: str = "coverage") -> CoverageRecord:
    """The :class:`CoverageRecord` encoded by :func:`coverage_to_dict`."""
    d = _object(data, path)
    return CoverageRecord(
        source=source_from_dict(d.get("source"), f"{path}.source"),
        reason=_field(d, "reason", str, path),
        time_unix_nano=_int(d, "time_unix_nano", path, default=0),
        detail=d.get("detail") or "",
    )


def dumps(data: Mapping[str, Any]) -> str:
    """One compact JSON line (no newline) for a dict made by the functions above.

    Encoded by orjson (about ten times cheaper than the standard library on the OS stream's
    records), with the same text as ``json.dumps(data, separators=(",", ":"),
    ensure_ascii=False)`` for every value the functions above make: non-ASCII text as UTF-8,
    the same escapes, the same float spelling except that a float below 1e-4 is written without
    an exponent (``0.00001`` for ``1e-05``: the same number). What orjson refuses (text with a
    lone surrogate, which :mod:`otel_bridge.strings` removes at the edge; an integer beyond 64
    bits; a non-string key) goes through the standard library as before, so it raises or is
    written exactly as it was. Non-finite floats never reach this function (they are encoded as
    ``$float`` / OTLP strings first).
    """
    try:
        return orjson.dumps(data).decode("utf-8")
    except TypeError:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
