"""Issue 17 part B: an agent and the gateway killed (-9) mid-run lose nothing acknowledged and add
no duplicates; an agent that resends what the gateway already has adds nothing.

Real processes: ``configs/gateway.yaml`` (TLS, bearer token, graph journal, key file) and
``configs/agent.yaml`` (persistent sending queue), and a client that sends spans with the
OpenTelemetry SDK's OTLP exporter and keeps a receipt of every span the agent acknowledged. The
agent is killed with SIGKILL and restarted on the same queue while the client sends; then the
gateway, while the agent keeps accepting into its queue. At the end every acknowledged span's
observation is in the gateway's output exactly once, and its graph node was applied once.
"""

from __future__ import annotations

import collections
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from fleet_support import (
    CollectorProcess,
    agent_env,
    gateway_env,
    start_load,
)
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "otlp"))
from certs import make_certs

from otel_bridge.testing import free_port

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")

FAST_RETRY = [
    "exporters.otlp/gateway.retry_on_failure.initial_interval=0.2s",
    "exporters.otlp/gateway.retry_on_failure.max_interval=1s",
]


def span_observation_ids(path: Path) -> collections.Counter[str]:
    """How often each span's own observation (``<span id>#0``) reached the gateway's output.

    Only whole lines count: the last one may still be being written (this polls a live file),
    and a gateway killed mid-write leaves a torn line (the file exporter ends it on restart; its
    batch was not acknowledged and comes again). Reading every line made this test fail in a
    loaded loop (a JSONDecodeError on a line read half-written)."""
    seen: collections.Counter[str] = collections.Counter()
    if not path.exists():
        return seen
    for line in path.read_text().split("\n")[:-1]:  # the text after the last newline: unfinished
        try:
            record = json.loads(line)
        except ValueError:
            continue  # torn by the kill
        obs = record.get("observation")
        if obs and obs["source"]["backend"] == "otlp" and obs["id"].endswith("#0"):
            seen[obs["id"][:-2]] += 1
    return seen


@pytest.mark.slow  # about 40 s: two kills, two restarts, the drain of the agent's queue
def test_agent_and_gateway_killed_mid_run_lose_nothing_acknowledged_add_nothing(
    tmp_path: Path,
) -> None:
    certs = make_certs(tmp_path)
    state, receipts = tmp_path / "gateway", tmp_path / "receipts"
    gw_port, agent_port = free_port(), free_port()
    gw_env = gateway_env(state, certs.server, certs.server_key)
    gw_env["OTEL_BRIDGE_GATEWAY_GRPC_ENDPOINT"] = f"127.0.0.1:{gw_port}"
    gw_env["OTEL_BRIDGE_GATEWAY_HTTP_ENDPOINT"] = "127.0.0.1:0"
    a_env = agent_env(f"127.0.0.1:{gw_port}", certs.ca, tmp_path / "queue")
    a_env["OTEL_BRIDGE_OTLP_HTTP_ENDPOINT"] = f"127.0.0.1:{agent_port}"

    def gateway() -> CollectorProcess:
        return CollectorProcess("gateway.yaml", gw_env)

    def agent() -> CollectorProcess:
        return CollectorProcess("agent.yaml", a_env, sets=FAST_RETRY)

    procs = [gateway(), agent()]
    client, progress = start_load(f"http://127.0.0.1:{agent_port}", receipts)
    try:
        progress.wait_for(r"acked 100\b")
        procs[1].kill()  # the agent: SIGKILL mid-run, restarted on the same queue
        procs[1] = agent()
        progress.wait_for(r"acked 200\b")
        procs[0].kill()  # the gateway: SIGKILL mid-run; the agent keeps accepting
        progress.wait_for(r"acked 300\b")
        procs[0] = gateway()
        progress.wait_for(r"acked 400\b")
        assert client.stdin is not None
        client.stdin.write("stop\n")
        client.stdin.close()
        assert client.wait(timeout=60) == 0
        acked = set(receipts.read_text().split())
        records = state / "records.jsonl"
        wait_until(
            lambda: acked <= set(span_observation_ids(records)),
            timeout=90,
            message="every acknowledged span at the gateway",
        )
        assert procs[1].stop() == 0
        assert procs[0].stop() == 0, procs[0].stderr.log()
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        for proc in procs:
            proc.kill()

    counts = span_observation_ids(state / "records.jsonl")
    assert len(acked) >= 400
    assert acked <= set(counts)  # nothing acknowledged was lost
    assert {sid: n for sid, n in counts.items() if n > 1} == {}  # nothing was added twice
    graph: dict[str, Any] = json.loads((state / "graph.json").read_text())
    applied = {
        n["attrs"]["span_id"]: n["evidence_count"]
        for n in graph["nodes"]
        if n["kind"] == "span" and n["label"].startswith("load.")
    }
    assert acked <= set(applied)
    assert {sid: n for sid, n in applied.items() if n != 1} == {}  # the journal replayed once


