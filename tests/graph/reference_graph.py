"""A deliberately naive graph accumulator: the documented rules of
:mod:`otel_bridge.graph.accumulator`, written as plainly as possible (dicts and sets per
element, every total counted directly, every facts sighting kept and merged at the end), so
property tests can check the optimized accumulator against it byte for byte.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec

from otel_bridge.grading import Flag, grade_edge
from otel_bridge.graph.document import FORMAT, VERSION
from otel_bridge.graph.summary import summarize
from otel_bridge.identity import process_key, process_label
from otel_bridge.jsonl import value_to_json
from otel_bridge.model import Attribution, CoverageRecord, Entity, Facts, Observation, ProcessFacts
from otel_bridge.stamping import EARLIEST_TIME

Element = tuple[str, object]
"""("node", id) or ("edge", (source, relation, target))."""


@dataclass
class _Element:
    kind: str = ""
    label: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    first: int | None = None
    last: int | None = None
    channels: set[str] = field(default_factory=set)
    backends: set[str] = field(default_factory=set)
    logical: int = 0
    evidence: int = 0
    # edges only
    flags: dict[str, set[bool]] = field(default_factory=dict)
    attributions: set[Attribution] = field(default_factory=set)
    methods: set[str] = field(default_factory=set)
    score: float | None = None
    derived: set[str] = field(default_factory=set)
    support: list[str] | None = None
    # nodes only: every stable key stated, in order; every facts sighting with its stamp
    keys: list[str] = field(default_factory=list)
    facts: list[tuple[tuple[int, str, int], Facts]] = field(default_factory=list)


def _merge_attrs(into: dict[str, Any], new: Any) -> None:
    for key, value in new.items():
        if key not in into:
            into[key] = value_to_json(value)


def _key(keys: list[str]) -> str:
    """The most informative key: any key beats none, fewer "?" parts beat more, then the first."""
    best = ""
    for key in keys:
        if not key:
            continue
        if not best or key.split(":").count("?") < best.split(":").count("?"):
            best = key
    return best


def _merged(sightings: list[tuple[tuple[int, str, int], Facts]]) -> Facts | None:
    """Per field, the latest non-None value by (time, observation id, application order), among
    the records of the latest record's type."""
    if not sightings:
        return None
    ordered = sorted(sightings, key=lambda s: s[0])
    cls = type(ordered[-1][1])
    fields: dict[str, Any] = {}
    for _, facts in ordered:
        if type(facts) is cls:
            for name in facts.__struct_fields__:
                if getattr(facts, name) is not None:
                    fields[name] = getattr(facts, name)
    return cls(**fields)


def _node_view(n: _Element) -> tuple[str, str, Any]:
    """Key, label and facts (as JSON) of a node. A process that stated several distinct facts
    records (it exec'd) is keyed and labelled by its merged facts: what it executed last."""
    merged = _merged(n.facts)
    key, label = _key(n.keys), n.label
    distinct: list[Facts] = []
    for _, facts in n.facts:
        if facts not in distinct:
            distinct.append(facts)
    if isinstance(merged, ProcessFacts) and len(distinct) > 1:
        key = process_key(merged.executable_path, merged.argv) or ""
        label = process_label(merged) or label
    return key, label, msgspec.to_builtins(merged)


def _flag(seen: set[bool]) -> Flag:
    if not seen:
        return None
    if len(seen) == 2:
        return "mixed"
    return next(iter(seen))


