"""Parallel tool calls against real processes: overlapping calls never clip each other.

A real agent process runs two tool calls of the same command (``sleep 0.3``) at once on two
threads, under the suite's background CPU load, observed by the real host receiver (the
strongest backend that works here). Both calls have started before either process runs (a
barrier), and neither call ends before the other call's process has started (``Popen`` has
returned), so each process starts inside both calls' windows even when the load delays one
thread. The agent writes a receipt per call (span start/end, the pid that ran it); the test
builds the tool spans from those receipts (GenAI ``execute_tool`` spans with the agent's
``process.pid`` on the resource) and runs the real ``normalize`` and the correlator over spans
and OS records.

* **parallel calls**: both processes observed. Nothing but time tells them apart, so neither
  call may be bridged to the other's process; with identical commands both are ambiguous.
* **missed sibling**: the second call's process is started by a launcher outside the observed
  lineage (the test process), so the observer truly misses it. The first call's process is then
  the only candidate in the second call's window; it must not be bridged to the second call.
  The paper's literal window (cut at the next call's start) makes exactly that false bridge,
  which shows the control can fail.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from host_support import Gated, finish, python
from host_support import start_receiver as start

from otel_bridge.component import CreateSettings, Host
from otel_bridge.identity import host_id
from otel_bridge.model import (
    Attribution,
    Batch,
    LogRecord,
    Observation,
    ProcessFacts,
    RelationKind,
    Resource,
    Scope,
    Span,
    ToolCallFacts,
)
from otel_bridge.processors.correlate import Config, Correlator
from otel_bridge.processors.correlate.singleton import OURS, Policy
from otel_bridge.processors.normalize import factory as normalize_factory
from otel_bridge.receivers.host import HostConfig
from otel_bridge.testing import RecordingConsumer, cpu_load

TRACE = "7c" * 16
SPANS = ("01" * 8, "02" * 8)
COMMAND = "sleep 0.3"

AGENT = r"""
import json, os, subprocess, sys, threading, time
out, mode, fifo = sys.argv[1], sys.argv[2], sys.argv[3]
first_started = threading.Event()
both_started = threading.Barrier(2)
calls = [{}, {}]

spawned = [threading.Event(), threading.Event()]

def launch_outside():
    with open(fifo, "w") as f:
        f.write("run\n")
    with open(fifo + ".pid") as f:
        return int(f.read())  # EOF: the launcher closes it when its process ended

def call(i):
    if i:
        first_started.wait()
    calls[i]["start"] = time.time_ns()
    if not i:
        first_started.set()
    both_started.wait()  # both calls run before either process starts
    if mode == "missed" and i:
        calls[i]["pid"] = launch_outside()
        spawned[i].set()
    else:
        proc = subprocess.Popen(["sleep", "0.3"])
        calls[i]["pid"] = proc.pid
        spawned[i].set()
        proc.wait()
    spawned[1 - i].wait()  # neither call ends before the other's process started
    calls[i]["end"] = time.time_ns()

threads = [threading.Thread(target=call, args=(i,)) for i in (0, 1)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(out, "w") as f:
    json.dump({"agent": os.getpid(), "calls": calls}, f)
"""


def launcher(fifo: Path) -> threading.Thread:
    """Run the second call's command from the test process, outside the observed lineage."""

    def run() -> None:
        with open(fifo) as f:
            f.readline()
        proc = subprocess.Popen(["sleep", "0.3"])
        with open(f"{fifo}.pid", "w") as f:
            f.write(f"{proc.pid}\n")
            f.flush()
            proc.wait()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run_agent(tmp_path: Path, mode: str) -> tuple[list[LogRecord], dict[str, Any]]:
    """Observe the two-thread agent under CPU load; its OS records and receipts."""
    (tmp_path / "agent.py").write_text(AGENT)
    fifo = tmp_path / "launch"
    os.mkfifo(fifo)
    os.mkfifo(f"{fifo}.pid")
    out = tmp_path / "calls.json"
    args = " ".join(shlex.quote(a) for a in (python(), "agent.py", str(out), mode, str(fifo)))
    helper = launcher(fifo) if mode == "missed" else None
    with cpu_load():
        work = Gated(f"exec {args}", cwd=str(tmp_path))
        try:
            observed = start(HostConfig(files=False, network=False), work.pid)
        except BaseException:
            work.kill()
            raise
        work.release()
        assert work.wait(timeout=60) == 0
        observed.receiver.wait_idle()
        observed = finish(observed)
    if helper is not None:
        helper.join(timeout=10)
    return observed.logs, json.loads(out.read_text())


def tool_spans(receipts: dict[str, Any]) -> tuple[Span, ...]:
    """The agent's two ``execute_tool`` spans, as an instrumented agent would export them."""
    resource = Resource(
        attributes={
            "service.name": "parallel-agent",
            "process.pid": receipts["agent"],
            "host.id": host_id(),
        }
    )
    return tuple(
        Span(
            resource=resource,
            scope=Scope(name="parallel-agent"),
            trace_id=bytes.fromhex(TRACE),
            span_id=bytes.fromhex(span),
            name="execute_tool run_command",
            start_time_unix_nano=call["start"],
            end_time_unix_nano=call["end"],
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "run_command",
                "gen_ai.tool.call.arguments": json.dumps({"command": COMMAND}),
            },
        )
        for span, call in zip(SPANS, receipts["calls"], strict=True)
    )


