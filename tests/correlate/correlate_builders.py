"""The correlation tests' defaults over :mod:`otel_bridge.testing`'s observation builders.

The builders produce observations shaped exactly like the normalizer's output (the documented
contract, typed facts and stable keys on every entity included); this module fixes the host, the
trace and the agent the tests share.
"""

from __future__ import annotations

from dataclasses import dataclass

from otel_bridge.identity import agent_key, iso_ms, kind_id
from otel_bridge.model import AgentFacts, Channel, Entity, EntityKind, Observation
from otel_bridge.testing import (
    ProcessRecord,
    tool_call_entity,
    tool_declaration,
    w3c_traceparent,
)

HOST = "host-1"
TRACE = "ab" * 16
MS = 1_000_000
S = 1_000_000_000
T0 = 1_700_000_000 * S

iso = iso_ms


def tool_entity(span: str, trace: str = TRACE, name: str = "shell") -> Entity:
    """The tool_call entity of a tool span of the tests' agent."""
    return tool_call_entity(span, trace, name, agent="coder")


def agent_entity(name: str = "coder") -> Entity:
    """An agent entity, with its facts and key as the normalizer builds them."""
    return Entity(
        kind=EntityKind.AGENT,
        id=kind_id(EntityKind.AGENT, "svc", name),
        label=name,
        facts=AgentFacts(service="svc", name=name),
        key=agent_key("svc", name, None) or "",
    )


def declaration(
    span: str,
    line: str,
    start: int,
    end: int = 0,
    *,
    trace: str = TRACE,
    agent_pid: int | None = None,
    channel: Channel = Channel.SEM,
) -> list[Observation]:
    """The observations of one tool span declaring ``line``: invoked + declared_command."""
    return tool_declaration(
        span,
        line,
        start,
        end,
        trace=trace,
        agent=agent_entity(),
        host=HOST,
        agent_pid=agent_pid,
        channel=channel,
    )


@dataclass
class Proc(ProcessRecord):
    """A process record on the tests' host."""

    host: str = HOST


def exit_obs(p: Proc, time: int, code: int = 0) -> Observation:
    """The normalizer's observation of a ``process.exit`` record."""
    return p.exit(time, code)


def traceparent(span: str, trace: str = TRACE) -> str:
    """A W3C traceparent naming ``span``."""
    return w3c_traceparent(span, trace)
