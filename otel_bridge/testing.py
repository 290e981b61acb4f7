"""Test doubles that ship with the package, for component and pipeline tests.

* :class:`RecordingConsumer` collects every batch it is given (thread-safe) and can be used as
  a processor's next consumer or, through :func:`recording_exporter_factory`, as an exporter in
  a real :class:`~otel_bridge.pipeline.Collector`. ``wait_for`` blocks until enough records
  arrived, for components that deliver from a background thread.
* :class:`ListReceiver` emits given batches into its consumer on demand (``emit``), or all of
  them at start; :func:`list_receiver_factory` registers it as a receiver type.
* :class:`FailingProcessor` raises on every batch (a ``ValueError``, a permanent or a retryable
  error); :func:`failing_processor_factory` registers it, to test what clients are answered.
* :class:`SyntheticRun` writes a run directory directly (spans and graph.json), for review
  tests and benchmarks.
* :func:`free_port` gives a loopback TCP port nothing listens on, for tests that start servers.
* :func:`tool_declaration` and :class:`ProcessRecord` build observations in the normalizer's
  documented shape (a tool span's declared command; a process start, exec or exit), for tests
  and benchmarks that feed the correlator directly.

Example::

    sink = RecordingConsumer()
    proc = batch_factory.create(CreateSettings(id="batch"), config, sink)
    proc.consume(Batch(spans=(span,)))
    proc.shutdown()
    assert sink.spans == [span]
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from otel_bridge.component import (
    EXPORTER,
    PROCESSOR,
    RECEIVER,
    Component,
    Consumer,
    CreateSettings,
    Factory,
    Host,
    require_consumer,
)
from otel_bridge.errors import PermanentError, RefusedError, StartupError
from otel_bridge.identity import (
    command_key,
    executable_key,
    iso_ms,
    iso_to_ms,
    kind_id,
    process_id,
    process_key,
    tool_call_key,
)
from otel_bridge.model import (
    NO_EVIDENCE,
    AgentFacts,
    AnyValue,
    Attribution,
    Batch,
    Channel,
    CommandFacts,
    CoverageRecord,
    EmitterFacts,
    Entity,
    EntityKind,
    Evidence,
    ExecutableFacts,
    FileFacts,
    LogRecord,
    Observation,
    ProcessFacts,
    RelationKind,
    Resource,
    Scope,
    Source,
    Span,
    SpanKind,
    ToolCallFacts,
)
from otel_bridge.registry import Registry

ALL_SIGNALS: frozenset[str] = frozenset({"traces", "logs", "evidence"})


class RecordingConsumer:
    """A consumer (and exporter) that records every batch it accepts. Thread-safe.

    Set :attr:`error` to make ``consume`` raise it instead of recording (to test how callers
    handle a failing consumer). ``start``/``shutdown`` calls are counted.
    """

    def __init__(self, *, error: Exception | None = None) -> None:
        self._cond = threading.Condition()
        self._batches: list[Batch] = []
        self.error: Exception | None = error
        """Raised by ``consume`` while set; the batch is then not recorded."""
        self.start_count = 0
        self.shutdown_count = 0
        self.host: Host | None = None

    def start(self, host: Host) -> None:
        """Remember the host; count the call."""
        self.host = host
        self.start_count += 1

    def shutdown(self) -> None:
        """Count the call."""
        self.shutdown_count += 1

    def consume(self, batch: Batch) -> None:
        """Record ``batch``, or raise :attr:`error` when set."""
        if self.error is not None:
            raise self.error
        with self._cond:
            self._batches.append(batch)
            self._cond.notify_all()

    @property
    def batches(self) -> list[Batch]:
        """Every batch recorded so far, in arrival order."""
        with self._cond:
            return list(self._batches)

    @property
    def spans(self) -> list[Span]:
        """Every span recorded, in order."""
        return [s for b in self.batches for s in b.spans]

    @property
    def logs(self) -> list[LogRecord]:
        """Every log record recorded, in order."""
        return [r for b in self.batches for r in b.logs]

    @property
    def observations(self) -> list[Observation]:
        """Every observation recorded, in order."""
        return [o for b in self.batches for o in b.observations]

    @property
    def coverage(self) -> list[CoverageRecord]:
        """Every coverage record recorded, in order."""
        return [c for b in self.batches for c in b.coverage]

    @property
    def record_count(self) -> int:
        """Total number of records (spans, logs, observations, coverage) recorded."""
        with self._cond:
            return sum(len(b) for b in self._batches)

    def wait_for(self, records: int, timeout: float = 5.0) -> bool:
        """Block until at least ``records`` records arrived; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while sum(len(b) for b in self._batches) < records:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def clear(self) -> None:
        """Forget every recorded batch."""
        with self._cond:
            self._batches.clear()


