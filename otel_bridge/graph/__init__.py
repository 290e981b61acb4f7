"""The evidence graph: incremental materialization, the ``graph.json`` document, queries and
other formats (networkx, GraphML, W3C PROV-JSON).

* :class:`GraphAccumulator` applies observations incrementally (ExecWeave sections IV-B, V-F);
* :class:`Graph` is the finished document, typed; :func:`load`/:func:`dump` read and write it
  (``docs/graph.md`` is the document's contract);
* :mod:`.query` filters and finds bounded paths; :mod:`.export` converts it.

Importing this package loads neither networkx nor the export code: the collector path (the
``graph`` exporter) needs only the accumulator and the document. The query and export names
below are imported on first use (PEP 562 ``__getattr__``), and networkx only inside the
functions that build a networkx graph.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from otel_bridge.graph.accumulator import GraphAccumulator
from otel_bridge.graph.document import (
    FORMAT,
    VERSION,
    Graph,
    GraphEdge,
    GraphNode,
    dump,
    encode,
    load,
    schema,
    validate_document,
)

if TYPE_CHECKING:
    from otel_bridge.graph.export import to_networkx, to_prov, write_graphml
    from otel_bridge.graph.query import GraphFilter, filter_graph, simple_paths

_LAZY = {
    "to_networkx": "otel_bridge.graph.export",
    "to_prov": "otel_bridge.graph.export",
    "write_graphml": "otel_bridge.graph.export",
    "GraphFilter": "otel_bridge.graph.query",
    "filter_graph": "otel_bridge.graph.query",
    "simple_paths": "otel_bridge.graph.query",
}
"""Names imported from their module on first use."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "FORMAT",
    "VERSION",
    "Graph",
    "GraphAccumulator",
    "GraphEdge",
    "GraphFilter",
    "GraphNode",
    "dump",
    "encode",
    "filter_graph",
    "load",
    "schema",
    "simple_paths",
    "to_networkx",
    "to_prov",
    "validate_document",
    "write_graphml",
]
