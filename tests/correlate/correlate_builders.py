"""Observation builders shaped exactly like the normalizer's output (the documented contract)."""

from __future__ import annotations

from dataclasses import dataclass, field

from otel_bridge.identity import kind_id, process_id
from otel_bridge.model import (
    Attribution,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    Observation,
    RelationKind,
    Source,
)

HOST = "host-1"
TRACE = "ab" * 16
MS = 1_000_000
S = 1_000_000_000
T0 = 1_700_000_000 * S


def iso(ms: int) -> str:
    """ISO 8601 UTC with milliseconds for an epoch-ms value."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def iso_ms(value: str) -> int:
    """Epoch ms of an ISO 8601 UTC time."""
    from datetime import datetime

    return round(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)


def tool_entity(span: str, trace: str = TRACE, name: str = "shell") -> Entity:
    """The tool_call entity of a tool span."""
    return Entity(
        kind=EntityKind.TOOL_CALL,
        id=kind_id(EntityKind.TOOL_CALL, trace, span),
        label=name,
        attrs={"gen_ai.tool.name": name, "trace_id": trace, "span_id": span},
    )


def agent_entity(name: str = "coder") -> Entity:
    """An agent entity."""
    return Entity(kind=EntityKind.AGENT, id=kind_id(EntityKind.AGENT, "svc", name), label=name)


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
    attrs: dict[str, object] = {"trace_id": trace, "span_id": span, "span.status": "ok"}
    if agent_pid is not None:
        attrs.update({"process.pid": agent_pid, "host.id": HOST})
    tool = tool_entity(span, trace)
    cmd = Entity(
        kind=EntityKind.COMMAND,
        id=kind_id(EntityKind.COMMAND, trace, span),
        label=line,
        attrs={"command.line": line},
    )
    src = Source(channel=channel, backend="otlp", record_id=span)
    rep = Evidence(attribution=Attribution.REPORTED)
    common = {
        "time_unix_nano": start,
        "end_time_unix_nano": end,
        "source": src,
        "occurrence": f"{trace}:{span}",
        "attrs": attrs,
    }
    return [
        Observation(
            id=f"{span}#1",
            subject=agent_entity(),
            relation=RelationKind.INVOKED,
            object=tool,
            evidence=rep,
            **common,  # type: ignore[arg-type]
        ),
        Observation(
            id=f"{span}#2",
            subject=tool,
            relation=RelationKind.DECLARED_COMMAND,
            object=cmd,
            evidence=rep,
            **common,  # type: ignore[arg-type]
        ),
    ]


@dataclass
class Proc:
    """One observed process (the record the host receiver would send)."""

    pid: int
    exe: str
    argv: tuple[str, ...]
    time: int
    start_ms: int | None = None
    cwd: str = "/work"
    traceparent: str = ""
    parent_pid: int = 1
    event: str = "process.start"
    record: str = ""
    host: str = HOST
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def identity(self) -> str:
        """The process identity."""
        return process_id(self.host, self.pid, self.ms)

    @property
    def ms(self) -> int:
        """Start time in ms."""
        return self.start_ms if self.start_ms is not None else self.time // MS

    def observations(self) -> list[Observation]:
        """The normalizer's observations of this record (#0 entity, #1 executed, #2 spawned)."""
        rec = self.record or f"linux:{self.pid}:{self.event}:{self.time}"
        attrs: dict[str, object] = {
            "event.name": self.event,
            "host.id": self.host,
            "evidence.record_id": rec,
            "process.pid": self.pid,
            "process.parent_pid": self.parent_pid,
            "process.executable.path": self.exe,
            "process.executable.name": self.exe.rsplit("/", 1)[-1],
            "process.command_args": self.argv,
            "process.working_directory": self.cwd,
            "process.creation.time": iso(self.ms),
            **self.extra,
        }
        if self.traceparent:
            attrs["process.env.traceparent"] = self.traceparent
        proc = Entity(
            kind=EntityKind.PROCESS,
            id=self.identity,
            label=f"{self.exe} ({self.pid})",
            attrs={"process.pid": self.pid, "host.id": self.host},
        )
        src = Source(channel=Channel.OS, backend="linux", record_id=rec)
        ev = Evidence(attribution=Attribution.SYSCALL, causal=True)
        exe = Entity(kind=EntityKind.EXECUTABLE, id=f"executable:{self.exe}")
        parent_created = self.extra.get("process.parent.creation.time")
        parent_ms = iso_ms(parent_created) if isinstance(parent_created, str) else None
        parent = Entity(
            kind=EntityKind.PROCESS,
            id=process_id(self.host, self.parent_pid, parent_ms),
            attrs={"process.pid": self.parent_pid, "host.id": self.host},
        )
        common = {"time_unix_nano": self.time, "source": src, "occurrence": rec, "attrs": attrs}
        out = [
            Observation(id=f"{rec}#0", subject=proc, **common),  # type: ignore[arg-type]
            Observation(
                id=f"{rec}#1",
                subject=proc,
                relation=RelationKind.EXECUTED,
                object=exe,
                evidence=ev,
                **common,  # type: ignore[arg-type]
            ),
        ]
        if self.event == "process.start":
            out.append(
                Observation(
                    id=f"{rec}#2",
                    subject=parent,
                    relation=RelationKind.SPAWNED,
                    object=proc,
                    evidence=ev,
                    **common,  # type: ignore[arg-type]
                )
            )
        return out


def exit_obs(p: Proc, time: int, code: int = 0) -> Observation:
    """The normalizer's observation of a ``process.exit`` record."""
    rec = f"linux:{p.pid}:exit:{time}"
    return Observation(
        id=f"{rec}#0",
        time_unix_nano=time,
        source=Source(channel=Channel.OS, backend="linux", record_id=rec),
        subject=Entity(
            kind=EntityKind.PROCESS,
            id=p.identity,
            attrs={"process.pid": p.pid, "host.id": p.host},
        ),
        occurrence=rec,
        attrs={
            "event.name": "process.exit",
            "host.id": p.host,
            "process.pid": p.pid,
            "process.exit.code": code,
        },
    )


def traceparent(span: str, trace: str = TRACE) -> str:
    """A W3C traceparent naming ``span``."""
    return f"00-{trace}-{span}-01"
