"""The ``graph.json`` snapshot of an accumulator's rows (`docs/graph.md`). Private to
:mod:`otel_bridge.graph`.

The snapshot is built column-wise: a value that depends only on a source mask or an evidence
bit pattern is computed once per distinct pattern, per-element values are mapped over their
column at C speed, and each column is put in output order with one ``itemgetter`` call. Every
element dict is a copy of a small template (all keys, in sorted order, with the values its mask
determines) with the varying values set, which is several times cheaper than a wide dict
literal; the sorted keys are what the sorted-key JSON encoder expects. Node totals add the
incident edges' aggregates (see :mod:`.accumulator`); edge ids are hashed once per edge, on the
first snapshot that includes it, and kept.
"""

from __future__ import annotations

import hashlib
import operator
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any, TypeVar, cast

import msgspec

from otel_bridge.graph._elements import (
    CHANNEL_LISTS,
    CHANNEL_MASK,
    EV_MASK,
    EV_WIDTH,
    EVIDENCE_MASK,
    LOGICAL_SHIFT,
    NEVER,
    REL_VALUE,
    Classified,
    Store,
    classify,
)
from otel_bridge.graph.document import FORMAT, VERSION
from otel_bridge.graph.fold import fold_runtime_reads
from otel_bridge.graph.summary import CAUSAL_NAMES, Summary
from otel_bridge.identity import process_key, process_label
from otel_bridge.model import Facts, ProcessFacts

_T = TypeVar("_T")
_Sources = tuple[tuple[str, ...], tuple[str, ...]]
_Info = tuple[str, Any, Any, Any, tuple[str, ...], tuple[str, ...], tuple[str, ...]]
"""Classified evidence plus channels and backends: everything an edge's mask determines."""

_SOURCE_CACHE: dict[tuple[tuple[str, ...], int], _Sources] = {}
"""(backend names, mask) -> (channels, backends). Module-level so that snapshots share the
tuples and, once the collector has seen them, hold only untracked values."""
_INFO_CACHE: dict[tuple[tuple[str, ...], int, bool], _Info] = {}
"""(backend names, edge mask, has method) -> edge info; bounded by the patterns that exist."""
_REL_RANK = {r: i for i, r in enumerate(sorted(REL_VALUE.values()))}
"""Relation names ranked in sort order."""
_RELATIONS = len(_REL_RANK)
_FIRST_SEEN = {NEVER: None}.get
"""``_FIRST_SEEN(t, t)``: None for "never", else t."""
_LAST_SEEN = {0: None}.get
_EVIDENCE = EVIDENCE_MASK.__and__
"""Evidence count of packed counts (see ``_elements.LOGICAL``)."""


def edge_id(source: str, relation: str, target: str) -> str:
    """The stable id of the edge ``(source, relation, target)``."""
    digest = hashlib.blake2b(f"{source}\0{relation}\0{target}".encode(), digest_size=8)
    return "e-" + digest.hexdigest()


def _take(column: Sequence[_T], order: Sequence[int]) -> Sequence[_T]:
    """``column`` in ``order`` (one C call)."""
    if len(order) > 1:
        picked: tuple[_T, ...] = operator.itemgetter(*order)(column)
        return picked
    return [column[i] for i in order]


def _sources(names: tuple[str, ...], mask: int) -> _Sources:
    pair = _SOURCE_CACHE.get((names, mask))
    if pair is None:
        backends = tuple(sorted(n for i, n in enumerate(names) if mask >> (4 + i) & 1))
        pair = (CHANNEL_LISTS[mask & CHANNEL_MASK], backends)
        if len(_SOURCE_CACHE) > 4096:
            _SOURCE_CACHE.clear()
        _SOURCE_CACHE[(names, mask)] = pair
    return pair


