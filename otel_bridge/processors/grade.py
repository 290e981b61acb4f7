"""The ``grade`` processor: sets ``evidence.grade`` on every observation (ExecWeave Table II).

A pure ``Batch -> Batch`` step around :func:`otel_bridge.grading.grade_evidence`. Spans, logs and
coverage records pass through untouched; every observation is re-graded from its own evidence
fields, so a grade set upstream cannot disagree with the fields it claims to summarize.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from otel_bridge.component import (
    PROCESSOR,
    Component,
    Consumer,
    CreateSettings,
    Factory,
    FunctionProcessor,
    require_consumer,
)
from otel_bridge.grading import grade_evidence
from otel_bridge.model import Batch, Evidence, Observation


@dataclass(slots=True)
class Config:
    """The grade processor has no settings."""


_REMEMBERED = 1_024
_graded: dict[int, tuple[Evidence, Evidence]] = {}
"""``id(evidence) -> (evidence, graded)``: the normalizer shares one evidence object among the
records that state the same evidence, and their graded copies are shared in turn (one grading
per object, and one object for the graph and the file exporter to encode). Holding the
evidence keeps its id from being reused."""


def graded_evidence(evidence: Evidence) -> Evidence:
    """``evidence`` with ``grade`` set from its fields (the same object if it already is; the
    same graded object for the same evidence object)."""
    found = _graded.get(id(evidence))
    if found is not None and found[0] is evidence:
        return found[1]
    grade = grade_evidence(evidence)
    graded = evidence if evidence.grade == grade else msgspec.structs.replace(evidence, grade=grade)
    if len(_graded) >= _REMEMBERED:
        _graded.clear()
    _graded[id(evidence)] = (evidence, graded)
    return graded


def grade_observation(obs: Observation) -> Observation:
    """``obs`` with ``evidence.grade`` set from its evidence (the same object if unchanged)."""
    graded = graded_evidence(obs.evidence)
    if graded is obs.evidence:
        return obs
    return msgspec.structs.replace(obs, evidence=graded)


def grade_batch(batch: Batch) -> Batch:
    """``batch`` with every observation graded."""
    if not batch.observations:
        return batch
    return batch.replace(observations=tuple(grade_observation(o) for o in batch.observations))


def _create(settings: CreateSettings, config: Config, next_consumer: Consumer | None) -> Component:
    return FunctionProcessor(grade_batch, require_consumer(next_consumer, "grade"))


factory: Factory[Config] = Factory(
    type_name="grade",
    kind=PROCESSOR,
    default_config=Config,
    create=_create,
    signals=frozenset({"evidence"}),
)
