"""The page's compact form of a graph.json: columns and string tables (``docs/viewer.md``).

The browser decodes a JSON document by building one object per node and edge, each with a dozen
fields; at 10,000 nodes that decode, and the parsing of the text it comes from, were most of
the page's first paint. Here each field of the nodes (and of the edges) is one column: a plain
array of values, or, when values repeat (kinds, relations, channels, grades, labels, ``attrs``
objects), a table of the distinct values and an array of indices into it; an edge's ``source``
and ``target`` are node indices. The page reads only the columns the first paint and the
filters need; a node's or an edge's whole record is put together from every column when it is
asked for (the details panel, the table, the timeline). :func:`unpack` is the exact inverse of
:func:`pack` (a test checks it, and the page's decoding, against graph.json).
"""

from __future__ import annotations

from typing import Any

FORMAT = "otel-bridge.view.columns"
VERSION = 1
ITEMS = ("nodes", "edges")
ENDPOINTS = ("source", "target")


def _cell_key(value: Any) -> Any:
    """A hashable key equal for equal JSON values (``True`` and ``1`` kept apart)."""
    if type(value) is str:
        return value
    if isinstance(value, dict):
        return ("o", tuple((k, _cell_key(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("a", tuple(_cell_key(v) for v in value))
    return (type(value).__name__, value)


def _column(values: list[Any], absent: list[int]) -> dict[str, Any]:
    table: list[Any] = []
    where: dict[Any, int] = {}
    index: list[int] = []
    key_of = _cell_key
    for value in values:
        key = value if type(value) is str else key_of(value)
        at = where.get(key)
        if at is None:
            at = where[key] = len(table)
            table.append(value)
        index.append(at)
    column: dict[str, Any] = (
        {"table": table, "index": index} if 2 * len(table) <= len(values) else {"values": values}
    )
    if absent:
        column["absent"] = absent
    return column


def _columns(items: list[dict[str, Any]], node_index: dict[str, int] | None) -> dict[str, Any]:
    fields: dict[str, None] = {}
    for item in items:
        for name in item:
            fields.setdefault(name)
    columns: dict[str, Any] = {}
    for name in fields:
        absent = [i for i, item in enumerate(items) if name not in item]
        values = [item.get(name) for item in items]
        if node_index is not None and name in ENDPOINTS and not absent:
            ends = [node_index.get(v) if isinstance(v, str) else None for v in values]
            if all(e is not None for e in ends):
                columns[name] = {"nodes": ends}
                continue
        columns[name] = _column(values, absent)
    return {"count": len(items), "columns": columns}


def pack(doc: dict[str, Any]) -> dict[str, Any]:
    """The columnar form of a graph.json document ``doc``."""
    nodes: list[dict[str, Any]] = list(doc.get("nodes") or [])
    node_index: dict[str, int] = {}
    for i, node in enumerate(nodes):
        node_index.setdefault(str(node.get("id")), i)
    return {
        "format": FORMAT,
        "version": VERSION,
        "document": {k: v for k, v in doc.items() if k not in ITEMS},
        "keys": list(doc),
        "nodes": _columns(nodes, None),
        "edges": _columns(list(doc.get("edges") or []), node_index),
    }


def _cell(column: dict[str, Any], i: int, node_ids: list[Any]) -> Any:
    if "index" in column:
        return column["table"][column["index"][i]]
    if "nodes" in column:
        return node_ids[column["nodes"][i]]
    return column["values"][i]


def _rows(table: dict[str, Any], node_ids: list[Any]) -> list[dict[str, Any]]:
    columns: dict[str, dict[str, Any]] = table["columns"]
    absent = {name: set(c.get("absent", ())) for name, c in columns.items()}
    return [
        {
            name: _cell(column, i, node_ids)
            for name, column in columns.items()
            if i not in absent[name]
        }
        for i in range(table["count"])
    ]


def unpack(packed: dict[str, Any]) -> dict[str, Any]:
    """The graph.json document :func:`pack` was given (its exact inverse)."""
    if packed.get("format") != FORMAT:
        raise ValueError(f"not {FORMAT}: {packed.get('format')!r}")
    nodes = _rows(packed["nodes"], [])
    node_ids = [n.get("id") for n in nodes]
    doc = dict(packed["document"])
    doc.update({"nodes": nodes, "edges": _rows(packed["edges"], node_ids)})
    order = [k for k in packed["keys"] if k in doc]
    return {**{k: doc[k] for k in order}, **{k: doc[k] for k in doc if k not in order}}