def _info(names: tuple[str, ...], mask: int, has_method: bool) -> _Info:
    info = _INFO_CACHE.get((names, mask, has_method))
    if info is None:
        classified: Classified = classify(mask & EV_MASK, has_method)
        info = (*classified, *_sources(names, mask >> EV_WIDTH))
        if len(_INFO_CACHE) > 4096:
            _INFO_CACHE.clear()
        _INFO_CACHE[(names, mask, has_method)] = info
    return info


def _node_template(channels: tuple[str, ...], backends: tuple[str, ...]) -> dict[str, Any]:
    """A node dict with its keys in sorted order and the values a source mask determines."""
    return {
        "attrs": None,
        "backends": backends,
        "channels": channels,
        "evidence_count": 0,
        "facts": None,
        "first_seen": None,
        "id": "",
        "key": "",
        "kind": "",
        "label": "",
        "last_seen": None,
        "logical_count": 0,
    }


def _edge_template(info: _Info) -> dict[str, Any]:
    """An edge dict with its keys in sorted order and the values ``info`` determines."""
    grade, causal, inferred, exact, attributions, channels, backends = info
    return {
        "attribution": attributions,
        "attrs": None,
        "backends": backends,
        "causal": causal,
        "channels": channels,
        "derived_support": (),
        "evidence_count": 0,
        "first_seen": None,
        "grade": grade,
        "id": "",
        "identity_exact": exact,
        "inferred": inferred,
        "last_seen": None,
        "logical_count": 0,
        "method": None,
        "relation": "",
        "score": None,
        "source": "",
        "support": None,
        "target": "",
    }


def _facts_column(
    st: Store, order: Sequence[int]
) -> tuple[Sequence[dict[str, Any] | None], Sequence[str], Sequence[str]]:
    """The nodes' merged facts in ``order``, as JSON objects tagged ``type`` (None: no facts),
    with the nodes' keys and labels in the same order.

    Only nodes that saw several distinct records are merged; the others show their one record.
    A *process* whose records differ (it exec'd: the gate shell, then the agent) takes its key
    and label from its merged facts, so both name what it executed last, whatever order the
    records came in (the offered key and the first label would name the first image).
    """
    merged: Sequence[Facts | None] = _take(st.n_facts, order)
    keys, labels = _take(st.n_key, order), _take(st.n_label, order)
    history = st.f_hist
    if history:
        merged, keys, labels = list(merged), list(keys), list(labels)
        for p, i in enumerate(order):
            if i in history:
                facts = merged[p] = st.merged_facts(i)
                if isinstance(facts, ProcessFacts):
                    keys[p] = process_key(facts.executable_path, facts.argv) or ""
                    labels[p] = process_label(facts) or labels[p]
    if merged.count(None) == len(merged):  # no node states facts: nothing to convert
        return cast("Sequence[None]", merged), keys, labels
    column: list[dict[str, Any] | None] = msgspec.to_builtins(merged)
    return column, keys, labels


def _node_totals(st: Store) -> tuple[list[int], list[int], list[int], list[int]]:
    """Per node: first, last, sources, counts = its own plus its incident edges'."""
    size = len(st.n_kind)
    first, last, sources, counts = [NEVER] * size, [0] * size, [0] * size, [0] * size
    for i, (f, la, m, c) in st.n_own.items():
        first[i], last[i], sources[i], counts[i] = f, la, m, c
    for s, d, f, la, mask, c in zip(
        st.e_src, st.e_dst, st.e_first, st.e_last, st.e_mask, st.e_count, strict=True
    ):
        m = mask >> EV_WIDTH
        if f < first[s]:  # noqa: PLR1730 - cheaper than min() in this loop
            first[s] = f
        if la > last[s]:  # noqa: PLR1730
            last[s] = la
        sources[s] |= m
        counts[s] += c
        if d != s:  # a self-loop counts for its node once
            if f < first[d]:  # noqa: PLR1730
                first[d] = f
            if la > last[d]:  # noqa: PLR1730
                last[d] = la
            sources[d] |= m
            counts[d] += c
    return first, last, sources, counts


