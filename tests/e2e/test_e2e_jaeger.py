"""What ``configs/jaeger.yaml`` sends a Jaeger: enriched OTLP/gRPC with links carrying evidence.

No Jaeger server can be installed here, so a recording OTLP/gRPC ``TraceService`` stands in for
Jaeger's OTLP port: the test asserts on exactly the requests Jaeger would have received.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import COPY, REPO, SCRIPT, SLEEP, ModelServer, example, observe, start_model_server
from otlp_recorder import RecordingTraceServer, attributes

pytestmark = [pytest.mark.slow, pytest.mark.examples]

BRIDGE = "otel_bridge.bridge."


@pytest.fixture
def jaeger() -> Iterator[RecordingTraceServer]:
    """The recording stand-in for Jaeger's OTLP/gRPC port."""
    server = RecordingTraceServer().start()
    yield server
    server.stop()


@pytest.fixture
def model(tmp_path: Path) -> Iterator[ModelServer]:
    """The scripted model server as its own process."""
    server = start_model_server(SCRIPT, tmp_path)
    yield server
    server.stop()


def test_jaeger_config_sends_links_with_evidence(
    tmp_path: Path, jaeger: RecordingTraceServer, model: ModelServer
) -> None:
    """Each shell tool span links to its process's OS-plane span; the link carries the evidence."""
    workdir = (tmp_path / "work").resolve()
    workdir.mkdir()
    observe(
        example("plain_otel_agent.py", "--model-url", model.url, "--no-instrument"),
        run_dir=tmp_path / "run",
        cwd=workdir,
        config=REPO / "configs" / "jaeger.yaml",
        env={
            "JAEGER_ENDPOINT": f"127.0.0.1:{jaeger.port}",
            # our receiver must not take the standard ports other tests or tools may hold
            "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": "127.0.0.1:0",
            "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
        },
    )
    assert jaeger.wait_for(lambda r: len(r.span_named("execute_tool run_command")) == 2)
    spans = list(jaeger.spans())
    os_plane = {
        s.span_id: (resource, s)
        for resource, s in spans
        if resource.get("service.name") == "otel-bridge-host"
    }
    assert os_plane, "no OS-plane spans were exported"
    for resource, _ in os_plane.values():
        assert resource["evidence.channel"] == "os"
        assert resource["host.id"]
    tools = [s for _, s in jaeger.span_named("execute_tool run_command")]
    tools.sort(key=lambda s: s.start_time_unix_nano)
    for tool, command in zip(tools, (SLEEP, COPY), strict=True):
        assert len(tool.links) == 1, tool.links
        (link,) = tool.links
        assert link.span_id in os_plane, "the link does not point at an OS-plane span"
        _, process_span = os_plane[link.span_id]
        process_attrs = attributes(process_span.attributes)
        evidence = attributes(link.attributes)
        assert evidence[BRIDGE + "inferred"] is True
        assert evidence[BRIDGE + "causal"] is False
        assert evidence[BRIDGE + "identity_exact"] is False
        assert str(evidence[BRIDGE + "method"]).startswith("singleton")
        assert 0.80 <= float(str(evidence[BRIDGE + "score"])) <= 0.95
        assert evidence[BRIDGE + "grade"] == "D"
        assert evidence[BRIDGE + "support"]
        assert evidence[BRIDGE + "process.id"] == process_attrs["otel_bridge.process.id"]
        assert evidence[BRIDGE + "process.pid"] == process_attrs["process.pid"]
        # Phoenix drops links, so the same evidence rides on the span itself.
        tool_attrs = attributes(tool.attributes)
        for key in ("method", "score", "inferred", "causal", "grade", "process.id"):
            assert tool_attrs[BRIDGE + key] == evidence[BRIDGE + key]
        assert [e.name for e in tool.events].count("otel_bridge.bridge") == 1
        if command == SLEEP:
            assert process_attrs["process.command_args"] == shlex.split(SLEEP)
    (write,) = [s for _, s in jaeger.span_named("execute_tool write_file")]
    assert not write.links
    assert BRIDGE + "method" not in attributes(write.attributes)