@pytest.mark.slow  # about 30 s: three agent starts and a gateway
def test_an_agent_resending_what_the_gateway_already_has_adds_nothing(tmp_path: Path) -> None:
    """The resend after a crash, made certain: a copy of an agent's queue taken before delivery
    is replayed by another agent process after the original was delivered."""
    certs = make_certs(tmp_path)
    state, receipts = tmp_path / "gateway", tmp_path / "receipts"
    gw_port, agent_port = free_port(), free_port()
    gw_env = gateway_env(state, certs.server, certs.server_key)
    gw_env["OTEL_BRIDGE_GATEWAY_GRPC_ENDPOINT"] = f"127.0.0.1:{gw_port}"
    gw_env["OTEL_BRIDGE_GATEWAY_HTTP_ENDPOINT"] = "127.0.0.1:0"

    def agent(queue: Path) -> CollectorProcess:
        env = agent_env(f"127.0.0.1:{gw_port}", certs.ca, queue)
        env["OTEL_BRIDGE_OTLP_HTTP_ENDPOINT"] = f"127.0.0.1:{agent_port}"
        drain = "exporters.otlp/gateway.shutdown_timeout=60s"  # SIGINT waits for the delivery
        return CollectorProcess("agent.yaml", env, sets=[*FAST_RETRY, drain])

    procs: list[CollectorProcess] = []
    try:
        procs.append(agent(tmp_path / "queue"))  # the gateway is down: all stays queued
        client, progress = start_load(f"http://127.0.0.1:{agent_port}", receipts)
        progress.wait_for(r"acked 50\b")
        assert client.stdin is not None
        client.stdin.write("stop\n")
        client.stdin.close()
        assert client.wait(timeout=60) == 0
        procs[0].kill()  # crash with everything still queued
        shutil.copytree(tmp_path / "queue", tmp_path / "queue-copy")
        procs.append(CollectorProcess("gateway.yaml", gw_env))
        procs.append(agent(tmp_path / "queue"))  # replays and delivers
        acked = set(receipts.read_text().split())
        records = state / "records.jsonl"
        wait_until(lambda: acked <= set(span_observation_ids(records)), 90, "the delivery")
        assert procs[2].stop() == 0
        resend = agent(tmp_path / "queue-copy")  # the same batches again
        procs.append(resend)
        assert resend.stop() == 0
        assert re.search(r"replaying [1-9]\d* batches", resend.stderr.log())
        check = agent(tmp_path / "queue-copy")  # the copy is empty now: it was delivered
        procs.append(check)
        assert check.stop() == 0
        assert "replaying" not in check.stderr.log()
        assert procs[1].stop() == 0
    finally:
        for proc in procs:
            proc.kill()

    counts = span_observation_ids(state / "records.jsonl")
    assert acked <= set(counts)
    assert {sid: n for sid, n in counts.items() if n > 1} == {}
    graph: dict[str, Any] = json.loads((state / "graph.json").read_text())
    applied = [
        n["evidence_count"]
        for n in graph["nodes"]
        if n["kind"] == "span" and n["attrs"]["span_id"] in acked
    ]
    assert applied == [1] * len(acked)
