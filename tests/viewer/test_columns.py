"""The page's columnar graph (``otel_bridge.viewer.columns``): lossless, and smaller."""

from __future__ import annotations

import json
from typing import Any

from otel_bridge.testing import graph_document, graph_edge_doc, graph_node_doc
from otel_bridge.viewer import columns


def _doc(n: int) -> dict[str, Any]:
    nodes = [
        graph_node_doc(
            f"file:/p/f{i}", "file", label=f"/p/f{i}", channels=["os"], first_seen=i, last_seen=i
        )
        for i in range(n)
    ]
    nodes.append(graph_node_doc("process:h:1:1", "process", label="sh (1)", channels=["os"]))
    edges = [
        graph_edge_doc(f"e{i}", "process:h:1:1", "wrote", f"file:/p/f{i}", support=[f"o{i}"])
        for i in range(n)
    ]
    return graph_document(nodes, edges)


def test_unpack_inverts_pack_with_odd_values() -> None:
    """Values that compare equal in Python but differ in JSON stay apart; a field missing from
    some rows stays missing; an edge naming no node keeps its endpoint text."""
    doc = _doc(40)
    doc["nodes"][0]["attrs"] = {"n": 1}
    doc["nodes"][1]["attrs"] = {"n": True}
    doc["nodes"][2]["attrs"] = {"n": 1.0}
    doc["nodes"][3]["attrs"] = {"n": "1"}
    del doc["nodes"][4]["label"]
    doc["nodes"][5]["extra"] = [1, {"a": None}]
    doc["edges"][0]["target"] = "file:/not/a/node"
    back = columns.unpack(json.loads(json.dumps(columns.pack(doc))))
    assert back == doc
    assert [n["attrs"]["n"] for n in back["nodes"][:4]] == [1, True, 1.0, "1"]
    assert type(back["nodes"][1]["attrs"]["n"]) is bool
    assert type(back["nodes"][2]["attrs"]["n"]) is float
    assert "label" not in back["nodes"][4]
    assert list(back) == list(doc)


def test_repeated_values_are_interned_and_endpoints_are_indices() -> None:
    doc = _doc(200)
    packed = columns.pack(doc)
    nodes, edges = packed["nodes"]["columns"], packed["edges"]["columns"]
    assert nodes["kind"]["table"] == ["file", "process"]
    assert nodes["id"]["values"] == [n["id"] for n in doc["nodes"]]
    assert edges["target"]["nodes"] == list(range(200))
    assert edges["relation"] == {"table": ["wrote"], "index": [0] * 200}
    size = len(json.dumps(packed, separators=(",", ":")))
    assert size < 0.5 * len(json.dumps(doc, separators=(",", ":")))


def test_empty_graph() -> None:
    doc = graph_document([], [])
    assert columns.unpack(columns.pack(doc)) == doc
