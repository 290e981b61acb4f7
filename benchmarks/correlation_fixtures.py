"""Synthetic correlation streams with independently recorded ground truth.

The generator decides which process truly ran each declared command *before* any correlator
sees the stream, and records it in :attr:`Fixture.truth`; it shares no code with the correlator
(it builds observations in the normalizer's documented shape with :mod:`otel_bridge.testing`,
the builders the correlation tests use).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from otel_bridge.identity import kind_id
from otel_bridge.model import Entity, EntityKind, Observation
from otel_bridge.testing import ProcessRecord, tool_declaration, w3c_traceparent

HOST = "bench-host"
MS = 1_000_000
T0 = 1_700_000_000_000_000_000


@dataclass
class Fixture:
    """One stream and the truth the generator recorded for it."""

    name: str
    kind: str
    observations: list[Observation] = field(default_factory=list)
    truth: dict[str, str | None] = field(default_factory=dict)
    """Tool-call entity id -> the identity of the process that truly ran its command (None when
    that process is absent from the stream)."""


def tool_id(trace: str, span: str) -> str:
    """The tool_call entity id of a span."""
    return kind_id(EntityKind.TOOL_CALL, trace, span)


def declare(  # noqa: PLR0917 (a fixture row reads best positionally)
    fx: Fixture, trace: str, span: str, line: str, start: int, end: int, agent_pid: int
) -> None:
    """Append a tool span declaring ``line`` (invoked + declared_command)."""
    agent = Entity(kind=EntityKind.AGENT, id=f"agent:bench:{agent_pid}")
    fx.observations += tool_declaration(
        span, line, start, end, trace=trace, agent=agent, host=HOST, agent_pid=agent_pid
    )


def spawn(
    fx: Fixture,
    pid: int,
    exe: str,
    argv: tuple[str, ...],
    time: int,
    *,
    traceparent: str = "",
    parent_pid: int = 1,
) -> str:
    """Append a process start record (entity, executed, spawned); return its identity."""
    record = ProcessRecord(
        pid,
        exe,
        argv,
        time,
        host=HOST,
        traceparent=traceparent,
        parent_pid=parent_pid,
        record=f"bench:{pid}:{time}",
        backend="bench",
    )
    fx.observations += record.observations()
    return record.identity


def tp(trace: str, span: str) -> str:
    """A W3C traceparent."""
    return w3c_traceparent(span, trace)
