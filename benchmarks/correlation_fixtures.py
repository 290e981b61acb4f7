"""Synthetic correlation streams with independently recorded ground truth.

The generator decides which process truly ran each declared command *before* any correlator
sees the stream, and records it in :attr:`Fixture.truth`; it shares no code with the correlator
(it builds observations in the normalizer's documented shape from scratch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

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

HOST = "bench-host"
MS = 1_000_000
T0 = 1_700_000_000_000_000_000


def _iso(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


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
    return f"tool_call:{trace}:{span}"


def proc_id(pid: int, ms: int) -> str:
    """A process identity."""
    return f"process:{HOST}:{pid}:{ms}"


def declare(  # noqa: PLR0917 (a fixture row reads best positionally)
    fx: Fixture, trace: str, span: str, line: str, start: int, end: int, agent_pid: int
) -> None:
    """Append a tool span declaring ``line`` (invoked + declared_command)."""
    tool = Entity(
        kind=EntityKind.TOOL_CALL,
        id=tool_id(trace, span),
        label="shell",
        attrs={"trace_id": trace, "span_id": span, "gen_ai.tool.name": "shell"},
    )
    cmd = Entity(
        kind=EntityKind.COMMAND, id=f"command:{trace}:{span}", attrs={"command.line": line}
    )
    agent = Entity(kind=EntityKind.AGENT, id=f"agent:bench:{agent_pid}")
    attrs: dict[str, AnyValue] = {
        "trace_id": trace,
        "span_id": span,
        "process.pid": agent_pid,
        "host.id": HOST,
    }
    src = Source(channel=Channel.SEM, backend="otlp", record_id=span)
    for n, (subj, rel, obj) in enumerate(
        ((agent, RelationKind.INVOKED, tool), (tool, RelationKind.DECLARED_COMMAND, cmd)), 1
    ):
        fx.observations.append(
            Observation(
                id=f"{span}#{n}",
                time_unix_nano=start,
                end_time_unix_nano=end,
                source=src,
                subject=subj,
                relation=rel,
                object=obj,
                evidence=Evidence(attribution=Attribution.REPORTED),
                occurrence=f"{trace}:{span}",
                attrs=attrs,
            )
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
    ms = time // MS
    ident = proc_id(pid, ms)
    rec = f"bench:{pid}:{time}"
    attrs: dict[str, AnyValue] = {
        "event.name": "process.start",
        "host.id": HOST,
        "process.pid": pid,
        "process.parent_pid": parent_pid,
        "process.executable.path": exe,
        "process.executable.name": exe.rsplit("/", 1)[-1],
        "process.command_args": argv,
        "process.working_directory": "/work",
        "process.creation.time": _iso(ms),
    }
    if traceparent:
        attrs["process.env.traceparent"] = traceparent
    proc = Entity(kind=EntityKind.PROCESS, id=ident, attrs={"process.pid": pid, "host.id": HOST})
    parent = Entity(kind=EntityKind.PROCESS, id=f"process:{HOST}:{parent_pid}:?")
    src = Source(channel=Channel.OS, backend="bench", record_id=rec)
    ev = Evidence(attribution=Attribution.SYSCALL, causal=True)
    exe_ent = Entity(kind=EntityKind.EXECUTABLE, id=f"executable:{exe}")
    common = {"time_unix_nano": time, "source": src, "occurrence": rec, "attrs": attrs}
    fx.observations += [
        Observation(id=f"{rec}#0", subject=proc, **common),  # type: ignore[arg-type]
        Observation(
            id=f"{rec}#1",
            subject=proc,
            relation=RelationKind.EXECUTED,
            object=exe_ent,
            evidence=ev,
            **common,  # type: ignore[arg-type]
        ),
        Observation(
            id=f"{rec}#2",
            subject=parent,
            relation=RelationKind.SPAWNED,
            object=proc,
            evidence=ev,
            **common,  # type: ignore[arg-type]
        ),
    ]
    return ident


def tp(trace: str, span: str) -> str:
    """A W3C traceparent."""
    return f"00-{trace}-{span}-01"