class ListReceiver:
    """A receiver that emits given batches into its consumer.

    ``emit()`` sends every pending batch (or the one given), in the calling thread, and
    propagates the consumer's errors as a real receiver would report them to its client.
    With ``emit_on_start`` the pending batches are sent by ``start``.
    """

    def __init__(
        self,
        next_consumer: Consumer,
        batches: Iterable[Batch] = (),
        *,
        emit_on_start: bool = False,
        fail_start: str = "",
    ) -> None:
        self._next = next_consumer
        self._pending: list[Batch] = list(batches)
        self._lock = threading.Lock()
        self.emit_on_start = emit_on_start
        self.fail_start = fail_start
        self.started = False
        self.shutdown_count = 0

    def start(self, host: Host) -> None:
        """Start; fail with :class:`StartupError` when ``fail_start`` is set."""
        del host
        if self.fail_start:
            raise StartupError(self.fail_start)
        self.started = True
        if self.emit_on_start:
            self.emit()

    def shutdown(self) -> None:
        """Stop emitting. Safe twice."""
        self.started = False
        self.shutdown_count += 1

    def add(self, batch: Batch) -> None:
        """Queue ``batch`` for the next :meth:`emit`."""
        with self._lock:
            self._pending.append(batch)

    def emit(self, batch: Batch | None = None) -> int:
        """Send ``batch``, or every pending batch; returns the number of batches sent."""
        if batch is not None:
            self._next.consume(batch)
            return 1
        with self._lock:
            pending, self._pending = self._pending, []
        for b in pending:
            self._next.consume(b)
        return len(pending)


@dataclass(slots=True)
class DoubleConfig:
    """Config of the test-double components: nothing is required."""

    fail_start: str = ""
    """When non-empty, ``start`` raises :class:`StartupError` with this message."""
    emit_on_start: bool = False
    """ListReceiver only: emit the factory's batches at start."""


def list_receiver_factory(
    type_name: str = "list",
    batches: Iterable[Batch] = (),
    *,
    signals: frozenset[str] = ALL_SIGNALS,
) -> Factory[DoubleConfig]:
    """A receiver factory creating :class:`ListReceiver`s pre-loaded with ``batches``."""
    preloaded = tuple(batches)

    def create(
        settings: CreateSettings, config: DoubleConfig, next_consumer: Consumer | None
    ) -> Component:
        return ListReceiver(
            require_consumer(next_consumer, settings.id),
            preloaded,
            emit_on_start=config.emit_on_start,
            fail_start=config.fail_start,
        )

    return Factory(
        type_name=type_name,
        kind=RECEIVER,
        default_config=DoubleConfig,
        create=create,
        signals=signals,
    )


class _FailingStartRecorder(RecordingConsumer):
    def __init__(self, message: str) -> None:
        super().__init__()
        self._message = message

    def start(self, host: Host) -> None:
        super().start(host)
        raise StartupError(self._message)


def recording_exporter_factory(
    type_name: str = "recording", *, signals: frozenset[str] = ALL_SIGNALS
) -> Factory[DoubleConfig]:
    """An exporter factory creating :class:`RecordingConsumer`s."""

    def create(
        settings: CreateSettings, config: DoubleConfig, next_consumer: Consumer | None
    ) -> Component:
        del settings, next_consumer
        if config.fail_start:
            return _FailingStartRecorder(config.fail_start)
        return RecordingConsumer()

    return Factory(
        type_name=type_name,
        kind=EXPORTER,
        default_config=DoubleConfig,
        create=create,
        signals=signals,
    )


