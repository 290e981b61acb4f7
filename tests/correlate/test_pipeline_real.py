"""normalize -> correlate -> grade -> enrich with the real components and a real process."""

from __future__ import annotations

import json
import os
import subprocess
import time

import psutil

from otel_bridge.component import Consumer, CreateSettings, Host
from otel_bridge.identity import host_id, psutil_start_ms
from otel_bridge.model import (
    Attribution,
    Batch,
    Channel,
    Grade,
    LogRecord,
    Observation,
    ProcessFacts,
    Resource,
    Scope,
    Span,
)
from otel_bridge.processors.correlate import factory as correlate_factory
from otel_bridge.processors.enrich import Config as EnrichConfig
from otel_bridge.processors.enrich import factory as enrich_factory
from otel_bridge.processors.grade import factory as grade_factory
from otel_bridge.processors.normalize import factory as normalize_factory
from otel_bridge.testing import RecordingConsumer

TRACE = bytes.fromhex("5a" * 16)
SPAN = bytes.fromhex("6b" * 8)


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def _normalize_filled_process_facts(observations: list[Observation]) -> bool:
    return any(
        isinstance(e.facts, ProcessFacts)
        for o in observations
        if o.source.channel == Channel.OS
        for e in (o.subject, o.object)
        if e is not None
    )


def _start_record(child: int, observed: int) -> LogRecord:
    """The ``process.start`` record a sampling backend writes for the live process ``child``."""
    ps = psutil.Process(child)
    exe = ps.exe()
    return LogRecord(
        resource=Resource(
            attributes={
                "evidence.channel": "os",
                "evidence.backend": "portable",
                "host.id": host_id(),
                "service.name": "otel-bridge-host",
                "otel_bridge.run.id": "run-1",
            }
        ),
        scope=Scope(name="otel_bridge.host"),
        time_unix_nano=observed,
        event_name="process.start",
        attributes={
            "evidence.record_id": f"portable:{child}",
            "evidence.attribution": "sampled_process",
            "process.pid": child,
            "process.creation.time": _iso(psutil_start_ms(ps.create_time())),
            "process.parent_pid": os.getpid(),
            "process.executable.path": exe,
            "process.executable.name": os.path.basename(exe),
            "process.command_args": tuple(ps.cmdline()),
        },
    )


def _tool_span(start: int, end: int) -> Span:
    """The agent's ``execute_tool`` span declaring ``sleep 0.2``."""
    return Span(
        resource=Resource(attributes={"service.name": "agent"}),
        scope=Scope(name="agent"),
        trace_id=TRACE,
        span_id=SPAN,
        name="execute_tool shell",
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "shell",
            "gen_ai.tool.call.arguments": json.dumps({"command": "sleep 0.2"}),
        },
    )


def _run_chain(batch: Batch) -> tuple[RecordingConsumer, Host]:
    """``batch`` through real normalize -> correlate -> grade -> enrich, started and shut down."""
    sink = RecordingConsumer()
    enrich = enrich_factory.create(
        CreateSettings(id="enrich"), EnrichConfig(traceparent=f"00-{'11' * 16}-{'22' * 8}-01"), sink
    )
    assert isinstance(enrich, Consumer)
    grade = grade_factory.create(CreateSettings(id="grade"), grade_factory.default_config(), enrich)
    assert isinstance(grade, Consumer)
    corr = correlate_factory.create(
        CreateSettings(id="correlate"), correlate_factory.default_config(), grade
    )
    assert isinstance(corr, Consumer)
    norm = normalize_factory.create(
        CreateSettings(id="normalize"), normalize_factory.default_config(), corr
    )
    host = Host()
    for c in (enrich, grade, corr, norm):
        c.start(host)
    norm.consume(batch)  # type: ignore[attr-defined]
    for c in (norm, corr, grade, enrich):
        c.shutdown()
    return sink, host


def test_real_process_bridged_end_to_end() -> None:
    """A real child process is bridged to the tool span that declared it, through real parts."""
    start = time.time_ns()
    child = subprocess.Popen(["sleep", "0.2"])
    # When an event backend saw the start; the /proc-derived creation time is only an identity
    # (its boot-time base is truncated to the second, so it reads up to 1 s early).
    log = _start_record(child.pid, time.time_ns())
    created_ms = psutil_start_ms(psutil.Process(child.pid).create_time())
    child.wait()
    sink, host = _run_chain(Batch(spans=(_tool_span(start, time.time_ns()),), logs=(log,)))
    # correlate reads the typed facts normalize fills; it never parses attribute strings
    assert _normalize_filled_process_facts(sink.observations)
    bridges = [o for o in sink.observations if o.evidence.attribution == Attribution.HEURISTIC]
    assert len(bridges) == 1, [o.relation for o in sink.observations]
    [b] = bridges
    assert b.object is not None
    assert b.object.id.endswith(f":{child.pid}:{created_ms}")
    assert b.evidence.grade == Grade.D
    [tool] = [s for s in sink.spans if s.span_id == SPAN]
    assert tool.attributes["otel_bridge.bridge.process.pid"] == child.pid
    assert len(tool.links) == 1
    counters = host.telemetry.counters()
    assert counters["processor.correlate.outcome.bridge"] == 1
    procs = [
        s for s in sink.spans if s.resource.attributes.get("service.name") == "otel-bridge-host"
    ]
    assert len(procs) == 1
    assert procs[0].attributes["otel_bridge.process.exit_observed"] is False
