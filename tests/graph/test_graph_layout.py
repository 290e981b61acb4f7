"""What the graph package costs to import, and the shape of its code."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import otel_bridge.graph

PACKAGE = Path(otel_bridge.graph.__file__).resolve().parent


def test_collector_path_does_not_import_networkx() -> None:
    """The pipeline, the graph exporter and the graph package load without networkx (or the
    export code); the export names still resolve on first use."""
    code = (
        "import otel_bridge.pipeline, otel_bridge.exporters.graph, otel_bridge.graph; "
        "import sys; assert 'networkx' not in sys.modules; "
        "assert 'otel_bridge.graph.export' not in sys.modules; "
        "from otel_bridge.graph import to_prov, GraphFilter; "
        "assert 'networkx' not in sys.modules; "
        "from otel_bridge.graph import to_networkx"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr


def test_only_the_marked_hot_path_is_long() -> None:
    """No function in otel_bridge/graph is over 80 lines, except one whose docstring starts
    with "Hot path:" (the accumulator's inner loop)."""
    long: list[str] = []
    hot: list[str] = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                doc = ast.get_docstring(node) or ""
                if doc.startswith("Hot path:"):
                    hot.append(node.name)
                elif lines > 80:
                    long.append(f"{path.name}:{node.name} ({lines} lines)")
    assert long == []
    assert hot == ["apply_many"]


def test_unknown_names_still_raise_attribute_error() -> None:
    """The lazy names do not swallow typos."""
    with pytest.raises(AttributeError, match="no_such_name"):
        getattr(otel_bridge.graph, "no_such_name")  # noqa: B009 - the name is the point
