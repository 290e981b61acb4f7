"""The evidence graph: incremental materialization, the ``graph.json`` document, queries and
other formats (networkx, GraphML, W3C PROV-JSON).

* :class:`GraphAccumulator` applies observations incrementally (ExecWeave sections IV-B, V-F);
* :class:`Graph` is the finished document, typed; :func:`load`/:func:`dump` read and write it;
* :mod:`.query` filters and finds bounded paths; :mod:`.export` converts it.
"""

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
from otel_bridge.graph.export import to_networkx, to_prov, write_graphml
from otel_bridge.graph.query import GraphFilter, filter_graph, simple_paths

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
