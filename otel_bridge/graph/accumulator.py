"""Incremental materialization of the evidence graph (ExecWeave sections IV-B and V-F).

:class:`GraphAccumulator` applies observations one at a time to an **entity-relation** graph: one
node per entity id, one edge per ``(source, relation, target)`` — not a node per event.

* Nodes keep ``first_seen``/``last_seen`` (ns; an observation's end time counts for
  ``last_seen``), the channels and backends that reported them, display ``attrs`` and ``label``
  with **first-available** values (a key keeps the first value any observation gave it, so a
  fixed input order is needed for reproducible attributes when observations disagree),
  ``logical_count`` (distinct occurrences mentioning the node) and ``evidence_count``
  (observations mentioning it).
* Edges keep the same, plus the Boolean aggregation of ``causal``, ``inferred`` and
  ``identity_exact``: only explicit ``True`` -> ``True``, only ``False`` -> ``False``, both ->
  ``"mixed"``, none -> ``None`` (an omitted flag is ignored, never read as ``False``); the
  sorted set of attribution modes; the recorded methods (one string, or a sorted list when
  several differ); ``score`` = the **maximum** score seen; ``grade`` from
  :func:`otel_bridge.grading.grade_edge`; ``viewer_only`` true only when every supporting
  observation was viewer-only; ``derived_support`` = the union of the ``evidence.support`` ids of
  derived observations; and, when ``retain_support`` is on, ``support`` = ids of the observations
  applied to the edge (at most ``support_limit`` per edge; ``evidence_count`` keeps the total).

**Bounded de-duplication.** Logical counts need to know whether an occurrence was already
counted for an element. The accumulator remembers occurrences in two generations of at most
``occurrence_window // 2`` entries each: when the current generation fills up, the previous one
is dropped. Every occurrence among the most recent ``occurrence_window // 2`` distinct ones is
de-duplicated exactly; a replay of an older, forgotten occurrence is counted again, so a
logical count can only err upwards, never lose an occurrence, and evidence counts are exact.

For speed the per-edge evidence flags are packed into one integer per edge (two bits per
Boolean flag: "seen true", "seen false"; one bit per attribution mode and per channel), so an
observation costs a few dictionary look-ups and integer ORs.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import operator
from collections import Counter
from collections.abc import Iterator
from typing import Any

from otel_bridge.grading import Flag, grade_edge
from otel_bridge.graph.document import FORMAT, VERSION, Graph
from otel_bridge.graph.summary import Summary
from otel_bridge.jsonl import value_to_json
from otel_bridge.model import (
    Attributes,
    Attribution,
    Channel,
    CoverageRecord,
    Entity,
    Evidence,
    Grade,
    Observation,
    RelationKind,
)

_CHANNELS: tuple[Channel, ...] = tuple(Channel)
_CHANNEL_BIT = {c: 1 << i for i, c in enumerate(_CHANNELS)}
_CHANNEL_LISTS = tuple(
    tuple(sorted(c.value for c in _CHANNELS if m & _CHANNEL_BIT[c])) for m in range(16)
)
_NEVER = 1 << 63
"""``first_seen`` of an element no timed observation reached yet."""
_CHANNEL_MASK = 0b1111
_ATTRIBUTIONS: tuple[Attribution, ...] = tuple(Attribution)
# Packed evidence bits of one edge: causal (0,1), inferred (2,3), identity_exact (4,5),
# native/viewer-only (6,7), attribution modes (8...).
_NATIVE, _VIEWER = 1 << 6, 1 << 7
_ATTR_SHIFT = 8
_ATTR_BIT = {a: 1 << (_ATTR_SHIFT + i) for i, a in enumerate(_ATTRIBUTIONS)}
_FLAG: dict[int, Flag] = {0: None, 1: True, 2: False, 3: "mixed"}


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a burst of allocation.

    Applying or snapshotting creates tens of thousands of acyclic objects; each would count
    towards a collection that then traverses every live object of the process. Reference
    counting still frees everything; the collector resumes (if it was on) when the block ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _bits(flag: bool | None, shift: int) -> int:
    if flag is None:
        return 0
    return (1 if flag else 2) << shift


def _evidence_bits(ev: Evidence) -> int:
    bits = _bits(ev.causal, 0) | _bits(ev.inferred, 2) | _bits(ev.identity_exact, 4)
    bits |= _VIEWER if ev.viewer_only else _NATIVE
    if ev.attribution is not None:
        bits |= _ATTR_BIT[ev.attribution]
    return bits


class _Node:
    __slots__ = (
        "attrs",
        "evidence",
        "first",
        "id",
        "kind",
        "label",
        "last",
        "logical",
        "seen_attrs",
        "sources",
    )

    def __init__(self, entity: Entity) -> None:
        self.id = entity.id
        self.kind = entity.kind.value
        self.label = entity.label
        self.attrs: dict[str, Any] = {k: value_to_json(v) for k, v in entity.attrs.items()}
        self.seen_attrs: object = entity.attrs
        self.first = _NEVER
        self.last = 0
        self.sources = 0
        self.logical = 0
        self.evidence = 0


class _Edge:
    __slots__ = (
        "attrs",
        "bits",
        "derived",
        "evidence",
        "first",
        "id",
        "last",
        "logical",
        "methods",
        "relation",
        "score",
        "seen_attrs",
        "source",
        "sources",
        "support",
        "target",
    )

    def __init__(self, source: str, relation: str, target: str, obs: Observation) -> None:
        self.source = source
        self.relation = relation
        self.target = target
        digest = hashlib.blake2b(f"{source}\0{relation}\0{target}".encode(), digest_size=8)
        self.id = f"e-{digest.hexdigest()}"
        self.attrs: dict[str, Any] = {k: value_to_json(v) for k, v in obs.attrs.items()}
        self.seen_attrs: object = obs.attrs
        self.first = _NEVER
        self.last = 0
        self.sources = 0
        self.logical = 0
        self.evidence = 0
        self.bits = 0
        self.methods: set[str] | None = None
        self.score: float | None = None
        self.derived: set[str] | None = None
        self.support: list[str] | None = None


class GraphAccumulator:
    """Builds the graph incrementally; :meth:`to_dict` gives the deterministic snapshot.

    Not thread-safe: callers that apply from several threads hold a lock (the ``graph``
    exporter does).
    """

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
        self.run: dict[str, Any] = dict(run or {})
        self._half = max(1, occurrence_window // 2)
        self._nodes: dict[str, _Node] = {}
        self._edges: dict[tuple[str, RelationKind | None, str], _Edge] = {}
        self._occ: dict[str, tuple[object, ...]] = {}
        self._occ_old: dict[str, tuple[object, ...]] = {}
        self._backend_bit: dict[str, int] = {}
        self._backend_names: list[str] = []
        self._ev_cache: dict[int, tuple[Evidence, int, bool]] = {}
        self._coverage: Counter[str] = Counter()
        self._coverage_by_channel: Counter[str] = Counter()
        self.observations = 0

    def __len__(self) -> int:
        return len(self._nodes) + len(self._edges)

    @property
    def node_count(self) -> int:
        """Number of nodes."""
        return len(self._nodes)

    @property
    def edge_count(self) -> int:
        """Number of edges."""
        return len(self._edges)

    def apply(self, observation: Observation) -> None:
        """Apply one observation."""
        self.apply_many((observation,))

    def apply_coverage(self, records: tuple[CoverageRecord, ...] | list[CoverageRecord]) -> None:
        """Count coverage records by reason and channel (summarized in the snapshot)."""
        for record in records:
            self._coverage[record.reason] += 1
            self._coverage_by_channel[record.source.channel.value] += 1

    def apply_many(self, observations: tuple[Observation, ...] | list[Observation]) -> None:
        """Apply observations in order. The hot path: keep it free of per-event allocation."""
        with gc_paused():
            self._apply(observations)

    def _apply(self, observations: tuple[Observation, ...] | list[Observation]) -> None:
        nodes, edges = self._nodes, self._edges
        occ, channel_bit, backend_bit = self._occ, _CHANNEL_BIT, self._backend_bit
        ev_cache, retain = self._ev_cache, self.retain_support
        old, half = self._occ_old, self._half
        new_node = _Node
        for o in observations:
            t = o.time_unix_nano
            te = o.end_time_unix_nano or t
            src = o.source
            # channels in bits 0-3, backends from bit 4 on: one OR per element.
            sbits = channel_bit[src.channel] | (
                backend_bit.get(src.backend) or self._intern_backend(src.backend)
            )
            s = o.subject
            sn = nodes.get(s.id)
            if sn is None:
                sn = nodes[s.id] = new_node(s)
            elif s.attrs is not sn.seen_attrs:
                sn.seen_attrs = s.attrs
                if not sn.attrs.keys() >= s.attrs.keys() or not sn.label:
                    _merge(sn, s)
            if 0 < t < sn.first:
                sn.first = t
            if te > sn.last:  # noqa: PLR1730 - hot path, cheaper than max()
                sn.last = te
            sn.sources |= sbits
            sn.evidence += 1
            ob = o.object
            occurrence = o.occurrence
            if ob is None:
                if not occurrence:
                    sn.logical += 1
                    continue
                seen = occ.get(occurrence)
                if seen is None and old:
                    seen = self._recall(occurrence)
                if seen is None:
                    occ[occurrence] = (sn,)
                    sn.logical += 1
                elif sn not in seen:
                    occ[occurrence] = (*seen, sn)
                    sn.logical += 1
                else:
                    continue
                if len(occ) >= half:
                    old, occ = occ, self._rotate()
                continue
            on = nodes.get(ob.id)
            if on is None:
                on = nodes[ob.id] = new_node(ob)
            elif ob.attrs is not on.seen_attrs:
                on.seen_attrs = ob.attrs
                if not on.attrs.keys() >= ob.attrs.keys() or not on.label:
                    _merge(on, ob)
            if 0 < t < on.first:
                on.first = t
            if te > on.last:  # noqa: PLR1730 - hot path, cheaper than max()
                on.last = te
            on.sources |= sbits
            if on is not sn:  # a self-loop mentions its node once
                on.evidence += 1
            key = (s.id, o.relation, ob.id)
            e = edges.get(key)
            if e is None:
                e = edges[key] = _Edge(s.id, str(o.relation), ob.id, o)
            elif o.attrs is not e.seen_attrs:
                e.seen_attrs = o.attrs
                if not e.attrs.keys() >= o.attrs.keys():
                    _merge_attrs(e.attrs, o.attrs)
            if 0 < t < e.first:
                e.first = t
            if te > e.last:  # noqa: PLR1730 - hot path, cheaper than max()
                e.last = te
            e.sources |= sbits
            e.evidence += 1
            ev = o.evidence
            hit = ev_cache.get(id(ev))
            if hit is None or hit[0] is not ev:
                hit = self._cache_evidence(ev)
            e.bits |= hit[1]
            if hit[2]:
                _extras(e, ev)
            if retain:
                sup = e.support
                if sup is None:
                    e.support = [o.id]
                elif len(sup) < self.support_limit:
                    sup.append(o.id)
            if not occurrence:
                sn.logical += 1
                e.logical += 1
                if on is not sn:
                    on.logical += 1
                continue
            seen = occ.get(occurrence)
            if seen is None and old:
                seen = self._recall(occurrence)
            if seen is None:
                occ[occurrence] = (sn, on, e)
                sn.logical += 1
                e.logical += 1
                if on is not sn:
                    on.logical += 1
                if len(occ) >= half:
                    old, occ = occ, self._rotate()
                continue
            grown = seen
            if sn not in grown:
                sn.logical += 1
                grown = (*grown, sn)
            if on not in grown:
                on.logical += 1
                grown = (*grown, on)
            if e not in grown:
                e.logical += 1
                grown = (*grown, e)
            if grown is not seen:
                occ[occurrence] = grown
        self.observations += len(observations)

    def _recall(self, occurrence: str) -> tuple[object, ...] | None:
        """An occurrence from the previous generation, promoted to the current one."""
        seen = self._occ_old.get(occurrence)
        if seen is not None:
            self._occ[occurrence] = seen
        return seen

    def _rotate(self) -> dict[str, tuple[object, ...]]:
        self._occ_old = self._occ
        self._occ = {}
        return self._occ

    def _intern_backend(self, backend: str) -> int:
        bit = 1 << (4 + len(self._backend_names))
        self._backend_names.append(backend)
        self._backend_bit[backend] = bit
        return bit

    def _cache_evidence(self, ev: Evidence) -> tuple[Evidence, int, bool]:
        extras = ev.method is not None or ev.score is not None or bool(ev.support)
        hit = (ev, _evidence_bits(ev), extras)
        if len(self._ev_cache) > 4096:
            self._ev_cache.clear()
        self._ev_cache[id(ev)] = hit
        return hit

    def graph(self) -> Graph:
        """The snapshot as a typed :class:`Graph`."""
        return Graph.from_dict(self.to_dict(), validate=False)

    # -- snapshot -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The deterministic ``graph.json`` document (DESIGN.md section 6) as a dict."""
        with gc_paused():
            return self._to_dict()

    def _to_dict(self) -> dict[str, Any]:
        # Per-mask and per-evidence results are computed once and shared (tuples are immutable).
        sources: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        names = self._backend_names

        def split(mask: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
            backends = tuple(sorted(n for i, n in enumerate(names) if mask >> (4 + i) & 1))
            sources[mask] = (_CHANNEL_LISTS[mask & _CHANNEL_MASK], backends)
            return sources[mask]

        ordered_nodes = sorted(self._nodes.values(), key=_NODE_KEY)
        nodes: list[dict[str, Any]] = []
        append = nodes.append
        for n in ordered_nodes:
            channels, backends = sources.get(n.sources) or split(n.sources)
            append(
                {
                    "id": n.id,
                    "kind": n.kind,
                    "label": n.label,
                    "channels": channels,
                    "backends": backends,
                    "attrs": dict(n.attrs),
                    "first_seen": n.first if n.first != _NEVER else None,
                    "last_seen": n.last or None,
                    "logical_count": n.logical,
                    "evidence_count": n.evidence,
                }
            )
        grades: dict[tuple[int, bool], _Classified] = {}
        ordered_edges = sorted(self._edges.values(), key=_EDGE_KEY)
        edges: list[dict[str, Any]] = []
        append = edges.append
        for e in ordered_edges:
            methods = e.methods
            gkey = (e.bits, bool(methods))
            grade, causal, inferred, exact, attributions, viewer_only = grades.get(
                gkey
            ) or grades.setdefault(gkey, _classify(*gkey))
            method: str | list[str] | None = None
            if methods:
                method = sorted(methods) if len(methods) > 1 else next(iter(methods))
            channels, backends = sources.get(e.sources) or split(e.sources)
            append(
                {
                    "id": e.id,
                    "source": e.source,
                    "target": e.target,
                    "relation": e.relation,
                    "channels": channels,
                    "backends": backends,
                    "causal": causal,
                    "inferred": inferred,
                    "identity_exact": exact,
                    "attribution": attributions,
                    "method": method,
                    "score": e.score,
                    "grade": grade,
                    "support": sorted(e.support) if e.support is not None else None,
                    "derived_support": sorted(e.derived) if e.derived else (),
                    "viewer_only": viewer_only,
                    "attrs": dict(e.attrs),
                    "first_seen": e.first if e.first != _NEVER else None,
                    "last_seen": e.last or None,
                    "logical_count": e.logical,
                    "evidence_count": e.evidence,
                }
            )
        summary = Summary()
        summary.count_nodes(ordered_nodes, sources)
        summary.count_edges(ordered_edges, sources, grades)
        return {
            "format": FORMAT,
            "version": VERSION,
            "run": dict(self.run),
            "nodes": nodes,
            "edges": edges,
            "summary": summary.to_dict(
                self._coverage, self._coverage_by_channel, self.observations
            ),
        }


_NODE_KEY = operator.attrgetter("id")
_EDGE_KEY = operator.attrgetter("source", "relation", "target")
_Classified = tuple[str, Flag, Flag, Flag, tuple[str, ...], bool]


def _merge(node: _Node, entity: Entity) -> None:
    if not node.label and entity.label:
        node.label = entity.label
    _merge_attrs(node.attrs, entity.attrs)


def _merge_attrs(attrs: dict[str, Any], new: Attributes) -> None:
    for k, v in new.items():
        if k not in attrs:
            attrs[k] = value_to_json(v)


def _extras(e: _Edge, ev: Evidence) -> None:
    if ev.method is not None:
        if e.methods is None:
            e.methods = set()
        e.methods.add(ev.method)
    if ev.score is not None and (e.score is None or ev.score > e.score):
        e.score = ev.score
    if ev.support:
        if e.derived is None:
            e.derived = set()
        e.derived.update(ev.support)


def _classify(bits: int, has_method: bool) -> _Classified:
    causal, inferred, exact = _FLAG[bits & 3], _FLAG[bits >> 2 & 3], _FLAG[bits >> 4 & 3]
    modes = frozenset(a for a in _ATTRIBUTIONS if bits & _ATTR_BIT[a])
    # grade_edge only asks whether some method was recorded.
    grade: Grade = grade_edge(modes, causal, inferred, "method" if has_method else None)
    viewer_only = bool(bits & _VIEWER) and not bits & _NATIVE
    return grade.value, causal, inferred, exact, tuple(sorted(a.value for a in modes)), viewer_only
