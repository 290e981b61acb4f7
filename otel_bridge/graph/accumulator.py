"""Incremental materialization of the evidence graph (ExecWeave sections IV-B and V-F).

:class:`GraphAccumulator` applies observations one at a time to an **entity-relation** graph: one
node per entity id, one edge per ``(source, relation, target)`` — not a node per event.

* Nodes keep ``first_seen``/``last_seen`` (ns; an observation's end time counts for
  ``last_seen``), the channels and backends that reported them, display ``attrs`` and ``label``
  with **first-available** values (a key keeps the first value any observation gave it, so a
  fixed input order is needed for reproducible attributes when observations disagree),
  ``logical_count`` (distinct occurrences mentioning the node) and ``evidence_count``
  (observations mentioning it).
* Nodes also keep ``key``, the entity's stable key: when sightings state different keys the
  most informative one wins (any key beats none; fewer ``?`` parts beat more), ties keep the
  first seen; and ``facts``, the typed facts merged **per field** over every sighting: a field
  takes its latest non-None value by observation time, ties broken by observation id (then by
  application order), so the exit code of an exit event and the argv of an exec both land. The
  merge is independent of input order when stamps differ; it runs at snapshot time.
* Edges keep the same, plus the Boolean aggregation of ``causal``, ``inferred`` and
  ``identity_exact``: only explicit ``True`` -> ``True``, only ``False`` -> ``False``, both ->
  ``"mixed"``, none -> ``None`` (an omitted flag is ignored, never read as ``False``); the
  sorted set of attribution modes; the recorded methods (one string, or a sorted list when
  several differ); ``score`` = the **maximum** score seen; ``grade`` from
  :func:`otel_bridge.grading.grade_edge`; ``derived_support`` = the union of the
  ``evidence.support`` ids of derived observations; and, when ``retain_support`` is on,
  ``support`` = ids of the observations applied to the edge (at most ``support_limit`` per
  edge; ``evidence_count`` keeps the total).

**Bounded de-duplication.** Logical counts need to know whether an occurrence was already
counted for an element. The accumulator remembers occurrences in two generations of at most
``occurrence_window // 2`` entries each: when the current generation fills up, the previous one
is dropped. Every occurrence among the most recent ``occurrence_window // 2`` distinct ones is
de-duplicated exactly; a replay of an older, forgotten occurrence is counted again, so a
logical count can only err upwards, never lose an occurrence, and evidence counts are exact:
every observation applied counts (the ``graph`` exporter applies a copy of an observation once,
``otel_bridge.exporters.graph.redelivery``).
An occurrence seen through one relation is remembered as just its edge (which implies both end
nodes), so the window costs one dictionary entry per occurrence, about 100 bytes.

**Performance.** Nodes and edges are rows of parallel lists (:mod:`._elements`), addressed by
interned integers; an occurrence remembers the integer of its edge. A relation observation
updates only its edge (first/last seen, one OR of packed evidence and source bits, counts);
node totals are the node's own observations plus its incident edges, added up when a snapshot
is taken (:mod:`._snapshot`), with a per-node correction for occurrences that reach a node
through several edges. Stable edge ids (a hash) are computed on the first snapshot that needs
them. A repeated event costs a few list updates and dictionary look-ups, and the rows keep no
per-element object the cyclic garbage collector has to track (attribute mappings hold strings
and numbers, index keys are tuples of strings), so the collector's work does not grow with the
graph. A new node or edge copies nothing: its row holds the attribute mapping of the entity or
observation that added it (the model is immutable; values that are not already JSON are
converted into a copy), and a later merge replaces the row's mapping rather than changing it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from otel_bridge.gcpause import gc_paused
from otel_bridge.graph._elements import (
    BOTH,
    CHANNEL_BIT,
    EV_WIDTH,
    KIND_VALUE,
    LOGICAL,
    NEVER,
    PLAIN,
    REL_VALUE,
    Store,
    evidence_bits,
    json_attrs,
)
from otel_bridge.graph._snapshot import RowIndex, snapshot
from otel_bridge.graph.document import Graph
from otel_bridge.model import Channel, CoverageRecord, Entity, Evidence, Observation, Source

_Seen = int | tuple[int, ...]
"""What an occurrence already counted: an edge number (standing for the edge and both its
nodes), or a tuple of tags ``edge << 1`` and ``node << 1 | 1``."""


class GraphAccumulator:
    """Builds the graph incrementally; :meth:`to_dict` gives the deterministic snapshot.

    Not thread-safe: callers that apply from several threads hold a lock (the ``graph``
    exporter does). An observation applied must not be changed afterwards (the model is
    immutable): rows share the attribute mappings of the entities and observations that added
    them.
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
        self._store = Store()
        self._occ: dict[str, _Seen] = {}
        self._occ_old: dict[str, _Seen] = {}
        self._backend_bit: dict[str, int] = {}
        self._backend_names: list[str] = []
        self._ev_cache: dict[int, tuple[Evidence, int, bool]] = {}
        self._coverage: Counter[str] = Counter()
        self._coverage_by_channel: Counter[str] = Counter()
        self.observations = 0
        self._rows: RowIndex | None = None

    def __len__(self) -> int:
        return len(self._store.n_kind) + len(self._store.e_src)

    @property
    def node_count(self) -> int:
        """Number of nodes."""
        return len(self._store.n_kind)

    @property
    def edge_count(self) -> int:
        """Number of edges."""
        return len(self._store.e_src)

    def growth(self, observation: Observation) -> tuple[int, int]:
        """The nodes and edges applying ``observation`` would add, ``(0..2, 0..1)``; the
        ``graph`` exporter's bounds ask before they apply (``docs/exporters.md``)."""
        index = self._store.node_index
        sid = observation.subject.id
        ob = observation.object
        new_subject = sid not in index
        if ob is None:
            return int(new_subject), 0
        if not new_subject and (sid, observation.relation, ob.id) in self._store.edge_index:
            return 0, 0  # an edge implies both its end nodes
        return int(new_subject) + int(ob.id != sid and ob.id not in index), 1

    def apply(self, observation: Observation) -> None:
        """Apply one observation."""
        self.apply_many((observation,))

    def apply_coverage(self, records: tuple[CoverageRecord, ...] | list[CoverageRecord]) -> None:
        """Count coverage records by reason and channel (summarized in the snapshot)."""
        for record in records:
            self._coverage[record.reason] += 1
            self._coverage_by_channel[record.source.channel.value] += 1

    def apply_many(self, observations: tuple[Observation, ...] | list[Observation]) -> None:
        """Hot path: apply observations in order, one loop that inlines per observation the
        source and evidence bit look-ups (one-entry memos), the merge checks of the subject and
        object nodes (first-available label and attributes, stable key, typed facts: an equal
        facts record only moves its stamp), the edge look-up, first/last seen, evidence OR,
        counts and support ids, the node's own aggregates of entity observations, the
        occurrence window, and the rows of a new object node and a new edge (written out as
        ``Store.add_node`` writes them; a node's attribute key set is computed when first
        asked, ``Store.node_keys``). The subject's last merged entity is remembered across
        observations: a sighting of it, or of one equal to it field for field (one C-level
        comparison of two objects in cache), skips the merge checks and only moves the facts
        stamp. A node's held entity (``Store.n_ent``) does the same for any sighting of that
        very object that states facts. A sighting with no facts is checked against the node's
        shared key set and never reads the held entity, which is cold memory by the time an OS
        event states a file or process again; one with facts is compared with it
        (``Store.see``). A node's key set is interned by its attributes' key order the first
        time it is seen again (``Store.node_keys``, inline for an object).

        Everything else is a named method: a new subject node (``Store.add_node``), occurrences
        that reach several elements (:meth:`_regrow`), window rotation, key and facts offers
        (``Store.offer_*``); the node merge checks are written out once, readably, as
        ``Store.see``. An event on a known edge leaves no new object behind but its occurrence
        entry. The reference of
        this loop is the plain accumulator ``tests/graph/reference_graph.py``: the differential
        tests in ``tests/graph/test_graph_reference.py`` compare every snapshot with it, byte
        for byte, keys and facts included.
        """
        st = self._store
        node_index, n_ent, n_own, n_keys, unlabeled = (
            st.node_index,
            st.n_ent,
            st.n_own,
            st.n_keys,
            st.unlabeled,
        )
        n_key, n_facts, n_ft, n_fid, n_label = st.n_key, st.n_facts, st.n_ft, st.n_fid, st.n_label
        n_kind, n_attrs, key_tuples = st.n_kind, st.n_attrs, st.key_tuples
        edge_index, e_src, e_dst, e_attrs, e_keys = (
            st.edge_index,
            st.e_src,
            st.e_dst,
            st.e_attrs,
            st.e_keys,
        )
        e_first, e_last, e_mask, e_count = st.e_first, st.e_last, st.e_mask, st.e_count
        occ, old, half = self._occ, self._occ_old, self._half
        room = half - len(occ)
        retain, support, limit, both = self.retain_support, st.support, self.support_limit, BOTH
        # One-entry memos: consecutive observations usually share the source, the evidence
        # object and the subject node.
        last_backend: str | None = None
        last_channel: Channel | None = None
        nbits = 0  # source bits of a node
        mbits = 0  # evidence bits | source bits << EV_WIDTH, for an edge
        last_ev: Evidence | None = None
        ev_bits, extras, slow = 0, False, False
        # The subject's memo: ``s_ent`` is the entity object last merged into node ``si`` (or
        # one equal to it, field for field) as a subject; the object path forgets it when it
        # merges another entity into that node.
        s_ent: Entity | None = None
        s_f = False  # whether s_ent has facts
        sid = ""
        si = -1
        for o in observations:
            t = o.time_unix_nano
            te = o.end_time_unix_nano or t
            src = o.source
            if src.backend is not last_backend or src.channel is not last_channel:
                last_backend, last_channel = src.backend, src.channel
                nbits = self._source_bits(src)
                mbits = ev_bits | nbits << EV_WIDTH
            s = o.subject
            if s is not s_ent:
                if s.id == sid and s == s_ent:
                    s_ent = s  # equal to the one merged (every field): the stamp only
                else:  # another node, or another entity of it: Store.see, inline
                    sid = s.id
                    found = node_index.get(sid)
                    if found is None:
                        si = st.add_node(s, t, o.id)
                    else:
                        si = found
                        if s.facts is None:  # Store.see's checks, inline (held entity unread)
                            attrs = s.attrs
                            keys = n_keys[si]
                            if keys is None:
                                keys = st.node_keys(si)
                            if not keys.issuperset(attrs) or (s.label and si in unlabeled):
                                st.merge_node(si, s.label, attrs)
                            k = s.key
                            if k and k != n_key[si]:
                                st.offer_key(si, k)
                        else:
                            prev = n_ent[si]
                            if s is not prev:
                                n_ent[si] = s
                                if s != prev:
                                    st.merge_sighting(si, s, t, o.id)
                    s_ent, s_f = s, s.facts is not None
            if s_f:  # Store.stamp, inline
                ft = n_ft[si]
                if t > ft or (t == ft and o.id > n_fid[si]):
                    n_ft[si], n_fid[si] = t, o.id
            ob = o.object
            occurrence = o.occurrence
            if ob is None:  # an entity observation: the node's own aggregates
                own = n_own.get(si)
                if own is None:
                    own = n_own[si] = [NEVER, 0, 0, 0]
                if 0 < t < own[0]:
                    own[0] = t
                if te > own[1]:  # noqa: PLR1730 - hot path, cheaper than max()
                    own[1] = te
                own[2] |= nbits
                if not occurrence:
                    own[3] += both
                    continue
                seen = occ.get(occurrence)
                if seen is None and old:
                    seen = old.get(occurrence)
                    if seen is not None:
                        occ[occurrence] = seen
                        room -= 1
                tag = si << 1 | 1
                if seen is None:
                    occ[occurrence] = (tag,)
                    room -= 1
                    own[3] += both
                else:  # _expand, inline for a tuple (``type(x) is`` is a specialized call)
                    grown = seen if type(seen) is tuple else self._expand(seen)
                    if tag in grown:
                        own[3] += 1
                        continue
                    occ[occurrence] = (*grown, tag)
                    own[3] += both
                if room <= 0:
                    old, occ, room = occ, self._rotate(), half
                continue
            ev = o.evidence  # evidence matters for edges only
            if ev is not last_ev:
                last_ev, ev_bits, extras = self._evidence(ev)
                slow = extras or retain
                mbits = ev_bits | nbits << EV_WIDTH
            oid = ob.id
            ei = edge_index.get((sid, o.relation, oid))
            if ei is None:  # a new edge, and its object node when new
                oi = node_index.get(oid)
                if oi is None:  # Store.add_node, inline
                    oi = node_index[oid] = len(n_kind)
                    n_kind.append(KIND_VALUE[ob.kind])
                    n_label.append(ob.label)
                    if not ob.label:
                        unlabeled.add(oi)
                    attrs = ob.attrs  # plain_attrs(attrs), inline
                    for v in attrs.values():
                        if v.__class__ not in PLAIN:
                            attrs = json_attrs(attrs)
                            break
                    n_attrs.append(attrs)
                    n_keys.append(None)  # Store.node_keys computes them when asked
                    n_key.append(ob.key)
                    n_facts.append(ob.facts)
                    n_ft.append(t)
                    n_fid.append(o.id)
                    n_ent.append(ob)
                elif ob is not n_ent[oi]:
                    if oi == si:
                        s_ent = None  # the subject's memo: see above
                    st.see(oi, ob, t, o.id)
                elif ob.facts is not None:
                    st.stamp(oi, t, o.id)
                # the new edge's row
                ei = edge_index[sid, REL_VALUE[o.relation], oid] = len(e_src)
                e_src.append(si)
                e_dst.append(oi)
                attrs = o.attrs  # plain_attrs(attrs), inline
                for v in attrs.values():
                    if v.__class__ not in PLAIN:
                        attrs = json_attrs(attrs)
                        break
                e_attrs.append(attrs)
                names = tuple(attrs)
                keys = key_tuples.get(names)
                e_keys.append(st.shared_keys(names) if keys is None else keys)
                e_first.append(NEVER)
                e_last.append(0)
                e_mask.append(0)
                e_count.append(0)
            else:  # Store.see of the object, inline, and the edge's first-available attributes
                oi = e_dst[ei]
                f = ob.facts
                if f is None:  # Store.see's checks, inline (the held entity is not read)
                    attrs = ob.attrs
                    keys = n_keys[oi]
                    if keys is None:  # Store.node_keys, inline
                        names = tuple(n_attrs[oi])
                        keys = key_tuples.get(names)
                        if keys is None:
                            keys = st.shared_keys(names)
                        n_keys[oi] = keys
                    if not keys.issuperset(attrs) or (ob.label and oi in unlabeled):
                        st.merge_node(oi, ob.label, attrs)
                    k = ob.key
                    if k and k != n_key[oi]:
                        st.offer_key(oi, k)
                else:
                    prev = n_ent[oi]
                    if ob is not prev:
                        n_ent[oi] = ob
                        if ob != prev:
                            if oi == si:
                                s_ent = None  # the subject's memo: see above
                            if st.merge_sighting(oi, ob, t, o.id):
                                f = None  # stamped
                    if f is not None:
                        ft = n_ft[oi]
                        if t > ft or (t == ft and o.id > n_fid[oi]):
                            n_ft[oi], n_fid[oi] = t, o.id
                if not e_keys[ei].issuperset(o.attrs):
                    st.merge_edge(ei, o.attrs)
            if 0 < t < e_first[ei]:
                if e_first[ei] != NEVER:  # earlier than the edge's first time, applied later
                    st.earlier_edge(ei, o.attrs)
                e_first[ei] = t
            if te > e_last[ei]:  # noqa: PLR1730 - hot path, cheaper than max()
                e_last[ei] = te
            e_mask[ei] |= mbits
            if slow:
                if extras:
                    st.extras(ei, ev)
                if retain:
                    sup = support.get(ei)
                    if sup is None:
                        support[ei] = [o.id]
                    elif len(sup) < limit:
                        sup.append(o.id)
            if not occurrence:
                e_count[ei] += both
                continue
            seen = occ.get(occurrence)
            if seen is None and old:
                seen = old.get(occurrence)
                if seen is not None:
                    occ[occurrence] = seen
                    room -= 1
            if seen is None:
                occ[occurrence] = ei
                e_count[ei] += both
                room -= 1
                if room <= 0:
                    old, occ, room = occ, self._rotate(), half
            else:
                e_count[ei] += 1
                # An occurrence that already counted this edge also counted both its end nodes
                # (they are added together): nothing to regrow. The type first: a tuple
                # compared with an edge number passes through both types' comparisons.
                if type(seen) is tuple:
                    if ei << 1 not in seen:
                        self._regrow(occurrence, seen, ei, si, e_dst[ei])
                elif seen != ei:
                    self._regrow(occurrence, seen, ei, si, e_dst[ei])
        self.observations += len(observations)

    def _source_bits(self, source: Source) -> int:
        """The node source bits of ``source``: channels in bits 0-3, backends from bit 4 on."""
        backend = self._backend_bit.get(source.backend)
        if backend is None:
            backend = 1 << (4 + len(self._backend_names))
            self._backend_names.append(source.backend)
            self._backend_bit[source.backend] = backend
        return CHANNEL_BIT[source.channel] | backend

    def _evidence(self, ev: Evidence) -> tuple[Evidence, int, bool]:
        """``ev``, its packed bits, and whether it has a method, score or support (cached)."""
        hit = self._ev_cache.get(id(ev))
        if hit is None or hit[0] is not ev:
            extras = ev.method is not None or ev.score is not None or bool(ev.support)
            hit = (ev, evidence_bits(ev), extras)
            if len(self._ev_cache) >= 1024:  # bounded: producers share a few evidence objects
                self._ev_cache.clear()
            self._ev_cache[id(ev)] = hit
        return hit

    def _regrow(self, occurrence: str, seen: _Seen, ei: int, si: int, oi: int) -> None:
        """An occurrence seen before through other elements: count the ones it reaches anew.

        A node's logical total adds those of its incident edges, so when an edge is counted but
        an end node already was (or the reverse), the node's own count is corrected.
        """
        st = self._store
        grown = orig = self._expand(seen)
        stag, otag, etag = si << 1 | 1, oi << 1 | 1, ei << 1
        s_new = stag not in grown
        if s_new:
            grown = (*grown, stag)
        o_new = oi != si and otag not in grown
        if o_new:
            grown = (*grown, otag)
        e_new = etag not in grown
        if e_new:
            grown = (*grown, etag)
            st.e_count[ei] += LOGICAL
        if s_new != e_new:
            st.own(si)[3] += (s_new - e_new) * LOGICAL
        if oi != si and o_new != e_new:
            st.own(oi)[3] += (o_new - e_new) * LOGICAL
        if grown is not orig:
            self._occ[occurrence] = grown

    def _expand(self, seen: _Seen) -> tuple[int, ...]:
        """The tags of the elements an occurrence already counted."""
        if isinstance(seen, int):
            st = self._store
            return (seen << 1, st.e_src[seen] << 1 | 1, st.e_dst[seen] << 1 | 1)
        return seen

    def _rotate(self) -> dict[str, _Seen]:
        self._occ_old = self._occ
        self._occ = {}
        return self._occ

    def graph(self) -> Graph:
        """The snapshot as a typed :class:`Graph`."""
        return Graph.from_dict(self.to_dict(), validate=False)

    def rows(
        self, node_ids: Iterable[str], edge_keys: Iterable[tuple[str, str, str]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The nodes and edges named (by id, and by ``(source id, relation, target id)``;
        unknown ones skipped) exactly as :meth:`to_dict` shows them before folding runtime
        reads, at a cost that grows with them, not with the graph: a reader that keeps a copy
        current names the elements its observations touched (the ``postgres`` exporter)."""
        if self._rows is None:
            self._rows = RowIndex(self._store)
        return self._rows.rows(tuple(self._backend_names), node_ids, edge_keys)

    def to_dict(self) -> dict[str, Any]:
        """The deterministic ``graph.json`` document (`docs/graph.md`) as a dict, built with
        the cyclic garbage collector paused (:func:`otel_bridge.gcpause.gc_paused`)."""
        with gc_paused():
            return snapshot(
                self._store,
                names=tuple(self._backend_names),
                run=self.run,
                coverage=self._coverage,
                coverage_by_channel=self._coverage_by_channel,
                observations=self.observations,
            )
