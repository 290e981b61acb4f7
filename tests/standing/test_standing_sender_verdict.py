"""A standing collector says within seconds that a pidless sender could not be linked.

``otel-bridge run -c configs/local.yaml`` runs as a plain user (``nobody``); an agent using the
OpenTelemetry SDK's default resource (no ``process.pid``) runs as another user (root), keeps
its exporter connection open and stays running. The collector may not read the agent's
descriptors, so no process is seen holding that connection. It used to say
``correlate.sender: no_connection`` (its stderr warning and its last lines' note) only at
shutdown or after ``retention`` (600 s); it now says it once ``sender_grace`` (5 s) has passed
since the spans arrived and the host receiver settled the follow it was asked for, while both
still run, and says it once. When the same agent is later linked after all (it becomes a
process the collector may read, and a new SDK instance makes it followed), the link is made
and the sentence corrected, on stderr and in the last lines, while the collector runs.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from standing_support import (
    IS_ROOT,
    REPO,
    RunningCollector,
    end_process,
    start_agent,
    unprivileged_prefix,
)
from test_standing_strace_attach import _pidless_report

from otel_bridge.processors.correlate import DEFAULT_SENDER_GRACE_S

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")

SENTENCE = r"WARNING otel_bridge\.correlate: agent scout \(service standing-agent\) could not be"
BOUND_S = DEFAULT_SENDER_GRACE_S + 1.0 + 1.0
"""The grace, the second the host receiver must have been settled for, one tick of the clock."""
SLACK_S = 5.0
"""This shared machine's scheduling (a loaded two-core box)."""


def _collector(tmp_path: Path, prefix: list[str]) -> RunningCollector:
    """The bundled local.yaml as a standing collector run by a plain user (``prefix``), its
    graph and records in ``tmp_path``."""
    os.chmod(tmp_path, 0o777)  # the plain user writes its graph here
    return RunningCollector(
        REPO / "configs" / "local.yaml",
        tmp_path,
        {
            "OTEL_BRIDGE_GRAPH": str(tmp_path / "graph.json"),
            "OTEL_BRIDGE_RECORDS": str(tmp_path / "records.jsonl"),
        },
        prefix,
    )


@pytest.mark.slow  # ~10 s: a collector, an agent, the grace
def test_an_unlinkable_sender_is_said_while_the_collector_runs(tmp_path: Path) -> None:
    if not IS_ROOT:
        pytest.skip("an agent of another user needs root to start")
    prefix = unprivileged_prefix()
    collector = _collector(tmp_path, prefix)
    agent = start_agent(
        collector,
        ["-c", _pidless_report(collector.http_port)],
        "reported",
        OTEL_SERVICE_NAME="standing-agent",
    )
    reported = time.monotonic()
    try:
        assert agent.stdin is not None
        line = collector.stderr.wait_for(SENTENCE + ".*", timeout=BOUND_S + SLACK_S)[0]
        took = time.monotonic() - reported
        print(f"no_connection said {took:.2f} s after the agent reported")
        # said while both still run: the collector was not stopped, the agent still holds its
        # connection (it waits on its stdin)
        assert collector.proc.poll() is None
        assert agent.poll() is None
        assert "no followed process was seen holding the connection" in line, line
        assert took <= BOUND_S + SLACK_S, took
        agent.stdin.close()
        assert agent.wait(timeout=60) == 0
    finally:
        end_process(agent)
        code = collector.stop()
    assert code == 0, collector.output
    out = collector.output
    assert out.count("could not be linked to its process") == 2, out  # stderr, then last lines
    last = out[out.rindex("otel-bridge: up ") :]
    assert "agent scout (service standing-agent) could not be linked" in last, last
    assert "correction:" not in out, out
    graph: dict[str, Any] = json.loads((tmp_path / "graph.json").read_text())
    [agent_node] = [n for n in graph["nodes"] if n["id"] == "agent:standing-agent:scout"]
    assert agent_node["attrs"]["correlate.sender"] == "no_connection", agent_node


