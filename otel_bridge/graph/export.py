"""Other formats from the same graph: a networkx view, GraphML and W3C PROV-JSON.

networkx is imported only by the functions that need it (:func:`to_networkx`,
:func:`write_graphml`), and :mod:`otel_bridge.graph` imports this module only when one of its
names is first used, so the collector never pays for either.

**networkx.** :func:`to_networkx` gives a ``MultiDiGraph``: one node per graph node (attributes
``kind``, ``label``, ``channels``, ... as in ``graph.json``) and one edge per graph edge, keyed by
its relation, carrying every edge field.

**GraphML** has scalar attributes only: lists and objects are written as their JSON text, and
null values are left out (GraphML has no null). The tri-state edge flags (``causal``,
``inferred``, ``identity_exact``) are the strings ``true``, ``false`` or ``mixed``, because
GraphML gives each key a single type.

**PROV-JSON** (https://www.w3.org/submissions/prov-json/) maps the evidence graph onto the PROV
core:

=====================================  =================================================
graph                                  PROV
=====================================  =================================================
``agent`` node                         ``agent`` (``prov:type`` ``prov:SoftwareAgent``)
``tool_call``, ``process``, ``span``   ``activity`` (``prov:startTime``/``endTime`` from
and the typed operations               first/last seen)
(``workflow``, ``chain``, ...)
every other node                       ``entity``
``invoked`` agent -> tool call         ``wasAssociatedWith`` (activity, agent)
``delegated_to`` agent -> agent        ``actedOnBehalfOf`` (delegate = target, responsible
                                       = source)
``spawned`` process -> process         ``wasStartedBy`` (activity = child, starter = parent)
``child_of`` activity -> activity      ``wasInformedBy`` (informed = child, informant =
                                       parent)
``read``/``opened``/``executed``/      ``used`` (activity = process or tool call, entity)
``connected_to``/``attempted_connect``/
``listened_on``/``requested``/
``declared_command`` from an activity
``wrote``/``created``/``renamed``      ``wasGeneratedBy`` (entity = file, activity)
``deleted``                            ``wasInvalidatedBy`` (entity = file, activity)
anything else (and any pair whose      ``wasInfluencedBy`` (influencee = target,
types do not fit the relation above)   influencer = source)
=====================================  =================================================

Every PROV relation record carries ``ob:relation`` and the edge's evidence fields
(``ob:causal``, ``ob:grade``, ...), so the evidence status survives the translation; every node
record carries ``ob:kind``, the stable key ``ob:key`` and, when the node has facts, ``ob:facts``
(their JSON text). Qualified names use the prefix ``ob`` (``urn:otel-bridge:``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from typing import TYPE_CHECKING, Any, BinaryIO

import msgspec

from otel_bridge.graph.document import Graph, GraphEdge, GraphNode
from otel_bridge.model import OPERATION_KINDS

if TYPE_CHECKING:
    import networkx as nx

PROV_PREFIX = "ob"
PROV_NAMESPACE = "urn:otel-bridge:"
_ACTIVITY_KINDS = frozenset(
    {"tool_call", "process", "span", *(str(kind) for kind in OPERATION_KINDS)}
)
_USED = frozenset(
    {
        "read",
        "opened",
        "executed",
        "connected_to",
        "attempted_connect",
        "listened_on",
        "requested",
        "declared_command",
    }
)
_GENERATED = frozenset({"wrote", "created", "renamed"})


def to_networkx(graph: Graph) -> nx.MultiDiGraph:
    """A ``MultiDiGraph`` view of ``graph``: one networkx edge per graph edge, keyed by relation."""
    import networkx as nx  # noqa: PLC0415 - lazily: the collector never needs it

    g = nx.MultiDiGraph()
    g.graph["run"] = dict(graph.run)
    for n in graph.nodes:
        attrs = n.to_dict()
        del attrs["id"]
        g.add_node(n.id, **attrs)
    for e in graph.edges:
        attrs = e.to_dict()
        for key in ("source", "target"):
            del attrs[key]
        g.add_edge(e.source, e.target, key=e.relation, **attrs)
    return g


def _scalar(value: Any) -> Any:
    if isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True)


_TRI_STATE = ("causal", "inferred", "identity_exact")
"""Edge flags that are true, false or ``"mixed"``: GraphML gives a key one type, so they are
written as the strings ``true``/``false``/``mixed`` (an unstated flag is left out)."""


def _graphml_value(key: str, value: Any) -> Any:
    if key in _TRI_STATE:
        return json.dumps(value) if isinstance(value, bool) else str(value)
    return _scalar(value)


def write_graphml(graph: Graph, path: str | os.PathLike[str] | BinaryIO) -> None:
    """Write ``graph`` as GraphML to a file path or a binary stream (see the module docstring
    for the value mapping)."""
    import networkx as nx  # noqa: PLC0415 - lazily: the collector never needs it

    g = nx.MultiDiGraph()
    for n in graph.nodes:
        g.add_node(n.id, **{k: _scalar(v) for k, v in n.to_dict().items() if v is not None})
    for e in graph.edges:
        fields = e.to_dict()
        attrs = {
            k: _graphml_value(k, v)
            for k, v in fields.items()
            if v is not None and k not in ("source", "target")
        }
        g.add_edge(e.source, e.target, key=e.id, **attrs)
    target = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
    nx.write_graphml(g, target, named_key_ids=True)


def _qn(identifier: str) -> str:
    return f"{PROV_PREFIX}:{identifier}"


def _time(ns: int | None) -> str | None:
    if ns is None:
        return None
    moment = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def _node_record(n: GraphNode) -> dict[str, Any]:
    record: dict[str, Any] = {
        "prov:label": n.label or n.id,
        f"{PROV_PREFIX}:kind": n.kind,
        f"{PROV_PREFIX}:key": n.key,
        f"{PROV_PREFIX}:channels": " ".join(n.channels),
        f"{PROV_PREFIX}:logical_count": n.logical_count,
        f"{PROV_PREFIX}:evidence_count": n.evidence_count,
    }
    if n.facts is not None:
        record[f"{PROV_PREFIX}:facts"] = _scalar(msgspec.to_builtins(n.facts))
    for key, value in sorted(n.attrs.items()):
        record[f"{PROV_PREFIX}:attr.{key}"] = _scalar(value)
    return record


def _evidence(e: GraphEdge) -> dict[str, Any]:
    record = {
        f"{PROV_PREFIX}:relation": e.relation,
        f"{PROV_PREFIX}:grade": e.grade,
        f"{PROV_PREFIX}:causal": _scalar(e.causal),
        f"{PROV_PREFIX}:inferred": _scalar(e.inferred),
        f"{PROV_PREFIX}:identity_exact": _scalar(e.identity_exact),
        f"{PROV_PREFIX}:attribution": " ".join(e.attribution),
        f"{PROV_PREFIX}:channels": " ".join(e.channels),
        f"{PROV_PREFIX}:logical_count": e.logical_count,
        f"{PROV_PREFIX}:evidence_count": e.evidence_count,
    }
    if e.method is not None:
        record[f"{PROV_PREFIX}:method"] = _scalar(e.method)
    if e.score is not None:
        record[f"{PROV_PREFIX}:score"] = e.score
    if e.derived_support:
        record[f"{PROV_PREFIX}:derived_support"] = " ".join(e.derived_support)
    return record


def to_prov(graph: Graph) -> dict[str, Any]:
    """The PROV-JSON document of ``graph`` (see the module docstring for the mapping)."""
    doc: dict[str, dict[str, Any]] = {"prefix": {PROV_PREFIX: PROV_NAMESPACE}}
    types: dict[str, str] = {}
    for n in graph.nodes:
        record = _node_record(n)
        if n.kind == "agent":
            record["prov:type"] = "prov:SoftwareAgent"
            section = "agent"
        elif n.kind in _ACTIVITY_KINDS:
            for field, ns in (("prov:startTime", n.first_seen), ("prov:endTime", n.last_seen)):
                if ns is not None:
                    record[field] = _time(ns)
            section = "activity"
        else:
            section = "entity"
        types[n.id] = section
        doc.setdefault(section, {})[_qn(n.id)] = record
    for e in graph.edges:
        section, record = _relation(e, types.get(e.source, "entity"), types.get(e.target, "entity"))
        record.update(_evidence(e))
        doc.setdefault(section, {})[_qn(e.id)] = record
    return doc


def _relation(e: GraphEdge, src: str, dst: str) -> tuple[str, dict[str, Any]]:
    s, t = _qn(e.source), _qn(e.target)
    rel = e.relation
    if rel == "invoked" and src == "agent" and dst == "activity":
        return "wasAssociatedWith", {"prov:activity": t, "prov:agent": s}
    if rel == "delegated_to" and src == dst == "agent":
        return "actedOnBehalfOf", {"prov:delegate": t, "prov:responsible": s}
    if rel == "spawned" and src == dst == "activity":
        return "wasStartedBy", {"prov:activity": t, "prov:starter": s}
    if rel == "child_of" and src == dst == "activity":
        return "wasInformedBy", {"prov:informed": s, "prov:informant": t}
    if rel in _USED and src == "activity" and dst == "entity":
        return "used", {"prov:activity": s, "prov:entity": t}
    if rel in _GENERATED and src == "activity" and dst == "entity":
        return "wasGeneratedBy", {"prov:entity": t, "prov:activity": s}
    if rel == "deleted" and src == "activity" and dst == "entity":
        return "wasInvalidatedBy", {"prov:entity": t, "prov:activity": s}
    return "wasInfluencedBy", {"prov:influencee": t, "prov:influencer": s}