@dataclass(slots=True)
class FailingConfig:
    """Config of the ``failing`` processor double."""

    error: str = "value"
    """What ``consume`` raises: ``value`` (a ``ValueError``, as a buggy processor would),
    ``permanent`` (:class:`PermanentError`), ``refused`` (:class:`RefusedError`) or ``none``."""

    def validate(self) -> list[str]:
        """``error`` names one of the kinds."""
        if self.error not in _FAILURES:
            return [f"error: {self.error!r} is not one of {', '.join(sorted(_FAILURES))}"]
        return []


_FAILURES: dict[str, Callable[[str], Exception] | None] = {
    "value": ValueError,
    "permanent": PermanentError,
    "refused": RefusedError,
    "none": None,
}


class FailingProcessor:
    """A processor that raises on every batch (a poison-batch processor); counts its calls."""

    def __init__(self, error: str, next_consumer: Consumer) -> None:
        self._make = _FAILURES[error]
        self._next = next_consumer
        self.calls = 0

    def start(self, host: Host) -> None:
        """Nothing to acquire."""

    def shutdown(self) -> None:
        """Nothing to flush."""

    def consume(self, batch: Batch) -> None:
        """Raise the configured error (or pass the batch on for ``none``)."""
        self.calls += 1
        if self._make is None:
            self._next.consume(batch)
            return
        raise self._make(f"poison batch of {len(batch)} records")


def failing_processor_factory(type_name: str = "failing") -> Factory[FailingConfig]:
    """A processor factory creating :class:`FailingProcessor`s."""

    def create(
        settings: CreateSettings, config: FailingConfig, next_consumer: Consumer | None
    ) -> Component:
        return FailingProcessor(config.error, require_consumer(next_consumer, settings.id))

    return Factory(type_name=type_name, kind=PROCESSOR, default_config=FailingConfig, create=create)


def double_registry(*factories: Factory[Any]) -> Registry:
    """A registry of the test doubles plus ``factories``.

    Receivers ``list`` (every pipeline type), ``logsonly`` (logs pipelines) and ``spansonly``
    (traces pipelines); exporter ``recording``.
    """
    registry = Registry()
    registry.add(list_receiver_factory("list"))
    registry.add(list_receiver_factory("logsonly", signals=frozenset({"logs"})))
    registry.add(list_receiver_factory("spansonly", signals=frozenset({"traces"})))
    registry.add(recording_exporter_factory("recording"))
    for factory in factories:
        registry.add(factory)
    return registry


def make_span(n: int = 0, **fields: Any) -> Span:
    """A small valid span; ``n`` makes the ids distinct. Extra fields override defaults."""
    values: dict[str, Any] = {
        "resource": Resource(attributes={"service.name": "test"}),
        "scope": Scope(name="otel_bridge.testing"),
        "trace_id": (n + 1).to_bytes(16, "big"),
        "span_id": (n + 1).to_bytes(8, "big"),
        "name": f"span-{n}",
        "start_time_unix_nano": 1_700_000_000_000_000_000 + n,
        "end_time_unix_nano": 1_700_000_000_000_001_000 + n,
    }
    values.update(fields)
    return Span(**values)


def make_log(n: int = 0, **fields: Any) -> LogRecord:
    """A small valid log record; ``n`` makes it distinct. Extra fields override defaults."""
    values: dict[str, Any] = {
        "resource": Resource(attributes={"service.name": "test"}),
        "scope": Scope(name="otel_bridge.testing"),
        "time_unix_nano": 1_700_000_000_000_000_000 + n,
        "body": f"log-{n}",
        "attributes": {"n": n},
    }
    values.update(fields)
    return LogRecord(**values)


def os_record(
    event: str,
    host: str,
    pid: int,
    t: int,
    attrs: Mapping[str, AnyValue],
    *,
    start: str,
    backend: str = "strace",
    rid: str = "",
) -> LogRecord:
    """An OS record ``event`` of process ``pid`` (started at ISO time ``start``) with the
    event's own ``attrs``, recorded by ``backend`` on ``host`` at ``t`` as the host receiver
    writes it (``docs/contracts.md``); ``rid`` the record id (default: one made of the
    backend, event, pid and time)."""
    return LogRecord(
        resource=Resource(
            attributes={
                "evidence.channel": "os",
                "evidence.backend": backend,
                "host.id": host,
                "service.name": "otel-bridge-host",
            }
        ),
        scope=Scope(name="otel_bridge.receivers.host"),
        time_unix_nano=t,
        event_name=event,
        attributes={
            "evidence.record_id": rid or f"{backend}:{event}:{pid}:{t}",
            "evidence.attribution": "syscall",
            "evidence.causal": True,
            "process.pid": pid,
            "process.creation.time": start,
            **attrs,
        },
    )