# An agent that runs as root (the collector, as nobody, may not read its descriptors: its first
# spans get no_connection), then becomes nobody (readable, and traceable by nobody) and restarts
# its SDK with a new service.instance.id: the collector hears of a new sender, follows the
# process holding its connection (strace; the connections it holds are found at the attach), and
# the agent, one entity, is linked after all. Each line on stdin sends one more span.
_BECOMES_READABLE = """
import ctypes, os, pwd, sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

def provider(instance):
    resource = Resource.create({"service.name": "standing-agent", "service.instance.id": instance})
    p = TracerProvider(resource=resource)
    p.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=sys.argv[1])))
    return p

attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "scout"}
def report(p):
    with p.get_tracer("t").start_as_current_span("invoke_agent scout", attributes=attrs):
        pass

first = provider("one")
second = provider("two")  # made now: nobody may not read the interpreter's files (a pyenv)
report(first)
print("reported", flush=True)
sys.stdin.readline()
nobody = pwd.getpwnam("nobody")
libc = ctypes.CDLL(None, use_errno=True)
os.setgroups([])
os.setgid(nobody.pw_gid)
os.setuid(nobody.pw_uid)
assert libc.prctl(4, 1, 0, 0, 0) == 0  # PR_SET_DUMPABLE: setuid cleared it
report(second)
print("reported again", flush=True)
for line in sys.stdin:
    report(second)
    print("sent", flush=True)
"""


@pytest.mark.slow  # ~15 s
def test_a_sender_linked_after_the_verdict_is_linked_and_the_sentence_corrected(
    tmp_path: Path,
) -> None:
    if not IS_ROOT:
        pytest.skip("an agent of another user needs root to start")
    prefix = unprivileged_prefix()
    collector = _collector(tmp_path, prefix)
    url = f"http://127.0.0.1:{collector.http_port}/v1/traces"
    agent = start_agent(collector, ["-c", _BECOMES_READABLE, url], "reported")
    try:
        assert agent.stdout is not None
        assert agent.stdin is not None
        collector.stderr.wait_for(SENTENCE + ".*", timeout=BOUND_S + SLACK_S)
        agent.stdin.write("go\n")
        agent.stdin.flush()
        assert agent.stdout.readline().strip() == "reported again"
        collector.stderr.wait_for(rf"following pid {agent.pid} from now", timeout=30)
        # more spans move the stream's watermark past the new connection's first span
        deadline = time.monotonic() + 30
        corrected = None
        while corrected is None and time.monotonic() < deadline:
            agent.stdin.write("span\n")
            agent.stdin.flush()
            assert agent.stdout.readline().strip() == "sent"
            try:
                corrected = collector.stderr.wait_for(r"correction: agent scout.*", timeout=1.0)
            except AssertionError:
                continue
        assert corrected is not None, collector.stderr.seen
        assert collector.proc.poll() is None  # corrected while it runs
        assert f"pid {agent.pid} held the connection its spans came over" in corrected[0]
        agent.stdin.close()
        assert agent.wait(timeout=60) == 0
    finally:
        end_process(agent)
        code = collector.stop()
    assert code == 0, collector.output
    out = collector.output
    last = out[out.rindex("otel-bridge: up ") :]
    assert "correction: agent scout (service standing-agent) was said not to be linked" in last
    assert "agent scout (service standing-agent) could not be linked" not in last, last
    graph: dict[str, Any] = json.loads((tmp_path / "graph.json").read_text())
    nodes = {n["id"]: n for n in graph["nodes"]}
    [proc] = [
        i for i, n in nodes.items() if n["kind"] == "process" and n["facts"]["pid"] == agent.pid
    ]
    links = [
        (e["target"], e["method"])
        for e in graph["edges"]
        if e["source"] == "agent:standing-agent:scout"
        and e["relation"] == "correlated_with_process"
    ]
    assert links == [(proc, "transport_peer")], links
    attrs = nodes["agent:standing-agent:scout"]["attrs"]
    assert (attrs["correlate.sender"], attrs["correlate.sender.corrected"]) == (
        "no_connection",
        True,
    )
