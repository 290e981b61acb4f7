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
An occurrence seen through one relation is remembered as just its edge (which implies both end
nodes), so the window costs one dictionary entry per occurrence, about 100 bytes.

For speed the per-edge evidence flags are packed into one integer per edge (two bits per
Boolean flag: "seen true", "seen false"; one bit per attribution mode and per channel), so an
observation costs a few dictionary look-ups and integer ORs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from otel_bridge.graph._elements import (
    _CHANNEL_BIT,
    _CHANNEL_LISTS,
    _CHANNEL_MASK,
    _EDGE_KEY,
    _NEVER,
    _NODE_KEY,
    _Classified,
    _classify,
    _Edge,
    _evidence_bits,
    _extras,
    _merge,
    _merge_attrs,
    _Node,
    gc_paused,
)
from otel_bridge.graph.document import FORMAT, VERSION, Graph
from otel_bridge.graph.summary import Summary
from otel_bridge.model import (
    CoverageRecord,
    Evidence,
    Observation,
    RelationKind,
)

_RELATION_VALUE: dict[RelationKind | None, str] = {r: r.value for r in RelationKind}


_SOURCE_CACHE: dict[tuple[tuple[str, ...], int], tuple[tuple[str, ...], tuple[str, ...]]] = {}
"""(backend names, mask) -> (channels, backends): shared tuples across snapshots."""
_GRADE_CACHE: dict[tuple[int, bool], _Classified] = {}
"""(evidence bits, has method) -> classification; bounded by the bit patterns that exist."""


def _expand(seen: object) -> tuple[object, ...]:
    """The elements an occurrence already counted: an edge stands for itself and its ends."""
    if isinstance(seen, _Edge):
        return (seen, seen.snode, seen.tnode)
    assert isinstance(seen, tuple)
    return seen


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
        self._occ: dict[str, object] = {}
        self._occ_old: dict[str, object] = {}
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
        self._apply((observation,))

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
        # One-entry memos: consecutive observations usually share the source's channel and
        # backend, the evidence object and the subject node.
        last_channel: object = None
        last_backend: object = None
        sbits = 0
        last_ev: object = None
        ev_bits, ev_extras = 0, False
        last_sid = ""
        sn = None
        for o in observations:
            t = o.time_unix_nano
            te = o.end_time_unix_nano or t
            src = o.source
            if src.backend is not last_backend or src.channel is not last_channel:
                last_channel, last_backend = src.channel, src.backend
                # channels in bits 0-3, backends from bit 4 on: one OR per element.
                sbits = channel_bit[src.channel] | (
                    backend_bit.get(src.backend) or self._intern_backend(src.backend)
                )
            s = o.subject
            sid = s.id
            if sid != last_sid or sn is None:
                sn = nodes.get(sid)
                last_sid = sid
            if sn is None:
                sn = nodes[sid] = new_node(s)
            elif s.attrs is not sn.seen_attrs:
                sn.seen_attrs = s.attrs
                if not sn.keys.issuperset(s.attrs) or not sn.label:
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
                elif sn not in _expand(seen):
                    occ[occurrence] = (*_expand(seen), sn)
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
                if not on.keys.issuperset(ob.attrs) or not on.label:
                    _merge(on, ob)
            if 0 < t < on.first:
                on.first = t
            if te > on.last:  # noqa: PLR1730 - hot path, cheaper than max()
                on.last = te
            on.sources |= sbits
            if on is not sn:  # a self-loop mentions its node once
                on.evidence += 1
            rel = o.relation
            e = on.in_edge
            if e is None or on.in_source is not sn or on.in_relation is not rel:
                key = (sid, rel, ob.id)
                e = edges.get(key)
                if e is None:
                    e = edges[key] = _Edge(o, _RELATION_VALUE[rel], sn, on)
                on.in_edge, on.in_source, on.in_relation = e, sn, rel
            if o.attrs is not e.seen_attrs:
                e.seen_attrs = o.attrs
                if not e.keys.issuperset(o.attrs):
                    _merge_attrs(e.attrs, o.attrs)
                    e.keys = frozenset(e.attrs)
            if 0 < t < e.first:
                e.first = t
            if te > e.last:  # noqa: PLR1730 - hot path, cheaper than max()
                e.last = te
            e.sources |= sbits
            e.evidence += 1
            ev = o.evidence
            if ev is not last_ev:
                hit = ev_cache.get(id(ev))
                if hit is None or hit[0] is not ev:
                    hit = self._cache_evidence(ev)
                last_ev, ev_bits, ev_extras = ev, hit[1], hit[2]
            e.bits |= ev_bits
            if ev_extras:
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
                seen = old.get(occurrence)
                if seen is not None:
                    occ[occurrence] = seen
            if seen is None:
                # The edge alone stands for (edge, source node, target node): no tuple needed.
                occ[occurrence] = e
                sn.logical += 1
                e.logical += 1
                if on is not sn:
                    on.logical += 1
                if len(occ) >= half:
                    old, occ = occ, self._rotate()
                continue
            if seen is e:
                continue
            grown = _expand(seen)
            seen = grown
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

    def _recall(self, occurrence: str) -> object | None:
        """An occurrence from the previous generation, promoted to the current one."""
        seen = self._occ_old.get(occurrence)
        if seen is not None:
            self._occ[occurrence] = seen
        return seen

    def _rotate(self) -> dict[str, object]:
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
        # The caches live at module level: once the collector has seen their tuples they are
        # untracked, and snapshot dicts holding only untracked values stay out of the cyclic
        # garbage collector altogether, which is most of the cost of a large snapshot.
        sources: dict[int, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        names = tuple(self._backend_names)

        def split(mask: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
            pair = _SOURCE_CACHE.get((names, mask))
            if pair is None:
                backends = tuple(sorted(n for i, n in enumerate(names) if mask >> (4 + i) & 1))
                pair = (_CHANNEL_LISTS[mask & _CHANNEL_MASK], backends)
                if len(_SOURCE_CACHE) > 4096:
                    _SOURCE_CACHE.clear()
                _SOURCE_CACHE[(names, mask)] = pair
            sources[mask] = pair
            return pair

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
        grades = _GRADE_CACHE
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
