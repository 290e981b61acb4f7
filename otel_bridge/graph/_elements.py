"""The internal storage of the accumulator: parallel lists indexed by interned node and edge
numbers, the packed evidence bits and their decoding. Private to :mod:`otel_bridge.graph`.

Nodes and edges are not objects but rows: node ``i`` is ``n_kind[i]``, ``n_attrs[i]``, ...;
edge ``j`` is ``e_src[j]``, ``e_mask[j]``, .... The id of node ``i`` is the ``i``-th key of
``node_index``; the (source, relation, target) of edge ``j`` is the ``j``-th key of
``edge_index`` (rows are only ever appended, so insertion order is row order). Lists of ints
and strings hold no per-element object the cyclic garbage collector would have to track and
traverse, so a graph of tens of thousands of elements adds almost nothing to collection work,
and an update is a list index.

Per-edge evidence flags are packed into one integer, together with the source bits: two bits
per Boolean flag ("seen true", "seen false"), one bit per attribution mode, then (from
:data:`EV_WIDTH` on) one bit per channel and per backend. An observation ORs one precomputed
integer into its edge; the aggregate is decoded once per distinct bit pattern at snapshot time.

Each node also keeps its stable key (the most informative one offered, :func:`key_rank`) and
its typed facts as *distinct values with stamps*: the last distinct facts record seen
(``n_facts``) with the stamp of its latest sighting (``n_ft`` time, ``n_fid`` observation id,
``f_seq`` offer order, sparse), and, sparsely, every earlier distinct record with its latest stamp
(``f_hist``). A repeated, equal record only moves the stamp forward; the per-field merge
(:meth:`Store.merged_facts`) runs at snapshot time and gives the same result as merging every
sighting (a record's latest sighting is the only one that can win a field).
"""

from __future__ import annotations

import operator
from typing import Any

import msgspec

from otel_bridge.grading import Flag, grade_edge
from otel_bridge.identity import key_rank
from otel_bridge.jsonl import value_to_json
from otel_bridge.model import (
    Attributes,
    Attribution,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    Facts,
    Grade,
    RelationKind,
)
from otel_bridge.stamping import EARLIEST_TIME

CHANNELS: tuple[Channel, ...] = tuple(Channel)
CHANNEL_BIT = {c: 1 << i for i, c in enumerate(CHANNELS)}
"""Source bits: channels in bits 0-3, backends (interned per accumulator) from bit 4 on."""
CHANNEL_MASK = 0b1111
CHANNEL_LISTS = tuple(
    tuple(sorted(c.value for c in CHANNELS if m & CHANNEL_BIT[c])) for m in range(16)
)
PLAIN = frozenset({str, int, bool, type(None)})
"""Attribute value types that are already JSON (floats may be non-finite: converted)."""
KIND_VALUE = {k: k.value for k in EntityKind}
REL_VALUE: dict[RelationKind | None, str] = {r: r.value for r in RelationKind}
NEVER = 1 << 63
"""``first_seen`` of an element no timed observation reached yet."""
ATTRIBUTIONS: tuple[Attribution, ...] = tuple(Attribution)
# Evidence bits: causal (0,1), inferred (2,3), identity_exact (4,5), attribution modes (6...);
# the edge's source bits follow from EV_WIDTH on.
_ATTR_SHIFT = 6
_ATTR_BIT = {a: 1 << (_ATTR_SHIFT + i) for i, a in enumerate(ATTRIBUTIONS)}
EV_WIDTH = _ATTR_SHIFT + len(ATTRIBUTIONS)
EV_MASK = (1 << EV_WIDTH) - 1
_FLAG: dict[int, Flag] = {0: None, 1: True, 2: False, 3: "mixed"}
Classified = tuple[str, Flag, Flag, Flag, tuple[str, ...]]
"""grade, causal, inferred, identity_exact, attribution modes."""


def _bits(flag: bool | None, shift: int) -> int:
    if flag is None:
        return 0
    return (1 if flag else 2) << shift


def evidence_bits(ev: Evidence) -> int:
    """The packed evidence bits of one observation."""
    bits = _bits(ev.causal, 0) | _bits(ev.inferred, 2) | _bits(ev.identity_exact, 4)
    if ev.attribution is not None:
        bits |= _ATTR_BIT[ev.attribution]
    return bits


def classify(bits: int, has_method: bool) -> Classified:
    """Decode aggregated evidence bits; ``grade_edge`` only asks whether a method exists."""
    causal, inferred, exact = _FLAG[bits & 3], _FLAG[bits >> 2 & 3], _FLAG[bits >> 4 & 3]
    modes = frozenset(a for a in ATTRIBUTIONS if bits & _ATTR_BIT[a])
    grade: Grade = grade_edge(modes, causal, inferred, "method" if has_method else None)
    return grade.value, causal, inferred, exact, tuple(sorted(a.value for a in modes))