def _node_rows(
    st: Store,
    names: tuple[str, ...],
    ids: Sequence[str],
    order: Sequence[int],
    totals: tuple[Sequence[int], Sequence[int], Sequence[int], Sequence[int]],
) -> list[dict[str, Any]]:
    """The rows of the nodes ``order`` (ids ``ids``), their ``totals`` in the same order."""
    first, last, sources, counts = totals
    # Copying a small template per source mask and setting the varying values is several
    # times faster than building a dict literal this wide.
    templates = {m: _node_template(*_sources(names, m)) for m in set(sources)}
    nodes: list[dict[str, Any]] = []
    append = nodes.append
    facts_column, keys, labels = _facts_column(st, order)
    for i, k, key, facts, lb, a, template, f, la, ev, lg in zip(
        ids,
        _take(st.n_kind, order),
        keys,
        facts_column,
        labels,
        map(dict, _take(st.n_attrs, order)),
        map(templates.__getitem__, sources),
        map(_FIRST_SEEN, first, first),
        map(_LAST_SEEN, last, last),
        map(_EVIDENCE, counts),
        map(operator.rshift, counts, repeat(LOGICAL_SHIFT)),
        strict=True,
    ):
        d = template.copy()
        d["attrs"] = a
        d["evidence_count"] = ev
        if facts is not None:
            d["facts"] = facts
        d["first_seen"] = f
        d["id"] = i
        if key:  # the template's is ""
            d["key"] = key
        d["kind"] = k
        d["label"] = lb
        d["last_seen"] = la
        d["logical_count"] = lg
        append(d)
    return nodes


def _nodes(
    st: Store,
    names: tuple[str, ...],
    ids: list[str],
    totals: tuple[list[int], ...],
    order: list[int],
) -> tuple[list[dict[str, Any]], Summary]:
    """Every node's row in ``order``, and the summary's node counts."""
    first, last, sources, counts = (_take(column, order) for column in totals)
    nodes = _node_rows(st, names, _take(ids, order), order, (first, last, sources, counts))
    summary = Summary()
    summary.nodes = len(nodes)
    summary.by_kind.update(st.n_kind)
    for mask, n in Counter(sources).items():
        for channel in _sources(names, mask)[0]:
            summary.nodes_by_channel[channel] += n
    return nodes, summary


def _edge_order(st: Store, node_order: list[int], rels: list[str]) -> list[int]:
    """Edges sorted by (source id, relation, target id), compared as one integer each: node
    ranks in id order stand for the ids, relation ranks for the relation names."""
    size = len(node_order)
    rank = [0] * size
    for position, i in enumerate(node_order):
        rank[i] = position
    keys = [
        (rank[s] * _RELATIONS + _REL_RANK[r]) * size + rank[d]
        for s, r, d in zip(st.e_src, rels, st.e_dst, strict=True)
    ]
    return sorted(range(len(keys)), key=keys.__getitem__)


def _annotated(
    order: Sequence[int], at: dict[int, int], found: dict[int, _T]
) -> list[tuple[int, _T]]:
    """(position in ``order``, value) of the entries of ``found`` whose element is in
    ``order`` (``at``: element -> position), walking the smaller of the two."""
    if len(found) <= len(order):
        return [(p, v) for j, v in found.items() if (p := at.get(j)) is not None]
    return [(p, v) for p, j in enumerate(order) if (v := found.get(j)) is not None]


