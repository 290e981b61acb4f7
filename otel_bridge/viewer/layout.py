"""The graph view's layout, computed once when the page's data is built (``docs/viewer.md``).

The same rules, in the same order and the same floating-point arithmetic, as the page's own
layout (``layout`` and ``foldable`` in ``static/viewer.js``), which still runs when a fold is
expanded: lanes by kind, library and runtime reads folded per process, the lanes down to the
processes filled row by row in ``first_seen`` order, the lanes below ordered by the mean x of
their neighbours above (barycentre) and filled column by column. An edge whose straight line
would pass within ``CLEARANCE`` of a node that is neither of its ends is drawn as a curve around
it (``route``). A browser test checks that the page's layout and this one put every node, and
every curve, at the same place.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

LANES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("agents", ("agent",)),
    ("tool calls", ("tool_call", "command")),
    ("models", ("model",)),
    (
        "spans and other semantic kinds",
        ("span", "session", "workflow", "chain", "retrieval", "reranker", "guardrail", "evaluator"),
    ),
    ("gateway", ()),
    ("processes", ("process",)),
    ("executables", ("executable",)),
    ("files", ("file", "folded", "runtime_reads")),
    ("endpoints", ("endpoint",)),
    ("other OS kinds", ()),
)
OTHER_SEMANTIC_LANE, GATEWAY_LANE, PROCESS_LANE, FILE_LANE, OTHER_OS_LANE = 3, 4, 5, 7, 9
SEMANTIC_LANES = 5
READ_RELATIONS = frozenset({"opened", "read"})
RUNTIME_PATH = re.compile(
    r"^/(usr|lib|lib32|lib64|etc|proc|sys|dev|run|snap)/|/lib/python[0-9.]+/|"
    r"/(site|dist)-packages/|/__pycache__/|/\.venv/|\.(so(\.[0-9]+)*|pyc)\Z"
)
ROW_STEP, LANE_GAP, MIN_WIDTH, COLUMN_STEP = 10, 40, 600, 10
# An edge's line keeps this far (graph units) from every node of a one-row lane but its ends;
# where a straight line does not, the first of BENDS (the quadratic curve's control point, that
# far from the line's midpoint along its normal) that does is used, sampled at CURVE_SAMPLES.
CLEARANCE = 10.0
BENDS = tuple(float(sign * 8 * k) for k in range(1, 25) for sign in (1, -1))  # ±8 .. ±192
CURVE_SAMPLES = 16
REACH = 110.0  # a curve's apex (half its bend) stays within this of its ends' lanes
_LANE_OF_KIND = {kind: i for i, (_, kinds) in enumerate(LANES) for kind in kinds}


@dataclass(slots=True)
class _Node:
    id: str
    lane: int
    first_seen: float
    row: int | None = None  # graph.json row; None for a fold
    x: float = 0.0
    y: float = 0.0
    up: list[_Node] = field(default_factory=list)
    anchor: float = math.inf


def _channels(n: dict[str, Any]) -> list[Any]:
    ch = n.get("channels")
    return ch if isinstance(ch, list) else []


def lane_of(n: dict[str, Any]) -> int:
    """The lane of a graph.json node (``laneOf`` in the page)."""
    kind, ch = n.get("kind"), _channels(n)
    if kind not in ("agent", "tool_call") and "gw" in ch and "sem" not in ch:
        return GATEWAY_LANE
    if kind in _LANE_OF_KIND:
        return _LANE_OF_KIND[kind]
    return OTHER_OS_LANE if "os" in ch and "sem" not in ch else OTHER_SEMANTIC_LANE


def _file_path(n: dict[str, Any]) -> str:
    facts = n.get("facts")
    path = facts.get("path") if isinstance(facts, dict) else None
    return str(path) if path else re.sub(r"^file:", "", str(n.get("id")))


def foldable(doc: dict[str, Any]) -> dict[str, str]:
    """File id -> the one process that only reads it, for files at library/runtime paths."""
    kind: dict[Any, Any] = {}
    cand: dict[Any, tuple[list[bool], dict[Any, None]]] = {}
    for n in doc["nodes"]:
        kind[n["id"]] = n.get("kind")
        if n.get("kind") == "file" and RUNTIME_PATH.search(_file_path(n)):
            cand[n["id"]] = ([True], {})
    for e in doc["edges"]:
        as_source, as_target = cand.get(e.get("source")), cand.get(e.get("target"))
        if as_source:
            as_source[0][0] = False
        if not as_target:
            continue
        if e.get("relation") in READ_RELATIONS and kind.get(e.get("source")) == "process":
            as_target[1][e["source"]] = None
        else:
            as_target[0][0] = False
    return {
        fid: next(iter(procs)) for fid, (ok, procs) in cand.items() if ok[0] and len(procs) == 1
    }


def _time(value: Any) -> float:
    # The page reads first_seen as a double; 0 and missing sort last.
    return float(value) if isinstance(value, int | float) and value else math.inf


def _model(doc: dict[str, Any]) -> tuple[list[_Node], list[tuple[str, str]]]:
    """The page's model nodes (graph.json rows less the folded files, then one node per fold)
    and the edges between them, in the page's order."""
    fold_of = foldable(doc)
    nodes: list[_Node] = []
    folds: dict[str, _Node] = {}
    for row, n in enumerate(doc["nodes"]):
        proc = fold_of.get(n["id"])
        if proc is None:
            nodes.append(_Node(str(n["id"]), lane_of(n), _time(n.get("first_seen")), row))
            continue
        seen = n.get("first_seen")
        f = folds.get(proc)
        if f is None:
            folds[proc] = _Node("fold:" + proc, FILE_LANE, _time(seen))
        elif seen and (f.first_seen == math.inf or float(seen) < f.first_seen):
            f.first_seen = float(seen)
    nodes.extend(folds.values())
    ids = {n.id for n in nodes}
    edges = [(p, f.id) for p, f in folds.items()]
    edges.extend(
        (str(e["source"]), str(e["target"]))
        for e in doc["edges"]
        if e.get("source") in ids and e.get("target") in ids
    )
    return nodes, edges


