"""The report reads a parsed ``graph.json`` without copying it first (``report.graph_of``): the
same typed graph and the same ``report.md`` bytes as ``Graph.from_dict``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from otel_bridge.graph.document import Graph
from otel_bridge.report import build, graph_of, render, report_text
from otel_bridge.testing import graph_document, graph_edge_doc, graph_node_doc

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "graph_scenario.json"
PLANES = {"file": "available", "process": "available", "network": "degraded: no tracer"}


def _reference(doc: dict[str, Any]) -> str:
    return render(build(Graph.from_dict(doc, validate=False)), title="t", planes=PLANES)


def _document() -> dict[str, Any]:
    """A run's shape: a tool call, its process and child, files, an endpoint, mixed flags."""
    call = "tool_call:t:a"
    sh, child = "process:h:10:1", "process:h:11:2"
    facts = {
        "type": "process",
        "host_id": "h",
        "pid": 10,
        "start_time_ms": 1,
        "argv": ["sh", "-c", "make"],
        "exit_code": 2,
    }
    nodes = [
        graph_node_doc(
            call,
            "tool_call",
            facts={"type": "tool_call", "tool": "shell", "call_id": "c1", "trace_id": "t"},
        ),
        graph_node_doc(sh, "process", facts=facts, key="process:sh"),
        graph_node_doc(child, "process", facts={**facts, "pid": 11, "argv": ["make"]}),
        graph_node_doc("file:/w/out", "file", attrs={"file.path": "/w/out"}),
        graph_node_doc("endpoint:tcp:10.0.0.5:443", "endpoint"),
    ]
    edges = [
        graph_edge_doc(
            "e1",
            call,
            "correlated_with_process",
            sh,
            method=["traceparent", "resource_pid"],
            score=1,
            inferred="mixed",
            grade="B",
        ),
        graph_edge_doc("e2", sh, "spawned", child, support=None, derived_support=["x#1"]),
        graph_edge_doc("e3", child, "wrote", "file:/w/out", score=0.5),
        graph_edge_doc("e4", child, "connected_to", "endpoint:tcp:10.0.0.5:443", method="scan"),
    ]
    return graph_document(nodes, edges, run={"id": "r1"})


def test_graph_of_equals_from_dict_on_a_run_shaped_document() -> None:
    doc = orjson.loads(orjson.dumps(_document()))  # as read from graph.json
    assert graph_of(doc) == Graph.from_dict(doc, validate=False)
    text = report_text(doc, title="t", planes=PLANES)
    assert text == _reference(doc)
    assert "/w/out" in text  # the report is not empty: the write is in it


def test_graph_of_equals_from_dict_on_the_golden_graph() -> None:
    doc = json.loads(GOLDEN.read_text())
    assert graph_of(doc) == Graph.from_dict(doc)
    assert report_text(doc, title="t", planes=PLANES) == _reference(doc)


def test_a_document_msgspec_refuses_is_read_as_before() -> None:
    doc = orjson.loads(orjson.dumps(_document()))
    doc["edges"][0]["grade"] = 7  # not a string: the typed conversion refuses it
    graph = graph_of(doc)
    assert graph == Graph.from_dict(doc, validate=False)
    grade: object = graph.edges[0].grade
    assert grade == 7  # kept as from_dict keeps it