def connection_record(
    event: str,
    host: str,
    pid: int,
    ends: tuple[tuple[str, int], tuple[str, int]],
    t: int,
    *,
    start: str,
    rid: str = "",
) -> LogRecord:
    """A ``network.connect`` or ``network.accept`` of process ``pid`` (started at ISO time
    ``start``) with both ends, ``(local, peer)`` address and port, recorded by strace on
    ``host`` at ``t`` (:func:`os_record`); ``rid`` the record id (default: one made of the
    event, pid, ports and time)."""
    local, peer = ends
    attrs: dict[str, AnyValue] = {
        "network.transport": "tcp",
        "network.local.address": local[0],
        "network.local.port": local[1],
        "network.peer.address": peer[0],
        "network.peer.port": peer[1],
    }
    rid = rid or f"strace:{event}:{pid}:{local[1]}:{peer[1]}:{t}"
    return os_record(event, host, pid, t, attrs, start=start, rid=rid)


# --------------------------------------------------------------------------------------------
# Observations in the normalizer's documented shape (docs/contracts.md), for correlation tests
# and benchmarks that feed the correlator without running the normalizer
# --------------------------------------------------------------------------------------------


def tool_call_entity(
    span: str, trace: str, name: str = "shell", agent: str | None = None
) -> Entity:
    """The ``tool_call`` entity the normalizer builds for a tool span (``agent``: the calling
    agent's name, when the trace states it)."""
    return Entity(
        kind=EntityKind.TOOL_CALL,
        id=kind_id(EntityKind.TOOL_CALL, trace, span),
        label=name,
        attrs={"gen_ai.tool.name": name, "trace_id": trace, "span_id": span},
        facts=ToolCallFacts(tool=name, agent=agent, trace_id=trace, span_id=span),
        key=tool_call_key(agent, name) or "",
    )


def tool_declaration(
    span: str,
    line: str,
    start: int,
    end: int = 0,
    *,
    trace: str,
    agent: Entity,
    host: str,
    agent_pid: int | None = None,
    channel: Channel = Channel.SEM,
) -> list[Observation]:
    """The observations of one tool span declaring ``line``: ``invoked`` (#1) and
    ``declared_command`` (#2); with ``agent_pid`` they carry the agent's resource pid."""
    attrs: dict[str, AnyValue] = {"trace_id": trace, "span_id": span, "span.status": "ok"}
    if agent_pid is not None:
        attrs.update({"process.pid": agent_pid, "host.id": host})
    caller = (
        agent.facts.name or agent.facts.agent_id if isinstance(agent.facts, AgentFacts) else None
    )
    tool = tool_call_entity(span, trace, agent=caller)
    command = Entity(
        kind=EntityKind.COMMAND,
        id=kind_id(EntityKind.COMMAND, trace, span),
        label=line,
        attrs={"command.line": line},
        facts=CommandFacts(command=line, tool=tool.label),
        key=command_key(tool.label, line) or "",
    )
    emitter = None if agent_pid is None else EmitterFacts(host_id=host, pid=agent_pid)
    source = Source(
        channel=channel,
        backend="otlp",
        record_id=span,
        emitter=emitter,
        trace_id=trace,
        span_id=span,
    )
    reported = Evidence(attribution=Attribution.REPORTED)
    return [
        Observation(
            id=f"{span}#{slot}",
            time_unix_nano=start,
            end_time_unix_nano=end,
            source=source,
            subject=subject,
            relation=relation,
            object=obj,
            evidence=reported,
            occurrence=f"{trace}:{span}",
            attrs=attrs,
        )
        for slot, (subject, relation, obj) in enumerate(
            (
                (agent, RelationKind.INVOKED, tool),
                (tool, RelationKind.DECLARED_COMMAND, command),
            ),
            1,
        )
    ]


