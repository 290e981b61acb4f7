"""What the viewer tests share: documents written from the contracts, and a headless Chromium."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.testing import graph_document, graph_edge_doc, graph_node_doc

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    # Headless software WebGL (SwiftShader) for sigma.js; no GPU on these machines.
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    # Composite the page's layers with Skia on the CPU rather than through SwiftShader: about a
    # third of the browser CPU a page costs here (benchmarks/viewer_scale.py --flags).
    "--disable-gpu-compositing",
    "--no-sandbox",
]


def node(node_id: str, kind: str, label: str, **extra: Any) -> dict[str, Any]:
    """A graph.json v2 node with every field (docs/graph.md)."""
    return graph_node_doc(node_id, kind, label=label, **extra)


def edge(edge_id: str, source: str, relation: str, target: str, **extra: Any) -> dict[str, Any]:
    """A graph.json v2 edge with every field (docs/graph.md)."""
    return graph_edge_doc(edge_id, source, relation, target, **extra)


def graph_doc(nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> dict[str, Any]:
    """A graph.json document (summary computed by the package's own code), schema-checked."""
    from otel_bridge.graph import validate_document

    doc = graph_document(nodes, edges)
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
