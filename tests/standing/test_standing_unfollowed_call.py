"""A tool call that ran before a standing collector followed its agent says so, not "no match".

Met as a new user with ``otel-bridge run -c configs/phoenix.yaml`` and an SDK agent started on its
own: the collector follows an agent from its first span, and an agent's first span often comes
after its first tool calls ran (a span is exported when it ends; a BatchSpanProcessor waits
longer). Such a call's span said ``otel_bridge.link.reason=no_candidate``, "none running its
command started while it ran": read as "nothing ran", although the OS plane was not watching
the agent then. It now says ``agent_not_followed`` (``agent_followed_late`` when following began
during the call), with when observation began, whether the agent's resource stated its
``process.pid`` or the collector found the sender by its connection. A call made once the agent
is followed is linked as before. A real ``otel-bridge run`` of the shipped Phoenix config, the
agent a plain subprocess with the OpenTelemetry SDK's HTTP exporter, an OTLP stand-in for Phoenix.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from standing_support import REPO, Downstream, RunningCollector, run_gated_agent

from otel_bridge.linkreasons import AGENT_NOT_FOLLOWED, UNOBSERVED
from otel_bridge.processors.enrich import LINK_OBSERVED_SINCE

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the linux backend)")

AGENT = """
import json, subprocess, sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

provider = TracerProvider(resource=Resource.create())
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("unfollowed")


def tool(call_id, argv):
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "run_command",
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": json.dumps({"command": " ".join(argv)}),
    }
    with tracer.start_as_current_span("execute_tool run_command", attributes=attrs):
        subprocess.run(argv, check=True)


tool("call_1", ["sleep", "0.2"])  # its span is the agent's first: sent as it ends
print("reported", flush=True)
sys.stdin.readline()  # the collector follows the agent now
tool("call_2", ["sleep", "0.3"])
provider.shutdown()
"""


@pytest.mark.parametrize("pidless", [False, True], ids=["process.pid", "sender"])
def test_a_call_before_the_agent_was_followed_says_so(tmp_path: Path, pidless: bool) -> None:
    (tmp_path / "agent.py").write_text(AGENT)
    downstream = Downstream()
    try:
        env = {"PHOENIX_COLLECTOR_ENDPOINT": downstream.http_url}
        # not followed by its environment (``follow_exporters``, which follows an agent whose
        # SDK is set to send here from its start): only from its first span, as a collector
        # does for an agent started with another environment (a relay's endpoint, a default)
        collector = RunningCollector(
            REPO / "configs" / "phoenix.yaml",
            tmp_path,
            env,
            args=("--set", "receivers.host.follow_exporters=false"),
        )
        run_gated_agent(
            collector,
            tmp_path,
            ["agent.py"],
            "reported",
            OTEL_EXPERIMENTAL_RESOURCE_DETECTORS="otel" if pidless else "process,host",
            OTEL_SERVICE_NAME="unfollowed-agent",
        )
        spans = downstream.spans()
    finally:
        downstream.stop()
    calls = {
        s.attributes.get("gen_ai.tool.call.id"): s
        for s in spans
        if s.attributes.get("gen_ai.tool.call.id")
    }
    before, after = calls["call_1"], calls["call_2"]
    attrs = dict(before.attributes)
    assert attrs.get("otel_bridge.link.status") == "unlinked", attrs
    assert attrs.get("otel_bridge.link.reason") == AGENT_NOT_FOLLOWED, attrs
    assert attrs.get("otel_bridge.link.explanation") == UNOBSERVED[AGENT_NOT_FOLLOWED]
    since = attrs.get(LINK_OBSERVED_SINCE)
    assert isinstance(since, int), attrs
    assert since >= before.end_time_unix_nano, attrs
    after_attrs = dict(after.attributes)
    assert "otel_bridge.bridge.method" in after_attrs, after_attrs  # followed: linked
    assert "otel_bridge.link.status" not in after_attrs, after_attrs
