"""What the viewer tests share: documents written from the contracts, and a headless Chromium."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    # Headless software WebGL (SwiftShader) for sigma.js; no GPU on these machines.
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--no-sandbox",
]


def node(node_id: str, kind: str, label: str, **extra: Any) -> dict[str, Any]:
    """A graph.json v2 node with every field (docs/graph.md)."""
    doc: dict[str, Any] = {
        "id": node_id,
        "kind": kind,
        "label": label,
        "key": "",
        "facts": None,
        "attrs": {},
        "channels": ["os"],
        "backends": ["linux"],
        "first_seen": 1_000_000_000,
        "last_seen": 2_000_000_000,
        "logical_count": 1,
        "evidence_count": 1,
    }
    doc.update(extra)
    return doc


def edge(edge_id: str, source: str, relation: str, target: str, **extra: Any) -> dict[str, Any]:
    """A graph.json v2 edge with every field (docs/graph.md)."""
    doc: dict[str, Any] = {
        "id": edge_id,
        "source": source,
        "target": target,
        "relation": relation,
        "channels": ["os"],
        "backends": ["linux"],
        "causal": True,
        "inferred": None,
        "identity_exact": None,
        "attribution": ["syscall"],
        "method": None,
        "score": None,
        "grade": "A",
        "support": ["obs-1"],
        "derived_support": [],
        "attrs": {},
        "first_seen": 1_000_000_000,
        "last_seen": 2_000_000_000,
        "logical_count": 1,
        "evidence_count": 1,
    }
    doc.update(extra)
    return doc


def graph_doc(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    """A graph.json document (summary computed by the package's own code)."""
    from otel_bridge.graph import validate_document
    from otel_bridge.graph.summary import summarize

    nodes = sorted(nodes, key=lambda n: n["id"])
    edges = sorted(edges, key=lambda e: (e["source"], e["relation"], e["target"]))
    doc: dict[str, Any] = {
        "format": "otel-bridge.graph",
        "version": 2,
        "run": {},
        "nodes": nodes,
        "edges": edges,
        "summary": summarize(nodes, edges, {}, {}, len(edges)),
    }
    validate_document(copy.deepcopy(doc))
    return doc


def launch(playwright: Any) -> Any:
    """The system Chromium, headless."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def wait_ready(page: Any) -> None:
    """Wait until the viewer drew its first frame (or, without a graph, finished booting)."""
    page.wait_for_function(
        "() => window.obViewer && window.obViewer.ready && "
        "(!window.obViewer.state.bundle.graph || window.obViewer.firstPaint() !== null)",
        timeout=60_000,
    )


def screenshot(page: Any, directory: Path, name: str) -> Path:
    """Write a screenshot artifact and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 5_000, f"{name}: an empty screenshot"
    return path