@dataclass
class ProcessRecord:
    """One process start (or exec) as the host receiver reports it, and its observations."""

    pid: int
    exe: str
    argv: tuple[str, ...]
    time: int
    """When the record was made (ns)."""
    host: str
    start_ms: int | None = None
    """The process's start time (ms); ``time`` rounded down when not given."""
    cwd: str = "/work"
    traceparent: str = ""
    parent_pid: int = 1
    event: str = "process.start"
    record: str = ""
    backend: str = "linux"
    extra: dict[str, AnyValue] = field(default_factory=dict)

    @property
    def ms(self) -> int:
        """Start time in ms."""
        return self.start_ms if self.start_ms is not None else self.time // 1_000_000

    @property
    def identity(self) -> str:
        """The process identity."""
        return process_id(self.host, self.pid, self.ms)

    def observations(self) -> list[Observation]:
        """The normalizer's observations: #0 the process, #1 ``executed``, #2 ``spawned``
        (a ``process.start`` stating its parent's start time only)."""
        rec = self.record or f"{self.backend}:{self.pid}:{self.event}:{self.time}"
        attrs: dict[str, AnyValue] = {
            "event.name": self.event,
            "host.id": self.host,
            "evidence.record_id": rec,
            "process.pid": self.pid,
            "process.parent_pid": self.parent_pid,
            "process.executable.path": self.exe,
            "process.executable.name": self.exe.rsplit("/", 1)[-1],
            "process.command_args": self.argv,
            "process.working_directory": self.cwd,
            "process.creation.time": iso_ms(self.ms),
            **self.extra,
        }
        if self.traceparent:
            attrs["process.env.traceparent"] = self.traceparent
        name = self.exe.rsplit("/", 1)[-1]
        parent_created = self.extra.get("process.parent.creation.time")
        parent_ms = iso_to_ms(parent_created) if isinstance(parent_created, str) else None
        proc = Entity(
            kind=EntityKind.PROCESS,
            id=self.identity,
            label=f"{self.exe} ({self.pid})",
            attrs={"process.pid": self.pid, "host.id": self.host},
            facts=ProcessFacts(
                host_id=self.host,
                pid=self.pid,
                start_time_ms=self.ms,
                parent_pid=self.parent_pid,
                parent_start_time_ms=parent_ms,
                executable_path=self.exe,
                executable_name=name,
                argv=self.argv,
                cwd=self.cwd,
                traceparent=self.traceparent or None,
            ),
            key=process_key(self.exe, self.argv) or "",
        )
        source = Source(channel=Channel.OS, backend=self.backend, record_id=rec, event=self.event)
        syscall = Evidence(attribution=Attribution.SYSCALL, causal=True)
        exe = Entity(
            kind=EntityKind.EXECUTABLE,
            id=f"executable:{self.exe}",
            facts=ExecutableFacts(path=self.exe, name=name),
            key=executable_key(self.exe) or "",
        )
        parent = Entity(
            kind=EntityKind.PROCESS,
            id=process_id(self.host, self.parent_pid, parent_ms),
            attrs={"process.pid": self.parent_pid, "host.id": self.host},
            facts=ProcessFacts(host_id=self.host, pid=self.parent_pid, start_time_ms=parent_ms),
            key="",
        )

        def observed(
            slot: int,
            subject: Entity,
            relation: RelationKind | None = None,
            obj: Entity | None = None,
        ) -> Observation:
            return Observation(
                id=f"{rec}#{slot}",
                time_unix_nano=self.time,
                source=source,
                subject=subject,
                relation=relation,
                object=obj,
                evidence=NO_EVIDENCE if relation is None else syscall,
                occurrence=rec,
                attrs=attrs,
            )

        out = [observed(0, proc), observed(1, proc, RelationKind.EXECUTED, exe)]
        if self.event == "process.start" and parent_ms is not None:
            out.append(observed(2, parent, RelationKind.SPAWNED, proc))
        return out

    def exit(self, time: int, code: int = 0) -> Observation:
        """The normalizer's observation of this process's ``process.exit`` record."""
        rec = f"{self.backend}:{self.pid}:exit:{time}"
        return Observation(
            id=f"{rec}#0",
            time_unix_nano=time,
            source=Source(
                channel=Channel.OS, backend=self.backend, record_id=rec, event="process.exit"
            ),
            subject=Entity(
                kind=EntityKind.PROCESS,
                id=self.identity,
                attrs={"process.pid": self.pid, "host.id": self.host},
                facts=ProcessFacts(
                    host_id=self.host, pid=self.pid, start_time_ms=self.ms, exit_code=code
                ),
                key="",
            ),
            occurrence=rec,
            attrs={
                "event.name": "process.exit",
                "host.id": self.host,
                "process.pid": self.pid,
                "process.exit.code": code,
            },
        )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def w3c_traceparent(span: str, trace: str) -> str:
    """A sampled W3C ``traceparent`` naming ``span`` of ``trace``."""
    return f"00-{trace}-{span}-01"


