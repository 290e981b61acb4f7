"""The typed ``graph.json`` document: load, validate, encode and write it.

:class:`Graph` is the finished graph as a value (frozen dataclasses), produced from the
accumulator's snapshot or loaded from a file; ``Graph.from_dict(doc).to_dict() == doc`` for every
valid document (arrays compare as lists). Encoding uses orjson with sorted keys, so equal graphs
give byte-identical files.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import orjson

from otel_bridge import schemas
from otel_bridge.errors import DecodeError
from otel_bridge.grading import Flag
from otel_bridge.model import Facts

FORMAT = "otel-bridge.graph"
VERSION = 2
"""The document version: 2 added the node ``key`` and ``facts`` and removed the edge
``viewer_only`` (``docs/graph.md`` lists the changes)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphNode:
    """One node of the evidence graph (one entity)."""

    id: str
    kind: str
    label: str = ""
    key: str = ""
    """The run-independent stable key ("" when no sighting stated one)."""
    facts: Facts | None = None
    """The typed facts, merged per field over the node's observations (None: none stated)."""
    channels: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    first_seen: int | None = None
    last_seen: int | None = None
    logical_count: int = 0
    evidence_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this node."""
        return {
            "id": self.id,
            "kind": self.kind,
            "label": self.label,
            "key": self.key,
            "facts": None if self.facts is None else _plain(msgspec.to_builtins(self.facts)),
            "channels": list(self.channels),
            "backends": list(self.backends),
            "attrs": dict(self.attrs),
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "logical_count": self.logical_count,
            "evidence_count": self.evidence_count,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphEdge:
    """One edge: every observation of one ``(source, relation, target)``, aggregated."""

    id: str
    source: str
    target: str
    relation: str
    channels: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    causal: Flag = None
    inferred: Flag = None
    identity_exact: Flag = None
    attribution: tuple[str, ...] = ()
    method: str | tuple[str, ...] | None = None
    score: float | None = None
    grade: str = "U"
    support: tuple[str, ...] | None = None
    derived_support: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    first_seen: int | None = None
    last_seen: int | None = None
    logical_count: int = 0
    evidence_count: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this edge."""
        return {
            "id": self.id,
            "source": self.source,
            "target": self.target,
            "relation": self.relation,
            "channels": list(self.channels),
            "backends": list(self.backends),
            "causal": self.causal,
            "inferred": self.inferred,
            "identity_exact": self.identity_exact,
            "attribution": list(self.attribution),
            "method": list(self.method) if isinstance(self.method, tuple) else self.method,
            "score": self.score,
            "grade": self.grade,
            "support": None if self.support is None else list(self.support),
            "derived_support": list(self.derived_support),
            "attrs": dict(self.attrs),
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "logical_count": self.logical_count,
            "evidence_count": self.evidence_count,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Graph:
    """A finished evidence graph (the ``graph.json`` document, typed)."""

    run: Mapping[str, Any] = field(default_factory=dict)
    nodes: tuple[GraphNode, ...] = ()
    edges: tuple[GraphEdge, ...] = ()
    summary: Mapping[str, Any] = field(default_factory=dict)

    def node(self, node_id: str) -> GraphNode | None:
        """The node with ``node_id``, or None."""
        for n in self.nodes:
            if n.id == node_id:
                return n
        return None

    def to_dict(self) -> dict[str, Any]:
        """The ``graph.json`` document as plain JSON values."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "run": _plain(self.run),
            "nodes": [n.to_dict() for n in self.nodes],
            "edges": [e.to_dict() for e in self.edges],
            "summary": _plain(self.summary),
        }

    @staticmethod
    def from_dict(doc: Mapping[str, Any], *, validate: bool = True) -> Graph:
        """A graph from a ``graph.json`` document; :class:`DecodeError` names what is wrong."""
        plain = _plain(doc)
        if validate:
            schemas.check("graph", plain)
        return Graph(
            run=plain["run"],
            nodes=tuple(_node(n) for n in plain["nodes"]),
            edges=tuple(_edge(e) for e in plain["edges"]),
            summary=plain["summary"],
        )


def _node(d: dict[str, Any]) -> GraphNode:
    return GraphNode(
        id=d["id"],
        kind=d["kind"],
        label=d["label"],
        key=d["key"],
        facts=_facts(d["facts"]),
        channels=tuple(d["channels"]),
        backends=tuple(d["backends"]),
        attrs=d["attrs"],
        first_seen=d["first_seen"],
        last_seen=d["last_seen"],
        logical_count=d["logical_count"],
        evidence_count=d["evidence_count"],
    )


def _facts(data: dict[str, Any] | None) -> Facts | None:
    if data is None:
        return None
    try:
        facts: Facts = msgspec.convert(data, Facts)
    except msgspec.ValidationError as exc:
        raise DecodeError(f"node facts: {exc}") from exc
    return facts


def _edge(d: dict[str, Any]) -> GraphEdge:
    method = d["method"]
    return GraphEdge(
        id=d["id"],
        source=d["source"],
        target=d["target"],
        relation=d["relation"],
        channels=tuple(d["channels"]),
        backends=tuple(d["backends"]),
        causal=d["causal"],
        inferred=d["inferred"],
        identity_exact=d["identity_exact"],
        attribution=tuple(d["attribution"]),
        method=tuple(method) if isinstance(method, list) else method,
        score=d["score"],
        grade=d["grade"],
        support=None if d["support"] is None else tuple(d["support"]),
        derived_support=tuple(d["derived_support"]),
        attrs=d["attrs"],
        first_seen=d["first_seen"],
        last_seen=d["last_seen"],
        logical_count=d["logical_count"],
        evidence_count=d["evidence_count"],
    )


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain(value: Any) -> Any:
    """Tuples to lists and mappings to dicts, recursively: the value ``json.loads`` would give.

    A copy. Scalars are kept without a call and exact types are tested before the ABCs (a graph
    read back from the store is a million plain dicts and lists; the ABC checks and one call per
    leaf were half of ``otel-bridge graph --db``'s time)."""
    kind = type(value)
    if kind is dict or (kind is not list and kind is not tuple and isinstance(value, Mapping)):
        return {k: v if type(v) in _SCALARS else _plain(v) for k, v in value.items()}
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        return [v if type(v) in _SCALARS else _plain(v) for v in value]
    return value


def schema() -> dict[str, Any]:
    """The JSON Schema of ``graph.json`` shipped in the package."""
    return schemas.load("graph")


def validate_document(doc: Any) -> None:
    """Raise :class:`DecodeError` listing the first problems when ``doc`` breaks the schema."""
    schemas.check("graph", _plain(doc))


def encode(doc: Mapping[str, Any]) -> bytes:
    """Deterministic JSON bytes (sorted keys, trailing newline) of a graph document."""
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with mode 0600 (a reader never sees half a file)."""
    target = Path(path)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load(path: str | os.PathLike[str]) -> Graph:
    """Read and validate a ``graph.json`` file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DecodeError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise DecodeError(f"{path}: a graph document is a JSON object")
    return Graph.from_dict(doc)


def dump(graph: Graph | Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write a graph (or its document) atomically as ``graph.json``."""
    doc = graph.to_dict() if isinstance(graph, Graph) else graph
    write_atomic(path, encode(doc))


__all__ = [
    "FORMAT",
    "VERSION",
    "Graph",
    "GraphEdge",
    "GraphNode",
    "dump",
    "encode",
    "load",
    "schema",
    "validate_document",
    "write_atomic",
]
