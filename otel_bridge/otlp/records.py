"""The protobuf-free half of the OTLP codecs: a decoded request's records and rejections, and
records grouped by resource and scope for encoding. :mod:`.json_codec` and :mod:`.proto_codec`
both use them; kept apart so that the JSON path (and a run that receives nothing) does not
import protobuf and the OTLP message classes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from otel_bridge.model import LogRecord, Resource, Scope, Span

T = TypeVar("T")

_MAX_REJECT_DETAILS = 5
"""How many rejected records a partial-success message names before summarising."""


@dataclass(frozen=True, slots=True)
class Decoded(Generic[T]):
    """The result of decoding one request: the accepted records and what was rejected."""

    records: tuple[T, ...]
    rejected: int = 0
    """How many records were rejected (OTLP ``rejected_spans`` / ``rejected_log_records``)."""
    error_message: str = ""
    """Why, naming the first few rejected records by path; empty when nothing was rejected."""


class Rejections:
    """Collects the rejected records of one request: a count and the first few problems."""

    __slots__ = ("count", "described", "details")

    def __init__(self) -> None:
        self.count = 0
        self.details: list[str] = []
        self.described = 0
        """How many of the rejected records ``details`` accounts for."""

    def add(self, problem: str, count: int = 1) -> None:
        """Count ``count`` rejected records (one, or all under a bad resource or scope) for one
        ``problem``, ``"path: what is wrong"``."""
        self.count += count
        if len(self.details) < _MAX_REJECT_DETAILS:
            self.details.append(problem)
            self.described += count

    def message(self, noun: str) -> str:
        """The partial-success ``error_message`` (empty when nothing was rejected)."""
        if not self.count:
            return ""
        more = self.count - self.described
        tail = f"; and {more} more" if more > 0 else ""
        return f"rejected {self.count} invalid {noun}: " + "; ".join(self.details) + tail


R = TypeVar("R", Span, LogRecord)


def group_by_resource_scope(
    records: Sequence[R],
) -> list[tuple[Resource, list[tuple[Scope, list[R]]]]]:
    """``records`` grouped by equal resource, then equal scope, in first-seen order."""
    groups: list[tuple[Resource, list[tuple[Scope, list[R]]]]] = []
    last_resource: Resource | None = None
    last_scope: Scope | None = None
    last_list: list[R] = []
    for record in records:
        # Records of one batch usually share the very same objects: try identity first.
        if record.resource is last_resource and record.scope is last_scope:
            last_list.append(record)
            continue
        scopes = None
        for resource, scope_groups in groups:
            if resource is record.resource or resource == record.resource:
                scopes = scope_groups
                break
        if scopes is None:
            scopes = []
            groups.append((record.resource, scopes))
        target = None
        for scope, items in scopes:
            if scope is record.scope or scope == record.scope:
                target = items
                break
        if target is None:
            target = []
            scopes.append((record.scope, target))
        target.append(record)
        last_resource, last_scope, last_list = record.resource, record.scope, target
    return groups