def json_attrs(attrs: Attributes) -> dict[str, Any]:
    """A JSON-ready copy of attributes."""
    copy = dict(attrs)
    if PLAIN.issuperset(map(type, copy.values())):
        return copy
    return {k: v if v.__class__ in PLAIN else value_to_json(v) for k, v in attrs.items()}


def merge_attrs(attrs: Attributes, new: Attributes) -> dict[str, Any]:
    """First-available merge: a new dict of ``attrs`` with the keys it lacks added from
    ``new`` (``attrs`` is not changed: the store may share it with an observation)."""
    merged = dict(attrs)
    for k, v in new.items():
        if k not in merged:
            merged[k] = v if v.__class__ in PLAIN else value_to_json(v)
    return merged


def plain_attrs(attrs: Attributes) -> Attributes:
    """``attrs`` itself when every value is already JSON, else a converted copy
    (:func:`json_attrs`): a row holds an observation's own attributes until a merge replaces
    them (the model is immutable, and the store never changes a row's mapping in place)."""
    for v in attrs.values():  # cheaper than a set of the value types for a few values
        if v.__class__ not in PLAIN:
            return json_attrs(attrs)
    return attrs


Stamp = tuple[int, str, int]
"""When a facts record was seen: observation time (ns), observation id, offer order."""


def merge_facts(records: list[tuple[Stamp, Facts]]) -> Facts:
    """The per-field merge of stamped facts records (at least one).

    The result has the type of the latest record; records of another type are ignored. Each
    field takes its value from the latest record (by stamp) that states it (is not None).
    """
    records.sort(key=operator.itemgetter(0))
    latest = records[-1][1]
    cls = type(latest)
    fields: dict[str, Any] = {}
    for _, facts in records:
        if facts.__class__ is cls:
            values = msgspec.structs.astuple(facts)
            for name, value in zip(facts.__struct_fields__, values, strict=True):
                if value is not None:
                    fields[name] = value
    return cls(**fields)


LOGICAL_SHIFT = 40
LOGICAL = 1 << LOGICAL_SHIFT
"""Element counts are packed: evidence count in the low 40 bits, logical count above, so an
observation that is a new occurrence adds ``LOGICAL | 1`` (``BOTH``) in one update."""
BOTH = LOGICAL | 1
EVIDENCE_MASK = LOGICAL - 1


