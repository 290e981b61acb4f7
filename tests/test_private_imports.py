"""Tests import only public names: a private name (``_x``, or a name from a ``_module``) is the
module's own business, free to change without a test following it. Read by the AST of every
test file, so a new one is held to it too."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(source: str) -> list[str]:
    """``line: module [names]`` for each import of a private otel_bridge name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("otel_bridge"):
            module = node.module or ""
            names = [a.name for a in node.names if _private(a.name)]
            if names or any(_private(part) for part in module.split(".")):
                found.append(f"{node.lineno}: {module} {names}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "otel_bridge" and any(_private(p) for p in parts):
                    found.append(f"{node.lineno}: {alias.name}")
    return found


def test_no_test_imports_a_private_name() -> None:
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 100  # the scan reads the suite, not an empty folder
    found = [
        f"{path.relative_to(TESTS)}:{line}"
        for path in files
        for line in private_imports(path.read_text(encoding="utf-8"))
    ]
    assert not found, "\n".join(found)


def test_the_scan_sees_each_form() -> None:
    sample = (
        "from otel_bridge.graph._elements import Store\n"
        "from otel_bridge.identity import _int, iso_ms\n"
        "import otel_bridge.commands._observe\n"
        "from otel_bridge.identity import iso_to_ms\n"
        "from os import _exit\n"
    )
    assert [line.split(":")[0] for line in private_imports(sample)] == ["1", "2", "3"]