def _edge_rows(
    st: Store,
    names: tuple[str, ...],
    keys: Sequence[tuple[str, str, str]],
    hids: Sequence[str],
    order: Sequence[int],
) -> tuple[list[dict[str, Any]], list[_Info]]:
    """The rows of the edges ``order`` (keys ``keys``, ids ``hids``), and their infos."""
    masks = _take(st.e_mask, order)
    table = {m: _info(names, m, False) for m in set(masks)}
    infos = list(map(table.__getitem__, masks))
    # The template of an edge holds everything its mask determines; method, score, support
    # and derived_support are rare: None/() there, patched below.
    by_mask = {m: _edge_template(info) for m, info in table.items()}
    templates = list(map(by_mask.__getitem__, masks))
    # positions of the rare annotated edges (a whole snapshot with none builds no index)
    annotated = st.methods or st.score or st.support or st.derived
    at = {j: p for p, j in enumerate(order)} if annotated else {}
    methods = _annotated(order, at, st.methods)
    for p, _found in methods:
        infos[p] = _info(names, masks[p], True)
        templates[p] = _edge_template(infos[p])
    counts = _take(st.e_count, order)
    firsts, lasts = _take(st.e_first, order), _take(st.e_last, order)
    edges: list[dict[str, Any]] = []
    append = edges.append
    for (s, r, t), h, template, a, f, la, lg, ev in zip(
        keys,
        hids,
        templates,
        map(dict, _take(st.e_attrs, order)),
        map(_FIRST_SEEN, firsts, firsts),
        map(_LAST_SEEN, lasts, lasts),
        map(operator.rshift, counts, repeat(LOGICAL_SHIFT)),
        map(_EVIDENCE, counts),
        strict=True,
    ):
        d = template.copy()
        d["attrs"] = a
        d["evidence_count"] = ev
        d["first_seen"] = f
        d["id"] = h
        d["last_seen"] = la
        d["logical_count"] = lg
        d["relation"] = r
        d["source"] = s
        d["target"] = t
        append(d)
    for p, found in methods:
        edges[p]["method"] = sorted(found) if len(found) > 1 else next(iter(found))
    for p, score in _annotated(order, at, st.score):
        edges[p]["score"] = score
    for p, supported in _annotated(order, at, st.support):
        edges[p]["support"] = sorted(supported)
    for p, derived in _annotated(order, at, st.derived):
        if derived:
            edges[p]["derived_support"] = sorted(derived)
    return edges, infos


def _edges(
    st: Store,
    names: tuple[str, ...],
    summary: Summary,
    *,
    keys: list[tuple[str, str, str]],
    rels: list[str],
    order: list[int],
) -> list[dict[str, Any]]:
    """Every edge's row in ``order``, and the summary's edge counts."""
    hid, size = st.e_hid, len(st.e_src)
    done = len(hid)
    if done < size:  # edges are only ever appended: hash the new ones
        hid.extend(edge_id(s, r, t) for s, r, t in keys[done:])
    edges, infos = _edge_rows(st, names, _take(keys, order), _take(hid, order), order)
    summary.edges = size
    summary.by_relation.update(rels)
    for mask, n in Counter(st.e_mask).items():
        for channel in _info(names, mask, False)[5]:
            summary.edges_by_channel[channel] += n
    summary.by_grade.update(map(operator.itemgetter(0), infos))
    for flag, n in Counter(map(operator.itemgetter(1), infos)).items():
        summary.by_causal[CAUSAL_NAMES[flag]] += n
    return edges