class Store:
    """All element rows of one accumulator (see the module docstring)."""

    # Slots: the accumulator's methods read these on every new node and edge; a slot is read
    # without a dictionary look-up.
    __slots__ = (
        "derived",
        "e_attrs",
        "e_count",
        "e_dst",
        "e_first",
        "e_hid",
        "e_keys",
        "e_last",
        "e_mask",
        "e_src",
        "edge_index",
        "f_hist",
        "f_seq",
        "key_sets",
        "key_tuples",
        "methods",
        "n_attrs",
        "n_ent",
        "n_facts",
        "n_fid",
        "n_ft",
        "n_key",
        "n_keys",
        "n_kind",
        "n_label",
        "n_own",
        "node_index",
        "offers",
        "score",
        "support",
        "unlabeled",
    )

    def __init__(self) -> None:
        self.node_index: dict[str, int] = {}
        self.n_kind: list[str] = []
        self.n_label: list[str] = []
        self.n_attrs: list[Attributes] = []
        """Shared with the entity that added the node (never changed in place: a merge
        replaces the row's mapping, :func:`merge_attrs`), so a new node copies nothing."""
        self.n_keys: list[frozenset[str] | None] = []
        """The attribute keys held, so "nothing new" is one C-level superset test; None until a
        later sighting asks (:meth:`node_keys`): most nodes are never merged again."""
        self.n_own: dict[int, list[int]] = {}
        """Sparse ``[first, last, sources, counts]`` of a node's own (entity) observations.
        Relation observations are aggregated on their edge only; a node's totals add its
        incident edges at snapshot time. ``counts`` also holds the logical-count correction
        for occurrences that reach the node through several edges."""
        self.edge_index: dict[tuple[str, str | None, str], int] = {}
        """(source id, relation, target id) -> edge. Plain strings: a relation member hashes
        and compares as its value, and a key of strings is never tracked by the collector."""
        self.e_src: list[int] = []
        self.e_dst: list[int] = []
        self.e_attrs: list[Attributes] = []
        """Shared with the observation that added the edge, as :attr:`n_attrs`."""
        self.e_keys: list[frozenset[str]] = []
        self.e_first: list[int] = []
        self.e_last: list[int] = []
        self.e_mask: list[int] = []
        """Evidence bits | source bits << EV_WIDTH."""
        self.e_count: list[int] = []
        """Evidence count | logical count << 40."""
        self.e_hid: list[str] = []
        """Stable edge ids (a hash), computed by the first snapshot that includes the edge."""
        self.methods: dict[int, set[str]] = {}
        self.score: dict[int, float] = {}
        self.derived: dict[int, set[str]] = {}
        self.support: dict[int, list[str]] = {}
        self.n_key: list[str] = []
        """The node's stable key: the highest-ranked one offered, first seen on ties."""
        self.n_facts: list[Facts | None] = []
        """The last distinct facts record seen for the node (None: none yet)."""
        self.n_ft: list[int] = []
        """Stamp of the last record's latest sighting: observation time, ..."""
        self.n_fid: list[str] = []
        """... observation id, ..."""
        self.f_seq: dict[int, int] = {}
        """... and, sparsely, offer order (``offers`` when the record was last offered as new;
        absent, 0, for the node's first record)."""
        self.f_hist: dict[int, dict[Facts, Stamp]] = {}
        """Sparse: every earlier distinct facts record of a node with its latest stamp."""
        self.offers = 0
        self.key_sets: dict[frozenset[str], frozenset[str]] = {}
        """Interned attribute key sets: nodes of one kind share one."""
        self.key_tuples: dict[tuple[str, ...], frozenset[str]] = {}
        """The interned key set of each attribute key order seen by a new node or edge."""
        self.n_ent: list[Entity] = []
        """The held entity: one merged into the node whose facts are the node's last record
        (the one that added the node, or the last sighting that stated facts). Producers
        share one entity object between observations (the observations of a batch, a
        normalizer's shared process entities), so a sighting of ``n_ent[i]`` itself skips the
        merge checks and only moves the stamp (:meth:`see`)."""
        self.unlabeled: set[int] = set()
        """The nodes with no label yet: a later sighting's label is taken only by them (a set
        of the few such nodes, rather than a read of each node's label string, which is cold
        memory by the time the node is seen again)."""

    def shared_keys(self, names: tuple[str, ...]) -> frozenset[str]:
        """The shared key set of attributes named ``names`` in this order (remembered by the
        tuple: a new node or edge whose attributes come in a known order skips building a set)."""
        keys = frozenset(names)
        keys = self.key_tuples[names] = self.key_sets.setdefault(keys, keys)
        return keys

    def intern_keys(self, attrs: Attributes) -> frozenset[str]:
        """The shared key set of ``attrs``."""
        keys = frozenset(attrs)
        return self.key_sets.setdefault(keys, keys)

    def add_node(self, entity: Entity, time: int, observation_id: str) -> int:
        """Append a node row for ``entity``, seen by an observation at ``time``; returns it."""
        i = len(self.n_kind)
        self.node_index[entity.id] = i
        self.n_kind.append(KIND_VALUE[entity.kind])
        self.n_label.append(entity.label)
        if not entity.label:
            self.unlabeled.add(i)
        self.n_attrs.append(plain_attrs(entity.attrs))
        self.n_keys.append(None)  # node_keys computes them when asked
        self.n_key.append(entity.key)
        self.n_facts.append(entity.facts)
        self.n_ft.append(time)
        self.n_fid.append(observation_id)
        self.n_ent.append(entity)
        return i

    def node_keys(self, i: int) -> frozenset[str]:
        """The attribute keys node ``i`` holds (computed on first use, shared; found by the
        attributes' key order, as a new edge's are, which skips building a set)."""
        keys = self.n_keys[i]
        if keys is None:
            names = tuple(self.n_attrs[i])
            keys = self.key_tuples.get(names)
            if keys is None:
                keys = self.shared_keys(names)
            self.n_keys[i] = keys
        return keys

    def merge_node(self, i: int, label: str, attrs: Attributes) -> None:
        """First-available label and attributes from a later sighting."""
        if label and i in self.unlabeled:
            self.n_label[i] = label
            self.unlabeled.discard(i)
        merged = self.n_attrs[i] = merge_attrs(self.n_attrs[i], attrs)
        self.n_keys[i] = self.intern_keys(merged)

    def see(self, i: int, entity: Entity, time: int, observation_id: str) -> None:
        """A later sighting of node ``i``: first-available label and attributes, its facts record
        (an equal one only moves the stamp forward, :meth:`stamp`), its stable key.

        A sighting with no facts is merged by tests that read it and the node's shared state
        (its interned key set, :attr:`unlabeled`), never an earlier entity, not even the held
        one's address (reading it from the list takes a reference: a write to the entity's
        count): a node is typically seen again long after its last sighting, when its objects
        are cold memory (OS events state files and processes afresh per record). A sighting of
        the held entity (:attr:`n_ent`) itself only moves the stamp. Any other sighting with
        facts is compared with the held entity (one C-level comparison), becomes the held
        entity, and is merged only when it differs. The accumulator's hot loop inlines this
        method."""
        if entity.facts is None:
            self.merge_plain(i, entity)
            return
        prev = self.n_ent[i]
        if entity is prev:
            self.stamp(i, time, observation_id)
            return
        self.n_ent[i] = entity
        if entity == prev or not self.merge_sighting(i, entity, time, observation_id):
            self.stamp(i, time, observation_id)

    def merge_plain(self, i: int, entity: Entity) -> None:
        """Merge a sighting's label, attributes and key into node ``i`` (not its facts)."""
        if not self.node_keys(i).issuperset(entity.attrs) or (entity.label and i in self.unlabeled):
            self.merge_node(i, entity.label, entity.attrs)
        key = entity.key
        if key and key != self.n_key[i]:
            self.offer_key(i, key)

    def merge_sighting(self, i: int, entity: Entity, time: int, observation_id: str) -> bool:
        """Merge a sighting into node ``i``; True when its facts record was offered (which
        stamps it), False when it states none or the node's last one (not stamped)."""
        self.merge_plain(i, entity)
        facts = entity.facts
        if facts is None or facts == self.n_facts[i]:
            return False
        self.offer_facts(i, facts, time, observation_id)
        return True

    def stamp(self, i: int, time: int, observation_id: str) -> None:
        """A sighting of node ``i``'s last facts record: its stamp moves to the latest one."""
        ft = self.n_ft[i]
        if time > ft or (time == ft and observation_id > self.n_fid[i]):
            self.n_ft[i], self.n_fid[i] = time, observation_id

    def offer_key(self, i: int, key: str) -> None:
        """A sighting of node ``i`` states ``key``: kept when it ranks higher (:func:`key_rank`)."""
        if key_rank(key) > key_rank(self.n_key[i]):
            self.n_key[i] = key

    def offer_facts(self, i: int, facts: Facts, time: int, observation_id: str) -> None:
        """A sighting of node ``i`` states ``facts``, which differ from its last record.

        The last record moves to the node's history with its stamp; ``facts`` becomes the last
        record, keeping the later of its new stamp and any stamp the history held for it.
        """
        self.offers += 1
        stamp: Stamp = (time, observation_id, self.offers)
        last = self.n_facts[i]
        history = self.f_hist.get(i)
        if last is not None:
            if history is None:
                history = self.f_hist[i] = {}
            history[last] = (self.n_ft[i], self.n_fid[i], self.f_seq.get(i, 0))
        if history:
            earlier = history.pop(facts, None)
            if earlier is not None and earlier > stamp:
                stamp = earlier
        self.n_facts[i] = facts
        self.n_ft[i], self.n_fid[i], self.f_seq[i] = stamp

    def merged_facts(self, i: int) -> Facts | None:
        """The facts of node ``i``, merged per field over every record seen (see the module)."""
        last = self.n_facts[i]
        history = self.f_hist.get(i)
        if last is None or not history:
            return last
        records = [(stamp, facts) for facts, stamp in history.items()]
        records.append(((self.n_ft[i], self.n_fid[i], self.f_seq.get(i, 0)), last))
        return merge_facts(records)

    def own(self, i: int) -> list[int]:
        """The own aggregates of node ``i`` (created empty)."""
        row = self.n_own.get(i)
        if row is None:
            row = self.n_own[i] = [NEVER, 0, 0, 0]
        return row

    def merge_edge(self, j: int, attrs: Attributes) -> None:
        """First-available attributes from a later observation of the edge."""
        merged = self.e_attrs[j] = merge_attrs(self.e_attrs[j], attrs)
        self.e_keys[j] = self.intern_keys(merged)

    def earlier_edge(self, j: int, attrs: Attributes) -> None:
        """An observation of edge ``j`` earlier than its first time, applied after another: the
        edge's earliest time (:data:`~otel_bridge.stamping.EARLIEST_TIME`) becomes this
        observation's (or none, when it states none), so it stays the bound of the edge's
        ``first_seen``. Other attributes stay first-available."""
        mine = dict(self.e_attrs[j])  # a new mapping: the row's may be an observation's
        value = attrs.get(EARLIEST_TIME)
        if value is None:
            if mine.pop(EARLIEST_TIME, None) is not None:
                self.e_attrs[j] = mine
                self.e_keys[j] = self.intern_keys(mine)
            return
        fresh = EARLIEST_TIME not in mine
        mine[EARLIEST_TIME] = value
        self.e_attrs[j] = mine
        if fresh:
            self.e_keys[j] = self.intern_keys(mine)

    def extras(self, j: int, ev: Evidence) -> None:
        """Record the method, maximum score and derived support of a derived observation."""
        if ev.method is not None:
            self.methods.setdefault(j, set()).add(ev.method)
        if ev.score is not None:
            best = self.score.get(j)
            if best is None or ev.score > best:
                self.score[j] = ev.score
        if ev.support:
            self.derived.setdefault(j, set()).update(ev.support)
