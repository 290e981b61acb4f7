"""``tests/REPRODUCTIONS.md`` cannot drift: every node id it lists names a test that exists
(its function in that file, its parameter id in that file's source), and each reproduction item
of each issue it covers (issue 13's seven, issue 11's nine) has rows."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "tests" / "REPRODUCTIONS.md"
NODE = re.compile(r"`(tests/[\w/]+\.py)::([\w:]+)(?:\[([^\]`]+)\])?`")


ITEMS = {"13": 7, "11": 9}
"""The issues the table covers (its ``## Issue N`` sections) and how many items each lists."""


def _rows(issue: str | None = None) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """``(item, [(path, name, parameter)])`` for each table row (of ``issue``'s section only)."""
    rows = []
    section = None
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if line.startswith("## Issue "):
            section = line.removeprefix("## Issue ").strip()
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].isdigit() and issue in (None, section):
            nodes = [(m[1], m[2], m[3] or "") for m in NODE.finditer(cells[2])]
            rows.append((cells[0], nodes))
    return rows


def _defined(path: Path) -> set[str]:
    """``function`` and ``Class::method`` names of the tests defined in ``path``."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(
                f"{node.name}::{f.name}" for f in node.body if isinstance(f, ast.FunctionDef)
            )
    return names


def test_every_listed_node_id_exists() -> None:
    """Each id's file exists, defines the test, and holds the parameter id's text."""
    missing = []
    ids = [node for _, nodes in _rows() for node in nodes]
    assert len(ids) > 40
    for path, name, parameter in ids:
        file = ROOT / path
        if not file.is_file() or name not in _defined(file):
            missing.append(f"{path}::{name}")
        elif parameter and parameter not in file.read_text(encoding="utf-8"):
            missing.append(f"{path}::{name}[{parameter}]")
    assert not missing, "REPRODUCTIONS.md names tests that do not exist: " + ", ".join(missing)


@pytest.mark.parametrize("issue", sorted(ITEMS))
def test_every_item_of_the_issue_has_a_row_with_a_test(issue: str) -> None:
    """Items 1 to N of each issue each have rows, and no row is without a test."""
    rows = _rows(issue)
    assert {item for item, _ in rows} == {str(i) for i in range(1, ITEMS[issue] + 1)}
    assert all(nodes for _, nodes in rows)