class RowIndex:
    """Some rows of a store exactly as :func:`snapshot` shows them before folding, at a cost
    that grows with those rows, not with the graph: for a reader that keeps a copy current by
    the elements it touched (the ``postgres`` exporter). Nothing here walks every node or edge,
    nor every incident edge of a busy node: a flush of a few rows of a large graph is cheap.

    It keeps, per node, the aggregate of its incident edges (first and last time, source mask,
    packed counts) and, per edge, the values already added to it. Each call adds the edges
    appended since the previous call and the difference of every edge it names: **a caller
    names every edge whose observations it applied since its previous call** (as it must to
    get those edges' rows anyway). Node totals are their own row plus that aggregate, as in
    :func:`_node_totals`: times and masks only grow, counts add up, so differences suffice.
    """

    def __init__(self, st: Store) -> None:
        self._st = st
        self._agg: list[list[int]] = []  # per node: first, last, mask, counts of its edges
        self._seen: list[int] = []  # per edge: the packed counts already added to its ends
        self._edges = 0

    def _add(self, j: int) -> None:
        """Add edge ``j``'s current values (its counts' difference) to its two ends."""
        st = self._st
        f, la, m, c = st.e_first[j], st.e_last[j], st.e_mask[j] >> EV_WIDTH, st.e_count[j]
        delta, self._seen[j] = c - self._seen[j], c
        s, d = st.e_src[j], st.e_dst[j]
        for row in (self._agg[s],) if d == s else (self._agg[s], self._agg[d]):
            row[0] = min(row[0], f)  # a self-loop counts for its node once
            row[1] = max(row[1], la)
            row[2] |= m
            row[3] += delta

    def _update(self, named: Iterable[int]) -> None:
        st = self._st
        self._agg.extend([NEVER, 0, 0, 0] for _ in range(len(st.n_kind) - len(self._agg)))
        done, size = self._edges, len(st.e_src)
        self._seen.extend(repeat(0, size - done))
        for j in range(done, size):
            self._add(j)
        for j in named:
            if j < done:
                self._add(j)
        self._edges = size

    def _totals(self, order: list[int]) -> tuple[list[int], list[int], list[int], list[int]]:
        """:func:`_node_totals` of the nodes in ``order``, in that order."""
        first, last, sources, counts = [], [], [], []
        own, agg = self._st.n_own, self._agg
        for i in order:
            f, la, m, c = own.get(i, (NEVER, 0, 0, 0))
            ef, el, em, ec = agg[i]
            first.append(min(f, ef))
            last.append(max(la, el))
            sources.append(m | em)
            counts.append(c + ec)
        return first, last, sources, counts

    def rows(
        self,
        names: tuple[str, ...],
        node_ids: Iterable[str],
        edge_keys: Iterable[tuple[str, str, str]],
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The named nodes and edges (unknown ones skipped) as :func:`snapshot`'s rows."""
        st = self._st
        node_index, edge_index = st.node_index, st.edge_index
        touched = sorted({(j, k) for k in edge_keys if (j := edge_index.get(k)) is not None})
        self._update(j for j, _ in touched)
        named = sorted({(i, n) for n in node_ids if (i := node_index.get(n)) is not None})
        node_order = [i for i, _ in named]
        ids = [n for _, n in named]
        nodes = _node_rows(st, names, ids, node_order, self._totals(node_order))
        edge_order = [j for j, _ in touched]
        keys = [k for _, k in touched]
        hid, done = st.e_hid, len(st.e_hid)
        hids = [hid[j] if j < done else edge_id(*k) for j, k in touched]
        edges, _infos = _edge_rows(st, names, keys, hids, edge_order)
        return nodes, edges


def snapshot(
    st: Store,
    *,
    names: tuple[str, ...],
    run: dict[str, Any],
    coverage: Counter[str],
    coverage_by_channel: Counter[str],
    observations: int,
) -> dict[str, Any]:
    """The deterministic ``graph.json`` document of the rows in ``st``.

    ``names`` are the interned backend names (bit ``4 + i`` of a source mask is ``names[i]``).
    """
    ids = list(st.node_index)
    node_order = sorted(range(len(ids)), key=ids.__getitem__)
    nodes, summary = _nodes(st, names, ids, _node_totals(st), node_order)
    keys = cast("list[tuple[str, str, str]]", list(st.edge_index))
    rels = list(map(operator.itemgetter(1), keys))
    edge_order = _edge_order(st, node_order, rels)
    edges = _edges(st, names, summary, keys=keys, rels=rels, order=edge_order)
    doc = {
        "edges": edges,
        "format": FORMAT,
        "nodes": nodes,
        "run": dict(run),
        "summary": summary.to_dict(coverage, coverage_by_channel, observations),
        "version": VERSION,
    }
    return fold_runtime_reads(doc)  # docs/graph.md, "Folded runtime reads"