class LoopbackServer:
    """A TCP server on 127.0.0.1 that accepts and holds connections until closed.

    The peer of a real connection for tests and benchmarks of network observation: connections
    stay open, so an observer has time to see them unless the test closes them on purpose.
    """

    def __init__(self, backlog: int = 64, *, hold: bool = True) -> None:
        self.hold = hold
        """False: close each connection as soon as it is accepted (the server closes first)."""
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(backlog)
        self.port: int = self.sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                if self.hold and not self._closed:
                    self._conns.append(conn)
                    continue
            conn.close()

    def close(self) -> None:
        """Stop accepting and close every connection.

        Closing a listening socket does not wake a thread blocked in ``accept`` on Linux, so the
        socket is shut down first (that wakes it); a connection accepted while closing is
        closed by the accept thread itself, so none is left open.
        """
        with self._lock:
            self._closed = True
            conns, self._conns = self._conns, []
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)
        self.sock.close()
        for conn in conns:
            conn.close()


@contextlib.contextmanager
def closing_server() -> Iterator[int]:
    """A 127.0.0.1 TCP server that closes every connection it accepts; yields its port."""
    server = LoopbackServer(hold=False)
    try:
        yield server.port
    finally:
        server.close()


# --------------------------------------------------------------------------------------------
# Host-fidelity workloads, shared by the host tests and benchmarks/host_fidelity.py
# --------------------------------------------------------------------------------------------

HTTP_CLIENT_WORKLOAD = """
import json, os, sys, time, urllib.request
url, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
receipts = []
for _ in range(n):
    with urllib.request.urlopen(url) as resp:
        receipts.append({"pid": os.getpid(), "port": int(resp.read())})
    time.sleep(0.03)
with open(out, "w") as f:
    json.dump(receipts, f)
"""
"""``python -c`` script: ``URL OUT N``: N short GET requests (each about a millisecond against a
local server that answers with the client's port), receipts (pid, client port) written to OUT."""

_TOOL_CALL_AGENT = r"""
import json, os, socket, subprocess, sys, threading, time, urllib.request
trace, span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
@PRELUDE@
start = time.time_ns()
env = dict(os.environ, TRACEPARENT=f"00-{trace}-{span}-01")
subprocess.run(@ARGV@, env=env, check=True)
attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "run_command",
         "gen_ai.tool.call.id": "call_1"}
doc = {"resourceSpans": [{
    "resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "@SERVICE@"}},
        {"key": "process.pid", "value": {"intValue": str(os.getpid())}}]},
    "scopeSpans": [{"spans": [{
        "traceId": trace, "spanId": span, "name": "execute_tool run_command", "kind": 1,
        "startTimeUnixNano": str(start), "endTimeUnixNano": str(time.time_ns()),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}]}]}]}
url = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] + "/v1/traces"
req = urllib.request.Request(url, json.dumps(doc).encode(), {"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=30).read()
"""


def tool_call_agent(argv: str, *, service: str, prelude: str = "") -> str:
    """A stdlib agent script (no SDK): ``prelude`` (Python statements), then one tool call that
    runs the Python expression ``argv`` with the call's trace context in ``TRACEPARENT``, then
    the call's ``execute_tool`` span sent to ``OTEL_EXPORTER_OTLP_ENDPOINT`` over OTLP HTTP/JSON
    (resource ``service.name`` = ``service`` and the agent's ``process.pid``)."""
    return (
        _TOOL_CALL_AGENT.replace("@PRELUDE@", prelude)
        .replace("@ARGV@", argv)
        .replace("@SERVICE@", service)
    )


