"""No function in the package is over ~80 lines, except hot-path functions marked as such.

A marked function's docstring starts with "Hot path:" and names its readable reference, which a
differential test compares it with (``tests/normalize/test_normalize_reference.py``,
``tests/graph/test_graph_reference.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import otel_bridge

PACKAGE = Path(otel_bridge.__file__).resolve().parent
LIMIT = 80
MARKED = {
    "otel_bridge/processors/normalize/spans.py:normalize_into",
    "otel_bridge/graph/accumulator.py:apply_many",
}
"""The marked hot paths; adding one means adding its reference and differential test."""


def _functions() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                doc = ast.get_docstring(node) or ""
                out.append((f"{rel}:{node.name}", node.end_lineno - node.lineno + 1, doc))
    return out


def test_only_marked_hot_paths_are_long() -> None:
    """Every function over the limit is a marked hot path."""
    long = {name: lines for name, lines, _ in _functions() if lines > LIMIT}
    assert set(long) <= MARKED, {n: v for n, v in long.items() if n not in MARKED}


def test_marked_hot_paths_say_so_and_name_a_reference() -> None:
    """Each marked function's docstring starts with "Hot path:" and names a reference."""
    docs = {name: doc for name, _, doc in _functions() if name in MARKED}
    assert docs.keys() == MARKED
    for name, doc in docs.items():
        assert doc.startswith("Hot path:"), name
        assert "reference" in doc.lower(), name