class ReferenceGraph:
    """The accumulator's rules, naively (same constructor and ``to_dict``)."""

    def __init__(
        self,
        *,
        retain_support: bool = False,
        support_limit: int = 1000,
        occurrence_window: int = 200_000,
        run: dict[str, Any] | None = None,
    ) -> None:
        self.retain_support = retain_support
        self.support_limit = support_limit
        self.half = max(1, occurrence_window // 2)
        self.run = dict(run or {})
        self.nodes: dict[str, _Element] = {}
        self.edges: dict[tuple[str, str, str], _Element] = {}
        self.current: dict[str, set[Element]] = {}
        self.previous: dict[str, set[Element]] = {}
        self.coverage: Counter[str] = Counter()
        self.coverage_by_channel: Counter[str] = Counter()
        self.observations = 0
        self.sightings = 0

    def apply_many(self, observations: list[Observation]) -> None:
        """Apply observations in order."""
        for o in observations:
            self.apply(o)

    def apply_coverage(self, records: list[CoverageRecord]) -> None:
        """Count coverage records."""
        for record in records:
            self.coverage[record.reason] += 1
            self.coverage_by_channel[record.source.channel.value] += 1

    def _node(self, entity: Entity, o: Observation) -> _Element:
        node = self.nodes.get(entity.id)
        if node is None:
            node = self.nodes[entity.id] = _Element(kind=entity.kind.value, label=entity.label)
        elif not node.label:
            node.label = entity.label  # the first non-empty label
        _merge_attrs(node.attrs, entity.attrs)
        node.keys.append(entity.key)
        self.sightings += 1
        if entity.facts is not None:
            node.facts.append(((o.time_unix_nano, o.id, self.sightings), entity.facts))
        return node

    def apply(self, o: Observation) -> None:
        """Apply one observation."""
        self.observations += 1
        t, te = o.time_unix_nano, o.end_time_unix_nano or o.time_unix_nano
        touched: dict[Element, _Element] = {("node", o.subject.id): self._node(o.subject, o)}
        if o.object is not None and o.relation is not None:
            touched[("node", o.object.id)] = self._node(o.object, o)
            key = (o.subject.id, o.relation.value, o.object.id)
            edge = self.edges.get(key)
            if edge is None:
                edge = self.edges[key] = _Element()
            _merge_attrs(edge.attrs, o.attrs)
            if edge.first is not None and 0 < t < edge.first:
                # earlier than the edge's first time: its earliest time is this observation's
                if EARLIEST_TIME in o.attrs:
                    edge.attrs[EARLIEST_TIME] = o.attrs[EARLIEST_TIME]
                else:
                    edge.attrs.pop(EARLIEST_TIME, None)
            ev = o.evidence
            for name in ("causal", "inferred", "identity_exact"):
                value = getattr(ev, name)
                edge.flags.setdefault(name, set())
                if value is not None:
                    edge.flags[name].add(value)
            if ev.attribution is not None:
                edge.attributions.add(ev.attribution)
            if ev.method is not None:
                edge.methods.add(ev.method)
            if ev.score is not None and (edge.score is None or ev.score > edge.score):
                edge.score = ev.score
            edge.derived.update(ev.support)
            if self.retain_support:
                # the first id is always kept (so a limit of 0 still lists one), then up to
                # support_limit
                if edge.support is None:
                    edge.support = [o.id]
                elif len(edge.support) < self.support_limit:
                    edge.support.append(o.id)
            touched[("edge", key)] = edge
        for element in touched.values():
            if t > 0 and (element.first is None or t < element.first):
                element.first = t
            if te > (element.last or 0):
                element.last = te
            element.channels.add(o.source.channel.value)
            element.backends.add(o.source.backend)
            element.evidence += 1
        self._count(o, touched)

    def _count(self, o: Observation, touched: dict[Element, _Element]) -> None:
        """Logical counts with the two-generation occurrence window."""
        if not o.occurrence:
            for element in touched.values():
                element.logical += 1
            return
        seen = self.current.get(o.occurrence)
        if seen is None and o.occurrence in self.previous:
            seen = self.current[o.occurrence] = set(self.previous[o.occurrence])
        if seen is None:
            self.current[o.occurrence] = set(touched)
            for element in touched.values():
                element.logical += 1
            grew = True
        else:
            new = [key for key in touched if key not in seen]
            for key in new:
                touched[key].logical += 1
            seen.update(new)
            # The window is checked after a new occurrence, and also after an entity
            # observation adds its node to a known one (the accumulator's exact rotation points).
            grew = bool(new) and o.object is None
        if grew and len(self.current) >= self.half:
            self.previous, self.current = self.current, {}

    def to_dict(self) -> dict[str, Any]:
        """The ``graph.json`` document."""
        nodes = [
            {
                "id": node_id,
                "kind": n.kind,
                "label": view[1],
                "key": view[0],
                "facts": view[2],
                "channels": sorted(n.channels),
                "backends": sorted(n.backends),
                "attrs": dict(n.attrs),
                "first_seen": n.first,
                "last_seen": n.last or None,
                "logical_count": n.logical,
                "evidence_count": n.evidence,
            }
            for node_id, n in sorted(self.nodes.items())
            for view in (_node_view(n),)
        ]
        edges = []
        for (source, relation, target), e in sorted(self.edges.items()):
            causal, inferred = _flag(e.flags["causal"]), _flag(e.flags["inferred"])
            digest = hashlib.blake2b(f"{source}\0{relation}\0{target}".encode(), digest_size=8)
            methods = sorted(e.methods)
            edges.append(
                {
                    "id": f"e-{digest.hexdigest()}",
                    "source": source,
                    "target": target,
                    "relation": relation,
                    "channels": sorted(e.channels),
                    "backends": sorted(e.backends),
                    "causal": causal,
                    "inferred": inferred,
                    "identity_exact": _flag(e.flags["identity_exact"]),
                    "attribution": sorted(a.value for a in e.attributions),
                    "method": None if not methods else methods[0] if len(methods) == 1 else methods,
                    "score": e.score,
                    # grade_edge only asks whether some method was recorded
                    "grade": grade_edge(
                        frozenset(e.attributions), causal, inferred, "method" if methods else None
                    ).value,
                    "support": None if e.support is None else sorted(e.support),
                    "derived_support": sorted(e.derived),
                    "attrs": dict(e.attrs),
                    "first_seen": e.first,
                    "last_seen": e.last or None,
                    "logical_count": e.logical,
                    "evidence_count": e.evidence,
                }
            )
        return {
            "format": FORMAT,
            "version": VERSION,
            "run": dict(self.run),
            "nodes": nodes,
            "edges": edges,
            "summary": summarize(
                nodes, edges, self.coverage, self.coverage_by_channel, self.observations
            ),
        }