SHORT_CHILDREN_WORKLOAD = """
import json, subprocess, sys
out, src = sys.argv[1], sys.argv[2]
receipts = []
for i in range(int(sys.argv[3])):
    argv = [
        ["cp", src, f"{src}.{i}"],
        ["true"],
        ["sh", "-c", f"exit {i % 3}"],
        ["sleep", "0.005"],
    ][i % 4]
    proc = subprocess.Popen(argv)
    receipts.append({"pid": proc.pid, "argv": argv})
    proc.wait()
with open(out, "w") as f:
    json.dump(receipts, f)
"""
"""Script ``OUT SRC N``: N children of about 5 ms (cp, true, sh -c, sleep), one after another,
each child's pid and argv written to OUT as the receipt the observed plane is checked against."""


@contextlib.contextmanager
def cpu_load(workers: int = 2) -> Iterator[None]:
    """``workers`` busy processes (outside any observed lineage) for the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(workers)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


# --------------------------------------------------------------------------------------------
# graph.json documents written directly (docs/graph.md), for tests and benchmarks of the layers
# that read a graph: every field present, with neutral defaults a caller overrides by keyword
# --------------------------------------------------------------------------------------------


def graph_node_doc(node_id: str, kind: str, **fields: Any) -> dict[str, Any]:
    """A graph.json v2 node with every field: one OS sighting at 1 s, no key or facts."""
    doc: dict[str, Any] = {
        "id": node_id,
        "kind": kind,
        "label": node_id,
        "key": "",
        "facts": None,
        "attrs": {},
        "channels": ["os"],
        "backends": ["linux"],
        "first_seen": 1_000_000_000,
        "last_seen": 2_000_000_000,
        "logical_count": 1,
        "evidence_count": 1,
    }
    doc.update(fields)
    return doc


def graph_edge_doc(
    edge_id: str, source: str, relation: str, target: str, **fields: Any
) -> dict[str, Any]:
    """A graph.json v2 edge with every field: one observed, causal syscall sighting, grade A."""
    doc: dict[str, Any] = {
        "id": edge_id,
        "source": source,
        "target": target,
        "relation": relation,
        "channels": ["os"],
        "backends": ["linux"],
        "causal": True,
        "inferred": None,
        "identity_exact": None,
        "attribution": ["syscall"],
        "method": None,
        "score": None,
        "grade": "A",
        "support": ["obs-1"],
        "derived_support": [],
        "attrs": {},
        "first_seen": 1_000_000_000,
        "last_seen": 2_000_000_000,
        "logical_count": 1,
        "evidence_count": 1,
    }
    doc.update(fields)
    return doc


def graph_document(
    nodes: list[dict[str, Any]],
    edges: list[dict[str, Any]],
    *,
    run: dict[str, Any] | None = None,
    observations: int | None = None,
) -> dict[str, Any]:
    """A graph.json document of ``nodes`` and ``edges`` in the document's order, its summary
    computed by the package's own code (``observations`` defaults to the edge count)."""
    from otel_bridge.graph.summary import summarize  # noqa: PLC0415 (only for graph builders)

    nodes = sorted(nodes, key=lambda n: str(n["id"]))
    edges = sorted(edges, key=lambda e: (e["source"], e["relation"], e["target"]))
    count = len(edges) if observations is None else observations
    return {
        "format": "otel-bridge.graph",
        "version": 2,
        "run": run or {},
        "nodes": nodes,
        "edges": edges,
        "summary": summarize(nodes, edges, {}, {}, count),
    }


