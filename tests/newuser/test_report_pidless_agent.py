"""An agent whose spans name no process is still linked to its process, and the report says how.

A new user's agent set up as the OpenTelemetry Python SDK's documentation does
(``Resource.create({"service.name": ...})``, as the official OpenAI instrumentation's examples
do) states no ``process.pid``: under ``observe`` its agent node was linked to no process, its
model calls to no connection, and the report said nothing. It is now linked to the process that
sent its spans (the connection they came over, ``transport_peer``), and the report says so
("Spans sent by pid N", never "Agent process": a sender may be a relay); with
``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process`` the same agent is linked by its stated pid.
When no sender is found the report says why (``tests/observe/test_observe_sender.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from cli_support import observed_run

AGENT = """
import sys
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

provider = TracerProvider(resource=Resource.create({"service.name": "pidless-agent"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("newuser")
with tracer.start_as_current_span("invoke_agent helper") as agent:
    agent.set_attribute("gen_ai.operation.name", "invoke_agent")
    agent.set_attribute("gen_ai.agent.name", "helper")
    open("notes.txt", "w").write("x")
provider.shutdown()
"""

SAID = (
    " (their resource names no pid; the connection they came over was this process's: the "
    "agent's own process, unless it relays spans it received)"
)


def test_an_agent_without_process_pid_is_linked_as_its_spans_sender(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    report = (observed_run(tmp_path, sys.executable, "agent.py") / "report.md").read_text()
    head = report.split("## Tool calls")[0]
    assert "Spans sent by pid " in head, report
    assert "Agent process" not in head, report  # a sender may be a relay: not said to be it
    assert SAID in head, report
    assert "notes.txt (created, wrote)" in head, report
    assert "is linked to no process" not in report, report


def test_the_variable_it_names_links_the_agent(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    command = ("env", "OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process", sys.executable, "agent.py")
    report = (observed_run(tmp_path, *command) / "report.md").read_text()
    assert "Agent process: pid " in report, report
    assert "notes.txt (created, wrote)" in report.split("## Tool calls")[0], report
    assert "is linked to no process" not in report, report
    assert SAID not in report, report
