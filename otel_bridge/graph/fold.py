"""Runtime reads folded into one node per process (``docs/graph.md``, *Folded runtime reads*).

A Python agent opens hundreds of files before it does anything of its own: its interpreter's
standard library and ``.pyc`` caches, site-packages, shared libraries, ``/proc`` and ``/sys``,
locale and font caches. As nodes they bury the few files the agent's work touched. By default
the snapshot folds them: every ``opened`` edge from a process to a file whose path is a runtime
read (:func:`runtime_read_class`), when that file has no other relation in the graph (a file the
process also wrote, created, renamed or deleted is never folded), becomes part of one
``opened`` edge from the process to a ``runtime_reads`` node for that process. The folded edge
aggregates the folded edges (counts summed, times min/max, support and flags unioned, the
weakest grade), so nothing is lost from the totals; the raw events stay in the OS stream. The
node's ``attrs`` say how many files of which class were folded, with a few example paths.

A graph whose ``run`` object has ``"runtime_reads": "keep"`` is left as it is (``observe
--keep-runtime-reads``).
"""

from __future__ import annotations

import operator
import re
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

from otel_bridge.grading import MIXED, weakest
from otel_bridge.graph.summary import summarize
from otel_bridge.model import Grade

KIND = "runtime_reads"
"""The node kind of a folded group."""
KEEP = "keep"
"""``run["runtime_reads"]`` value that turns folding off."""
EXAMPLES = 5
"""Example paths kept per folded node."""
SUPPORT_LIMIT = 1000

CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("python bytecode", re.compile(r"\.py[co]$|/__pycache__/")),
    ("shared library", re.compile(r"\.so(\.[0-9]+)*$|^/etc/ld\.so\.")),
    ("installed packages", re.compile(r"/(site|dist)-packages/")),
    ("interpreter library", re.compile(r"/lib/python[0-9.]+/|/lib/node_modules/")),
    ("kernel interface", re.compile(r"^/(proc|sys)/")),
    ("locale and fonts", re.compile(r"/locale|/fonts?/|fontconfig|/zoneinfo/|/gconv/")),
    ("device", re.compile(r"^/dev/(null|zero|u?random|urandom)$")),
)


_ANY = re.compile("|".join(f"(?:{pattern.pattern})" for _, pattern in CLASSES))
"""Matches exactly the paths one of :data:`CLASSES` matches: most paths of a graph are no
runtime read, and one search rejects them where seven did."""


_ROOTS = ("/proc/", "/sys/", "/dev/")


def could_be_runtime_read(path: str, start: int = 0) -> bool:
    """False only for a path none of :data:`CLASSES` can match: each pattern needs one of these
    fragments (``.py`` for bytecode, ``.so`` for shared libraries and ``/etc/ld.so.*``, ...).
    Plain substring tests cost a fifth of one regular-expression search, and most paths of a
    graph are no runtime read (a snapshot of 10,000 such files spent 28 ms in the search).
    ``start``: where the path begins in ``path`` (5 in a ``file:`` node id, which no fragment
    can straddle), so the fold tests node ids without slicing them."""
    return (
        ".py" in path
        or "__pycache__" in path
        or ".so" in path
        or "packages/" in path
        or "/lib/" in path
        or path.startswith(_ROOTS, start)
        or "locale" in path
        or "font" in path
        or "zoneinfo" in path
        or "gconv" in path
    )


def runtime_read_class(path: str) -> str | None:
    """The class of runtime read ``path`` is (``python bytecode``, ...), or None: the first
    of :data:`CLASSES` whose pattern matches."""
    if not could_be_runtime_read(path) or _ANY.search(path) is None:
        return None
    for name, pattern in CLASSES:
        if pattern.search(path):
            return name
    return None


def _flag(values: list[Any]) -> Any:
    seen = {v for v in values if v is not None}
    if not seen:
        return None
    if MIXED in seen or len(seen) > 1:
        return MIXED
    return next(iter(seen))


def _union(lists: list[list[str] | None]) -> list[str]:
    return sorted({x for xs in lists if xs for x in xs})


