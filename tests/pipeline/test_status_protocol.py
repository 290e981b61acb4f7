"""The status protocol: what components tell the commands, read through otel_bridge.component."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from otel_bridge.component import (
    RECEIVER,
    ComponentStatus,
    Endpoint,
    RootSettable,
    StatusReporter,
    status_of,
)
from otel_bridge.config import parse_config
from otel_bridge.model import Batch
from otel_bridge.pipeline import Collector
from otel_bridge.testing import ProcessRecord, tool_call_entity, tool_declaration


def config(tmp_path: Path, **receivers: Any) -> Collector:
    """OTLP and host receivers into normalize -> correlate -> a file exporter."""
    doc = {
        "receivers": receivers,
        "processors": {"normalize": None, "correlate": None},
        "exporters": {"file": {"path": str(tmp_path / "out.jsonl")}},
        "service": {
            "pipelines": {
                "evidence": {
                    "receivers": list(receivers),
                    "processors": ["normalize", "correlate"],
                    "exporters": ["file"],
                }
            }
        },
    }
    return Collector(parse_config(doc, env={}))


def test_otlp_receiver_reports_its_bound_endpoints(tmp_path: Path) -> None:
    """Once started, ``status().endpoints`` has the kernel-chosen port of each protocol."""
    loopback = {"endpoint": "127.0.0.1:0"}
    collector = config(
        tmp_path, **{"otlp/agents": {"protocols": {"grpc": loopback, "http": loopback}}}
    )
    receiver = collector.component("otlp/agents")
    assert isinstance(receiver, StatusReporter)
    assert collector.status("otlp/agents").endpoints == ()
    collector.start()
    try:
        status = collector.status("otlp/agents")
        http, grpc = status.endpoint("http"), status.endpoint("grpc")
        assert http is not None
        assert grpc is not None
        assert http.port > 0
        assert grpc.port not in (0, http.port)
        assert http.url == f"http://127.0.0.1:{http.port}"
        assert collector.component_ids(RECEIVER, "otlp") == ["otlp/agents"]
    finally:
        collector.shutdown()


def test_host_receiver_is_root_settable_and_reports_its_status(tmp_path: Path) -> None:
    """The host receiver takes its root through RootSettable; before start it reports no
    backend (the observe tests read the started backend and collection states from it)."""
    collector = config(tmp_path, host={"backend": "portable"})
    host = collector.component("host")
    assert isinstance(host, RootSettable)
    assert isinstance(host, StatusReporter)
    host.set_root_pid(os.getpid())
    assert collector.status("host") == ComponentStatus()
    collector.shutdown()


def test_correlate_outcomes_reach_the_status(tmp_path: Path) -> None:
    """The correlator's outcome counts are its status; the pipeline reports them in order."""
    collector = config(tmp_path, otlp={"protocols": {"http": {"endpoint": "127.0.0.1:0"}}})
    [normalize, correlate] = collector.processors("evidence")
    assert status_of(normalize) == ComponentStatus()
    agent = tool_call_entity("a1" * 8, "f" * 32)
    start = 1_700_000_000_000_000_000
    declared = tool_declaration("b1" * 8, "ls -la", start, trace="f" * 32, agent=agent, host="h")
    child = ProcessRecord(pid=77, exe="/bin/ls", argv=("ls", "-la"), time=start + 5, host="h")
    collector.start()
    try:
        correlate_consume = correlate.consume  # type: ignore[attr-defined]
        correlate_consume(Batch(observations=(*declared, *child.observations())))
    finally:
        collector.shutdown()
    outcomes = collector.pipeline_statuses("evidence")[1].outcomes
    assert outcomes
    assert all(v > 0 for v in outcomes.values())


def test_endpoint_url_brackets_ipv6() -> None:
    """An IPv6 host is bracketed in the URL a client is given."""
    assert Endpoint(protocol="http", host="::1", port=4318).url == "http://[::1]:4318"