def normalized(spans: tuple[Span, ...], logs: list[LogRecord]) -> tuple[Observation, ...]:
    """The real normalizer's observations of the spans and OS records."""
    sink = RecordingConsumer()
    norm = normalize_factory.create(
        CreateSettings(id="normalize"), normalize_factory.default_config(), sink
    )
    norm.start(Host())
    norm.consume(Batch(spans=spans, logs=tuple(logs)))  # type: ignore[attr-defined]
    norm.shutdown()
    return tuple(sink.observations)


def links(observations: tuple[Observation, ...], policy: Policy) -> tuple[dict[str, int], Any]:
    """Tool span id -> bridged pid under ``policy``, and the outcome counts."""
    core = Correlator(Config(), policy)
    core.add(observations)
    out: dict[str, int] = {}
    for d in core.step(final=True):
        if d.relation != RelationKind.CORRELATED_WITH_PROCESS or d.object is None:
            continue
        if d.evidence.attribution != Attribution.HEURISTIC:
            continue
        tool, proc = d.subject.facts, d.object.facts
        assert isinstance(tool, ToolCallFacts)
        assert isinstance(proc, ProcessFacts)
        out[tool.span_id] = proc.pid
    return out, core.counts()


def observed_pids(logs: list[LogRecord]) -> set[int]:
    """Pids with a process record."""
    return {
        int(pid)
        for r in logs
        if r.event_name in ("process.start", "process.exec")
        for pid in (r.attributes.get("process.pid"),)
        if isinstance(pid, int)
    }


def test_parallel_calls_are_never_crossed(tmp_path: Path) -> None:
    """Both processes observed: no call is bridged to the other call's process; identical
    commands overlapping in time are ambiguous from both sides."""
    logs, receipts = run_agent(tmp_path, "both")
    pids = [c["pid"] for c in receipts["calls"]]
    assert set(pids) <= observed_pids(logs), "the observer missed a process: no control"
    got, counts = links(normalized(tool_spans(receipts), logs), OURS)
    for span, pid in zip(SPANS, pids, strict=True):
        assert got.get(span, pid) == pid, f"call {span} bridged to another call's process"
    assert got == {}
    assert counts["skip.several_candidates"] + counts["skip.process_ambiguous"] == 2


def test_missed_sibling_is_not_bridged_to_the_first_calls_process(tmp_path: Path) -> None:
    """The second call's process was never observed: the first call's process, lying in both
    windows, is bridged to neither (ambiguous), never to the second call. The literal window
    rule makes that false bridge on the same records."""
    logs, receipts = run_agent(tmp_path, "missed")
    first, second = (c["pid"] for c in receipts["calls"])
    seen = observed_pids(logs)
    assert first in seen
    assert second not in seen, "the launcher's process is outside the lineage"
    observations = normalized(tool_spans(receipts), logs)
    got, counts = links(observations, OURS)
    assert got.get(SPANS[1]) != first
    assert got == {}
    assert counts["skip.process_ambiguous"] == 2
    literal, _ = links(observations, replace(OURS, cut_at_next_start=True))
    assert literal == {SPANS[1]: first}