def _folded_edge(source: str, target: str, edges: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``opened`` edge aggregating ``edges`` (see the module docstring)."""
    from otel_bridge.graph._snapshot import edge_id  # noqa: PLC0415 - it imports this module

    firsts = [e["first_seen"] for e in edges if e["first_seen"] is not None]
    lasts = [e["last_seen"] for e in edges if e["last_seen"] is not None]
    methods = _union(
        [[e["method"]] if isinstance(e["method"], str) else e["method"] for e in edges]
    )
    scores = [e["score"] for e in edges if e["score"] is not None]
    supports = [e["support"] for e in edges]
    return {
        "attribution": _union([e["attribution"] for e in edges]),
        "attrs": {"folded_files": len(edges)},
        "backends": _union([e["backends"] for e in edges]),
        "causal": _flag([e["causal"] for e in edges]),
        "channels": _union([e["channels"] for e in edges]),
        "derived_support": _union([e["derived_support"] for e in edges]),
        "evidence_count": sum(e["evidence_count"] for e in edges),
        "first_seen": min(firsts) if firsts else None,
        "grade": weakest(Grade(e["grade"]) for e in edges).value,
        "id": edge_id(source, "opened", target),
        "identity_exact": _flag([e["identity_exact"] for e in edges]),
        "inferred": _flag([e["inferred"] for e in edges]),
        "last_seen": max(lasts) if lasts else None,
        "logical_count": sum(e["logical_count"] for e in edges),
        "method": None if not methods else methods[0] if len(methods) == 1 else methods,
        "relation": "opened",
        "score": max(scores) if scores else None,
        "source": source,
        "support": None if all(s is None for s in supports) else _union(supports)[:SUPPORT_LIMIT],
        "target": target,
    }


def _folded_node(
    node_id: str, process: dict[str, Any], files: list[dict[str, Any]], edge: dict[str, Any]
) -> dict[str, Any]:
    classes: Counter[str] = Counter()
    for f in files:
        classes[runtime_read_class(f["id"].removeprefix("file:")) or "other"] += 1
    owner = process["label"] or process["id"]
    return {
        "attrs": {
            "files": len(files),
            "by_class": dict(sorted(classes.items())),
            "examples": sorted(f["id"].removeprefix("file:") for f in files)[:EXAMPLES],
        },
        "backends": _union([f["backends"] for f in files]),
        "channels": _union([f["channels"] for f in files]),
        "evidence_count": edge["evidence_count"],
        "facts": None,
        "first_seen": edge["first_seen"],
        "id": node_id,
        "key": f"{KIND}:{process['key']}" if process["key"] else "",
        "kind": KIND,
        "label": f"{len(files)} runtime reads of {owner}",
        "last_seen": edge["last_seen"],
        "logical_count": edge["logical_count"],
    }


_FRAGMENTS = (
    ".py",
    "__pycache__",
    ".so",
    "packages/",
    "/lib/",
    "locale",
    "font",
    "zoneinfo",
    "gconv",
    *(f"file:{root}" for root in _ROOTS),
)
"""What :func:`could_be_runtime_read` looks for, as found in a ``file:`` node id."""
_TARGET = operator.itemgetter("target")


def file_candidates(ids: Sequence[str]) -> list[int]:
    """The positions in ``ids`` of every ``file:`` node id that :func:`could_be_runtime_read`
    accepts (``could_be_runtime_read(id, 5)``), and perhaps a few more: the caller tests each.

    One substring search per fragment over all the ids joined by newlines (no fragment holds
    one, so a match never spans two ids) replaces a function call and ten tests per id: for
    10,000 files none of which is a runtime read, about 2 ms where the per-id tests took 5.
    A match is mapped to its id by the ids' start offsets, and the search resumes at the next
    id, so the cost grows with the ids' total length plus the candidates found.
    """
    text = "\n".join(ids)
    if not any(fragment in text for fragment in _FRAGMENTS):
        return []  # most graphs' files: no offsets needed
    starts = list(accumulate(map((1).__add__, map(len, ids)), initial=0))
    found: set[int] = set()
    for fragment in _FRAGMENTS:
        at = text.find(fragment)
        while at >= 0:
            i = bisect_right(starts, at) - 1
            found.add(i)
            at = text.find(fragment, starts[i + 1])
    return sorted(found)


def foldable(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per process node id, the ``opened`` edges the fold would merge."""
    edges = doc["edges"]
    targets = list(map(_TARGET, edges))
    reads = [
        edges[i]
        for i in file_candidates(targets)
        if edges[i]["relation"] == "opened"
        and targets[i].startswith("file:")
        and could_be_runtime_read(targets[i], 5)
        and runtime_read_class(targets[i][5:])
    ]
    if not reads:  # most graphs' files are no runtime read: no look-up of their openers
        return {}
    other_relations: set[str] = set()
    for e in edges:
        if e["relation"] != "opened" or not e["target"].startswith("file:"):
            other_relations.add(e["target"])
            other_relations.add(e["source"])
    kinds = {n["id"]: n["kind"] for n in doc["nodes"]}
    candidates: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in reads:
        if kinds.get(e["source"]) == "process":
            candidates[e["source"]].append(e)
    out: dict[str, list[dict[str, Any]]] = {}
    for pid, edges_of in candidates.items():
        kept = [e for e in edges_of if e["target"] not in other_relations]
        if kept:
            out[pid] = kept
    return out


def fold_runtime_reads(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its runtime reads folded (the same dict when nothing folds or kept)."""
    if doc.get("run", {}).get("runtime_reads") == KEEP:
        return doc
    groups = foldable(doc)
    if not groups:
        return doc
    nodes = {n["id"]: n for n in doc["nodes"]}
    dropped_edges: set[str] = set()
    new_nodes: list[dict[str, Any]] = []
    new_edges: list[dict[str, Any]] = []
    for pid, edges in groups.items():
        node_id = f"{KIND}:{pid}"
        edge = _folded_edge(pid, node_id, edges)
        files = [nodes[e["target"]] for e in edges]
        new_nodes.append(_folded_node(node_id, nodes[pid], files, edge))
        new_edges.append(edge)
        dropped_edges.update(e["id"] for e in edges)
    edges_out = [e for e in doc["edges"] if e["id"] not in dropped_edges] + new_edges
    still = {e["source"] for e in edges_out} | {e["target"] for e in edges_out}
    folded_files = {e["target"] for es in groups.values() for e in es}
    nodes_out = [
        n for n in doc["nodes"] if n["id"] not in folded_files or n["id"] in still
    ] + new_nodes
    nodes_out.sort(key=lambda n: str(n["id"]))
    edges_out.sort(key=lambda e: (e["source"], e["relation"], e["target"]))
    out = dict(doc)
    out["nodes"], out["edges"] = nodes_out, edges_out
    summary = doc["summary"]
    out["summary"] = summarize(
        nodes_out,
        edges_out,
        summary["coverage"],
        summary["coverage_by_channel"],
        summary["observations"],
    )
    return out