def _grid(lanes: list[list[_Node]]) -> tuple[list[tuple[int, int]], float]:
    width = MIN_WIDTH
    grid = []
    for members in lanes:
        size = len(members)
        cols = max(1, min(size, max(60, math.ceil(math.sqrt(size * 8)))))
        width = max(width, (cols - 1) * COLUMN_STEP)
        grid.append((cols, math.ceil(size / cols) if size else 0))
    return grid, float(width)


def layout(doc: dict[str, Any], paths: bool = False) -> dict[str, Any]:
    """Positions for a graph.json ``doc`` as the page would place them with no fold expanded:
    ``x``/``y`` per graph.json node row (null for a folded file), ``folds`` (process id ->
    ``[x, y]`` of its fold node), the lane ``bands`` and the ``curves`` (``route``); with
    ``paths``, also the corridor routes of edges at wrapped lanes (``corridors``), which the
    page computes itself and the bundle therefore does not carry."""
    nodes, edges = _model(doc)
    by_id = {n.id: n for n in nodes}
    lanes: list[list[_Node]] = [[] for _ in LANES]
    for n in nodes:
        lanes[n.lane].append(n)
    for s_id, t_id in edges:
        s, t = by_id[s_id], by_id[t_id]
        if s.lane <= PROCESS_LANE < t.lane:
            t.up.append(s)
        elif t.lane <= PROCESS_LANE < s.lane:
            s.up.append(t)
    grid, width = _grid(lanes)
    y, bands = 0, []
    for i, members in enumerate(lanes):
        cols, rows = grid[i]
        below = i > PROCESS_LANE
        if below:
            for n in members:
                total = 0.0
                for m in n.up:
                    total += m.x
                n.anchor = total / len(n.up) if n.up else math.inf
            members.sort(key=lambda n: (n.anchor, n.first_seen, n.id))
        else:
            members.sort(key=lambda n: (n.first_seen, n.id))
        used = math.ceil(len(members) / rows) if below and rows else min(cols, len(members))
        for k, n in enumerate(members):
            c, r = (k // rows, k % rows) if below else (k % cols, k // cols)
            n.x = (c / (used - 1) - 0.5) * width if used > 1 else 0.0
            n.y = -float(y + r * ROW_STEP)
        bands.append(
            {
                "name": LANES[i][0],
                "y0": -y,
                "y1": -(y + max(rows - 1, 0) * ROW_STEP),
                "n": len(members),
                "semantic": i < SEMANTIC_LANES,
            }
        )
        if members:
            y += rows * ROW_STEP + LANE_GAP
    xs: list[float | None] = [None] * len(doc["nodes"])
    ys: list[float | None] = [None] * len(doc["nodes"])
    folds: dict[str, list[float]] = {}
    for n in nodes:
        if n.row is None:
            folds[n.id[len("fold:") :]] = [n.x, n.y]
        else:
            xs[n.row], ys[n.row] = n.x, n.y
    out = {"x": xs, "y": ys, "folds": folds, "bands": bands, "curves": route(nodes, edges, bands)}
    if paths:
        out["paths"] = corridors(nodes, edges, bands)
    return out


def _points(a: _Node, b: _Node, via: tuple[float, float] | None) -> list[tuple[float, float]]:
    """The polyline an edge is checked as: its segment, or its curve sampled."""
    if via is None:
        return [(a.x, a.y), (b.x, b.y)]
    cx, cy = via
    out = []
    for k in range(CURVE_SAMPLES + 1):
        t = k / CURVE_SAMPLES
        u = 1 - t
        out.append(
            (
                u * u * a.x + 2 * t * u * cx + t * t * b.x,
                u * u * a.y + 2 * t * u * cy + t * t * b.y,
            )
        )
    return out


def _near(px: float, py: float, line: list[tuple[float, float]]) -> bool:
    for i in range(len(line) - 1):
        ax, ay = line[i]
        dx, dy = line[i + 1][0] - ax, line[i + 1][1] - ay
        l2 = dx * dx + dy * dy
        u = max(0.0, min(1.0, ((px - ax) * dx + (py - ay) * dy) / l2)) if l2 else 0.0
        qx, qy = ax + u * dx - px, ay + u * dy - py
        if qx * qx + qy * qy <= CLEARANCE * CLEARANCE:
            return True
    return False


def _hits(a: _Node, b: _Node, via: tuple[float, float] | None, near: list[_Node]) -> int:
    line = _points(a, b, via)
    return sum(1 for n in near if n is not a and n is not b and _near(n.x, n.y, line))


def route(
    nodes: list[_Node], edges: list[tuple[str, str]], bands: list[dict[str, Any]]
) -> list[list[float]]:
    """``[edge index, control x, control y]`` for each edge (in the model's edge order) drawn as
    a quadratic curve: one between nodes of one-row lanes whose straight line passes within
    CLEARANCE of another such node (a node of a lane that wraps into a block is not one: an edge
    into a block crosses its rows). The curve is the first of BENDS that clears every node, else
    the one passing the fewest (the line when no curve passes fewer)."""
    line_lanes = [i for i, b in enumerate(bands) if b["n"] and b["y0"] == b["y1"]]
    one_row = {i: [n for n in nodes if n.lane == i] for i in line_lanes}
    by_id = {n.id: n for n in nodes}
    blocks = _block_lanes(bands)
    curves: list[list[float]] = []
    for index, (s_id, t_id) in enumerate(edges):
        a, b = by_id[s_id], by_id[t_id]
        if a is b or a.lane not in one_row or b.lane not in one_row:
            continue
        if _blocks_between(blocks, a.lane, b.lane):
            continue  # a corridor route (``corridors``)
        lo, hi = min(a.y, b.y) - REACH, max(a.y, b.y) + REACH
        near = [n for i in line_lanes if lo <= bands[i]["y0"] <= hi for n in one_row[i]]
        best, best_via = _hits(a, b, None, near), None
        if not best:
            continue
        dx, dy = b.x - a.x, b.y - a.y
        length = math.sqrt(dx * dx + dy * dy)
        if not length:
            continue
        for h in BENDS:
            via = ((a.x + b.x) / 2 + -dy / length * h, (a.y + b.y) / 2 + dx / length * h)
            hits = _hits(a, b, via, near)
            if hits < best:
                best, best_via = hits, via
            if not hits:
                break
        if best_via is not None:
            curves.append([index, best_via[0], best_via[1]])
    return curves


# Corridors: an edge with an end in a lane that wraps into a block, or with such a lane between
# its ends, is drawn as a polyline that crosses every lane on its way vertically, through a gap
# between the lane's columns (at most CLEARANCE from the nearest column), and every gap between
# lanes diagonally, PORT from the rows on either side: no row holds a node within PORT of a jog,
# and a corridor keeps half its columns' spacing (at most CLEARANCE) from the nodes beside it.
PORT = 8.0


def _block_lanes(bands: list[dict[str, Any]]) -> list[int]:
    return [i for i, b in enumerate(bands) if b["n"] and b["y0"] != b["y1"]]


def _blocks_between(blocks: list[int], la: int, lb: int) -> bool:
    lo, hi = min(la, lb), max(la, lb)
    return any(lo < i < hi for i in blocks)


def _columns(nodes: list[_Node], lanes: int) -> list[list[float]]:
    """Each lane's distinct node x values, ascending: its columns."""
    xs: list[set[float]] = [set() for _ in range(lanes)]
    for n in nodes:
        xs[n.lane].add(n.x)
    return [sorted(s) for s in xs]


def _nearest(cols: list[float], x: float) -> int:
    """Index of the column nearest x (the lower one on a tie), by bisection."""
    lo, hi = 0, len(cols)
    while lo < hi:
        mid = (lo + hi) // 2
        if cols[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    if lo == len(cols) or (lo > 0 and x - cols[lo - 1] <= cols[lo] - x):
        return lo - 1
    return lo


def _side(cols: list[float], j: int, right: bool) -> float:
    """The x a corridor passes at beside column j: half way to its neighbour, at most
    CLEARANCE from it."""
    c = cols[j]
    if right:
        return min((c + cols[j + 1]) / 2, c + CLEARANCE) if j + 1 < len(cols) else c + CLEARANCE
    return max((cols[j - 1] + c) / 2, c - CLEARANCE) if j > 0 else c - CLEARANCE


def _gap(cols: list[float], x: float) -> float:
    """Where a corridor near x crosses a lane with these columns."""
    j = _nearest(cols, x)
    c = cols[j]
    if abs(x - c) >= CLEARANCE:
        return x
    left, right = _side(cols, j, False), _side(cols, j, True)
    return right if abs(right - x) < abs(x - left) else left


def _end(
    n: _Node, other: _Node, band: dict[str, Any], cols: list[float], port: float
) -> list[float]:
    """The waypoints from node n to its lane's port (n first): a stub straight out of a
    one-row lane, or a hop to the gap beside n's column and the corridor along it."""
    if band["y0"] == band["y1"]:
        return [n.x, port]
    g = _side(cols, _nearest(cols, n.x), other.x >= n.x)
    return [g, n.y, g, port]


def _reverse(points: list[float]) -> list[float]:
    out: list[float] = []
    for k in range(len(points) - 2, -1, -2):
        out += [points[k], points[k + 1]]
    return out


def corridors(
    nodes: list[_Node], edges: list[tuple[str, str]], bands: list[dict[str, Any]]
) -> list[list[float]]:
    """``[edge index, x1, y1, x2, y2, ...]``: the waypoints between the ends of each edge (in
    the model's edge order) that has an end in a lane wrapped into a block or such a lane between
    its ends (the others are ``route``'s). Lanes are crossed in order, top to bottom or back;
    an edge within one block leaves and enters it through the gap above it."""
    blocks = _block_lanes(bands)
    if not blocks:
        return []
    by_id = {n.id: n for n in nodes}
    cols = _columns(nodes, len(bands))
    out: list[list[float]] = []
    for index, (s_id, t_id) in enumerate(edges):
        a, b = by_id[s_id], by_id[t_id]
        if a is b or not (
            a.lane in blocks or b.lane in blocks or _blocks_between(blocks, a.lane, b.lane)
        ):
            continue
        ba, bb = bands[a.lane], bands[b.lane]
        down = a.lane < b.lane
        port_a = ba["y1"] - PORT if down else ba["y0"] + PORT
        port_b = bb["y0"] + PORT if down or a.lane == b.lane else bb["y1"] - PORT
        points = _end(a, b, ba, cols[a.lane], port_a)
        step = 1 if down else -1
        for i in range(a.lane + step, b.lane, step):
            band = bands[i]
            if not band["n"]:
                continue
            mid = (band["y0"] + band["y1"]) / 2
            x = a.x + (b.x - a.x) * ((mid - a.y) / (b.y - a.y))
            g = _gap(cols[i], x)
            near, far = (band["y0"] + PORT, band["y1"] - PORT)
            if not down:
                near, far = far, near
            points += [g, near, g, far]
        points += _reverse(_end(b, a, bb, cols[b.lane], port_b))
        out.append([index, *points])
    return out
