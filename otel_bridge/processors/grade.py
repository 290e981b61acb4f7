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
from otel_bridge.model import Batch, Observation


@dataclass(slots=True)
class Config:
    """The grade processor has no settings."""


def grade_observation(obs: Observation) -> Observation:
    """``obs`` with ``evidence.grade`` set from its evidence (the same object if unchanged)."""
    grade = grade_evidence(obs.evidence)
    if obs.evidence.grade == grade:
        return obs
    return msgspec.structs.replace(obs, evidence=msgspec.structs.replace(obs.evidence, grade=grade))


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
