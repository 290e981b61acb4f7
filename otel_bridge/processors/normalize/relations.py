"""Relations of a span to its ancestors, and the per-span context their observations share.

:func:`found` builds the relation of a span to the accepted ancestor it is linked to (the usual,
immediate case); :func:`resolver` wraps the same rules, plus the fallback to the nearest ancestor
when the walk reached the root, in a callable that a :class:`~.ancestry.PendingLink` keeps until
a missing ancestor arrives in a later batch.
"""

from __future__ import annotations

from collections.abc import Callable

from otel_bridge.model import (
    Attributes,
    Attribution,
    CoverageRecord,
    Entity,
    Evidence,
    Observation,
    RelationKind,
    Source,
)

from .ancestry import Found, Outcome, PendingLink, Root
from .entities import with_calling_agent

REPORTED = Evidence(attribution=Attribution.REPORTED)
"""Evidence of every relation a span states about itself (no causal flag)."""


# How a relation to an ancestor is built (the ``kind`` of :func:`found`).
DELEGATION, INVOCATION, REQUEST, NESTING = range(4)


class Ctx:
    """What every observation of one span shares."""

    __slots__ = ("attrs", "end", "occurrence", "record", "source", "start", "trace")

    def __init__(  # noqa: PLR0917 (built on the slow paths only, from locals)
        self,
        source: Source,
        trace: str,
        occurrence: str,
        start: int,
        end: int,
        attrs: Attributes,
    ) -> None:
        self.source = source
        self.trace = trace
        """The trace id (hex)."""
        self.record = source.record_id
        """The span id (hex)."""
        self.occurrence = occurrence
        """``<trace hex>:<span hex>``."""
        self.start = start
        self.end = end
        self.attrs = attrs


def rel(
    ctx: Ctx,
    slot: int,
    subject: Entity,
    relation: RelationKind,
    obj: Entity,
    *,
    attrs: Attributes | None = None,
) -> Observation:
    """Observation ``<span>#<slot>`` of the span of ``ctx``: ``subject`` ``relation`` ``obj``."""
    return Observation(
        id=f"{ctx.record}#{slot}",
        time_unix_nano=ctx.start,
        end_time_unix_nano=ctx.end,
        source=ctx.source,
        subject=subject,
        relation=relation,
        object=obj,
        evidence=REPORTED,
        occurrence=ctx.occurrence,
        attrs=ctx.attrs if attrs is None else attrs,
    )


LINKS: dict[int, tuple[RelationKind, bool]] = {
    DELEGATION: (RelationKind.DELEGATED_TO, False),
    INVOCATION: (RelationKind.INVOKED, False),
    REQUEST: (RelationKind.REQUESTED, False),
    NESTING: (RelationKind.CHILD_OF, True),
}
"""Per link kind: the relation, and whether the span is its subject (else the ancestor is)."""


def found(
    kind: int, ctx: Ctx, node: Entity, attrs: Attributes, ancestor: Entity
) -> Observation | None:
    """The relation of a span to the accepted ancestor ``ancestor`` it was linked to."""
    if kind == DELEGATION and ancestor.id == node.id:
        return None  # an agent's own nested invocation is not a delegation
    relation, from_span = LINKS[kind]
    if kind == INVOCATION:
        node = with_calling_agent(node, ancestor)
    subject, obj = (node, ancestor) if from_span else (ancestor, node)
    return rel(ctx, 1, subject, relation, obj, attrs=attrs if kind == REQUEST else None)


def resolver(
    kind: int, ctx: Ctx, node: Entity, attrs: Attributes
) -> Callable[[Outcome], list[Observation]]:
    """What a relation resolves to once its walk ends (possibly later, in another batch)."""

    def resolve(outcome: Outcome) -> list[Observation]:
        if isinstance(outcome, Found):
            relation = found(kind, ctx, node, attrs, outcome.entity)
            return [] if relation is None else [relation]
        if not isinstance(outcome, Root) or outcome.fallback is None:
            return []
        if kind == REQUEST:  # the nearest span stands in for the caller
            return [rel(ctx, 1, outcome.fallback, RelationKind.REQUESTED, node, attrs=attrs)]
        return [rel(ctx, 1, node, RelationKind.CHILD_OF, outcome.fallback)]

    return resolve


def missing(link: PendingLink) -> CoverageRecord:
    """The coverage record of a relation whose ancestor never arrived."""
    return CoverageRecord(
        source=link.source,
        reason="parent_span_missing",
        time_unix_nano=link.time_unix_nano,
        detail=f"{link.describe}: an ancestor span never arrived; relation left unresolved",
    )
