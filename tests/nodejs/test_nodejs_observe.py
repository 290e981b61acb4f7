"""A Node.js agent we did not write, under ``otel-bridge observe``: the OpenTelemetry JS SDK.

``agent/agent.js`` uses ``@opentelemetry/sdk-node`` configured from the environment only
(``OTEL_EXPORTER_OTLP_PROTOCOL``, ``OTEL_SERVICE_NAME``; ``observe`` sets the endpoint), so the
SDK picks its own exporter: ``exporter-trace-otlp-grpc``, ``-proto`` or ``-http`` (JSON). Its
tool call writes a file and runs ``cp`` with ``child_process.execFile``. For each protocol the
run records both spans, links the agent to its ``node`` process by the resource's
``process.pid``, links the tool call to the ``cp`` it ran (exactly, by the ``TRACEPARENT`` the
agent put in the child's environment, or, without it, by the declared command) and shows the
file ``cp`` wrote on the tool call's row of ``report.md``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from nodejs_support import installed_agent
from observe_support import observe_in

from otel_bridge import rundir
from otel_bridge.model import Span
from otel_bridge.otlp import json_codec

pytestmark = pytest.mark.slow

SPANS = {"invoke_agent js-agent", "execute_tool run_command"}
ROW = "| run_command (call_js_1): `cp notes.txt notes.bak` |"


def _observe(tmp_path: Path, protocol: str, *args: str, **env: str) -> dict[str, Any]:
    """Observe the agent with ``protocol`` in ``tmp_path``; the run's graph document."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    clean.update(OTEL_EXPORTER_OTLP_PROTOCOL=protocol, OTEL_SERVICE_NAME="js-agent", **env)
    agent = installed_agent()
    result = observe_in(tmp_path, "node", str(agent), str(tmp_path), *args, env=clean)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:1] == ["done"], result.stdout  # then the review
    summary = json.loads((tmp_path / "run" / rundir.SUMMARY).read_text())
    otlp = summary["otlp"]
    assert otlp["spans_received"] == 2, otlp
    assert otlp["warnings"] == [], otlp  # no refused metrics, no malformed request
    assert otlp["connections"]["grpc" if protocol == "grpc" else "http"] >= 1, otlp
    graph: dict[str, Any] = json.loads((tmp_path / "run" / rundir.GRAPH).read_text())
    return graph


def _spans(tmp_path: Path) -> dict[str, Span]:
    """The run's recorded spans (``sem.jsonl``) by name."""
    lines = (tmp_path / "run" / rundir.SEM_STREAM).read_text().splitlines()
    return {s.name: s for line in lines for s in json_codec.decode_traces(line).records}


def _links(graph: dict[str, Any], kind: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The ``correlated_with_process`` edges from nodes of ``kind``, with their processes."""
    nodes = {n["id"]: n for n in graph["nodes"]}
    return [
        (e, nodes[e["target"]])
        for e in graph["edges"]
        if e["relation"] == "correlated_with_process" and nodes[e["source"]]["kind"] == kind
    ]


def _wrote(graph: dict[str, Any], process: dict[str, Any]) -> set[str]:
    """The paths of the files ``process`` wrote."""
    return {
        e["target"].removeprefix("file:")
        for e in graph["edges"]
        if e["source"] == process["id"] and e["relation"] == "wrote"
    }


def _check_agent(graph: dict[str, Any], tmp_path: Path, agent: Path) -> None:
    """The agent is linked to its ``node`` process (resource ``process.pid``), which wrote the
    notes file inside the tool call."""
    ((edge, node),) = _links(graph, "agent")
    assert (edge["source"], edge["method"], edge["grade"]) == (
        "agent:js-agent:js-agent-1",
        "resource_pid",
        "C",
    )
    assert node["label"].startswith("node"), node["label"]  # not the gate's sh
    assert node["facts"]["argv"][:3] == ["node", str(agent), str(tmp_path)]
    assert str(tmp_path / "notes.txt") in _wrote(graph, node)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf", "http/json"])
def test_each_exporter_links_the_tool_call_to_its_process_and_file(
    tmp_path: Path, protocol: str
) -> None:
    """The tool call's context in the child's ``TRACEPARENT``: an exact link, graded C. Its
    two numbers JavaScript holds as doubles are kept: the protobuf exporters send a double
    (NaN included); the JSON exporter sends the 64-bit hash as an ``intValue`` wider than int64
    (recorded as its decimal text; the whole request was refused before, every span with it)
    and NaN as ``null`` (recorded as no value: the SDK did not send it)."""
    graph = _observe(tmp_path, protocol)
    spans = _spans(tmp_path)
    assert spans.keys() >= SPANS, spans.keys()
    attrs = spans["execute_tool run_command"].attributes
    digest, ratio = attrs["js_agent.notes.fnv1a64"], attrs["js_agent.notes.ratio"]
    if protocol == "http/json":
        assert (digest, ratio) == ("14695981039346655000", None)
    else:
        assert digest == float(0xCBF29CE484222325)
        assert isinstance(ratio, float)
        assert math.isnan(ratio)
    _check_agent(graph, tmp_path, installed_agent())
    ((edge, cp),) = _links(graph, "tool_call")
    assert (edge["method"], edge["grade"], edge["inferred"]) == ("traceparent", "C", False)
    assert cp["facts"]["argv"] == ["cp", "notes.txt", "notes.bak"]
    assert _wrote(graph, cp) == {str(tmp_path / "notes.bak")}
    report = (tmp_path / "run" / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith(ROW))
    assert "| 0 | it inherited the call's trace context (TRACEPARENT) | C |" in row, row
    assert f"| {tmp_path}/notes.bak (" in row, row


@pytest.mark.parametrize("protocol", ["grpc", "http/json"])
def test_gzip_and_no_propagation_link_by_the_declared_command(
    tmp_path: Path, protocol: str
) -> None:
    """``OTEL_EXPORTER_OTLP_COMPRESSION=gzip`` (gRPC message compression; HTTP
    ``Content-Encoding`` over a chunked body) and a child started without ``TRACEPARENT``, as
    most agents start theirs: the tool call is bridged to ``cp`` by its declared command,
    inferred and graded D, and the report says so."""
    graph = _observe(tmp_path, protocol, "--no-propagate", OTEL_EXPORTER_OTLP_COMPRESSION="gzip")
    assert _spans(tmp_path).keys() >= SPANS
    _check_agent(graph, tmp_path, installed_agent())
    ((edge, cp),) = _links(graph, "tool_call")
    assert (edge["method"], edge["grade"], edge["inferred"]) == (
        "singleton:basename+tail",
        "D",
        True,
    )
    assert cp["facts"]["argv"] == ["cp", "notes.txt", "notes.bak"]
    report = (tmp_path / "run" / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith(ROW))
    assert "| 0 | inferred (singleton:basename+tail): a likely match, not proof | D |" in row, row
    assert f"| {tmp_path}/notes.bak (" in row, row