@dataclass
class SyntheticRun:
    """A run directory written directly, for review tests and benchmarks: spans in
    ``sem.jsonl`` (the OTLP/JSON codec) and ``graph.json`` (the graph document's own writer),
    so a reader sees exactly the formats ``observe`` writes; the OS plane is stated, not
    observed. Subclasses add their own sessions with :meth:`add_span`, :meth:`add_edge`,
    :meth:`file` and the span attribute helpers."""

    resource: Resource
    scope: Scope
    clock: int
    spans: list[Span] = field(default_factory=list)
    nodes: dict[str, Any] = field(default_factory=dict)
    """Graph node id -> ``GraphNode``."""
    edges: list[Any] = field(default_factory=list)
    """``GraphEdge`` rows, in the order they were added."""

    def tick(self, ms: int = 1) -> int:
        """Move the clock ``ms`` milliseconds on; the new time (ns)."""
        self.clock += ms * 1_000_000
        return self.clock

    def add_span(  # noqa: PLR0917 (a span's fields)
        self,
        trace: str,
        n: int,
        name: str,
        attrs: dict[str, Any],
        parent: int,
        kind: SpanKind = SpanKind.UNSPECIFIED,
        duration_ms: int = 1,
    ) -> Span:
        """Span number ``n`` of ``trace`` (hex), child of span number ``parent`` (0: a root),
        starting at the next tick and lasting ``duration_ms``."""
        start = self.tick()
        span = Span(
            resource=self.resource,
            scope=self.scope,
            trace_id=bytes.fromhex(trace),
            span_id=n.to_bytes(8, "big"),
            parent_span_id=parent.to_bytes(8, "big") if parent else b"",
            name=name,
            kind=kind,
            start_time_unix_nano=start,
            end_time_unix_nano=self.tick(duration_ms),
            attributes=attrs,
        )
        self.spans.append(span)
        return span

    def add_edge(
        self, source: str, relation: str, target: str, *, at: int, record: str, **kw: Any
    ) -> None:
        """A graph edge seen once at ``at``, supported by OS record ``record``."""
        from otel_bridge.graph.document import GraphEdge  # noqa: PLC0415 (graph builders only)

        self.edges.append(
            GraphEdge(
                id=f"e-{len(self.edges):016x}",
                source=source,
                target=target,
                relation=relation,
                first_seen=at,
                last_seen=at,
                support=(f"{record}#0",),
                **kw,
            )
        )

    def file(self, path: str) -> str:
        """The file node of ``path`` (added once); its id."""
        from otel_bridge.graph.document import GraphNode  # noqa: PLC0415 (graph builders only)

        fid = f"file:{path}"
        if fid not in self.nodes:
            self.nodes[fid] = GraphNode(id=fid, kind="file", label=path, facts=FileFacts(path=path))
        return fid

    @staticmethod
    def chat_attrs(inputs: Any, outputs: Any) -> dict[str, Any]:
        """A ``chat`` span's attributes carrying the conversation's messages."""
        return {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m",
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
        }

    @staticmethod
    def command_attrs(call: str, argv: Iterable[str], result: str) -> dict[str, Any]:
        """A ``run_command`` tool span's attributes (the command is the joined argv)."""
        return {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "run_command",
            "gen_ai.tool.call.id": call,
            "gen_ai.tool.call.arguments": json.dumps({"command": " ".join(argv)}),
            "gen_ai.tool.call.result": result,
        }

    def span_lines(self) -> list[bytes]:
        """One OTLP/JSON line per span, as ``sem.jsonl`` holds them."""
        from otel_bridge.otlp import json_codec  # noqa: PLC0415 (run directory writers only)

        return [orjson.dumps(json_codec.encode_traces([s])) for s in self.spans]

    def write_graph(self, path: Path, run_id: str, coverage: dict[str, int]) -> None:
        """``graph.json``: the nodes and edges in the document's order, the summary computed
        by the package's own code, ``coverage`` counted as OS-channel coverage."""
        from otel_bridge.graph.document import Graph, dump  # noqa: PLC0415 (graph builders)
        from otel_bridge.graph.summary import summarize  # noqa: PLC0415

        nodes = tuple(sorted(self.nodes.values(), key=lambda n: n.id))
        edges = tuple(sorted(self.edges, key=lambda e: (e.source, e.relation, e.target)))
        summary = summarize(
            [n.to_dict() for n in nodes],
            [e.to_dict() for e in edges],
            coverage,
            {"os": sum(coverage.values())} if coverage else {},
            len(edges),
        )
        dump(Graph(run={"id": run_id}, nodes=nodes, edges=edges, summary=summary), path)
