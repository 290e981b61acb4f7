"""The internal elements of the accumulator: nodes and edges as slotted objects, the packed
evidence bits and the helpers that merge into them. Private to :mod:`otel_bridge.graph`.

Per-edge evidence flags are packed into one integer (two bits per Boolean flag: "seen true",
"seen false"; one bit per attribution mode; "native"/"viewer-only" bits), so aggregating an
observation is an integer OR, and the aggregate is decoded once per distinct bit pattern.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import operator
from collections.abc import Iterator
from typing import Any

from otel_bridge.grading import Flag, grade_edge
from otel_bridge.jsonl import value_to_json
from otel_bridge.model import (
    Attributes,
    Attribution,
    Channel,
    Entity,
    EntityKind,
    Evidence,
    Grade,
    Observation,
)

_CHANNELS: tuple[Channel, ...] = tuple(Channel)
_CHANNEL_BIT = {c: 1 << i for i, c in enumerate(_CHANNELS)}
_CHANNEL_LISTS = tuple(
    tuple(sorted(c.value for c in _CHANNELS if m & _CHANNEL_BIT[c])) for m in range(16)
)
_PLAIN = frozenset({str, int, bool, type(None)})
"""Attribute value types that are already JSON (floats may be non-finite: converted)."""
_KIND_VALUE = {k: k.value for k in EntityKind}
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
        "in_edge",
        "in_relation",
        "in_source",
        "keys",
        "kind",
        "label",
        "last",
        "logical",
        "seen_attrs",
        "sources",
    )

    def __init__(self, entity: Entity) -> None:
        self.id = entity.id
        self.kind = _KIND_VALUE[entity.kind]
        self.label = entity.label
        self.attrs: dict[str, Any] = {
            k: v if v.__class__ in _PLAIN else value_to_json(v) for k, v in entity.attrs.items()
        }
        self.keys = frozenset(self.attrs)
        """The attribute keys held, so "nothing new" is one C-level superset test."""
        self.seen_attrs: object = entity.attrs
        self.first = _NEVER
        self.last = 0
        self.sources = 0
        self.logical = 0
        self.evidence = 0
        # The edge that last pointed at this node: a memo that saves the edge look-up when
        # one source keeps relating to this node the same way.
        self.in_edge: _Edge | None = None
        self.in_source: _Node | None = None
        self.in_relation: object = None


class _Edge:
    __slots__ = (
        "attrs",
        "bits",
        "derived",
        "evidence",
        "first",
        "id",
        "keys",
        "last",
        "logical",
        "methods",
        "relation",
        "score",
        "seen_attrs",
        "snode",
        "source",
        "sources",
        "support",
        "target",
        "tnode",
    )

    def __init__(self, obs: Observation, relation: str, snode: _Node, tnode: _Node) -> None:
        source, target = snode.id, tnode.id
        self.snode = snode
        self.tnode = tnode
        self.source = source
        self.relation = relation
        self.target = target
        digest = hashlib.blake2b(f"{source}\0{relation}\0{target}".encode(), digest_size=8)
        self.id = f"e-{digest.hexdigest()}"
        self.attrs: dict[str, Any] = {
            k: v if v.__class__ in _PLAIN else value_to_json(v) for k, v in obs.attrs.items()
        }
        self.keys = frozenset(self.attrs)
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


_NODE_KEY = operator.attrgetter("id")
_EDGE_KEY = operator.attrgetter("source", "relation", "target")
_Classified = tuple[str, Flag, Flag, Flag, tuple[str, ...], bool]


def _merge(node: _Node, entity: Entity) -> None:
    if not node.label and entity.label:
        node.label = entity.label
    _merge_attrs(node.attrs, entity.attrs)
    node.keys = frozenset(node.attrs)


def _merge_attrs(attrs: dict[str, Any], new: Attributes) -> None:
    for k, v in new.items():
        if k not in attrs:
            attrs[k] = v if v.__class__ in _PLAIN else value_to_json(v)


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
