"""The graph view's edges do not run through unrelated nodes (docs/viewer.md, *Graph view*).

Nodes sit in lanes by kind; a lane of one node puts it at the centre, so with one agent, one
model and one tool call the agent->model line ran straight through the tool call, and a process
spawning two others drew its line through the first child. The layout (``layout.layout``, which
the page's own layout equals: ``test_browser.py``) draws such an edge as a curve around the node.
This checks the geometry the page draws: every edge's line or curve, sampled finely, against
every node that is neither of its ends, on real runs and on the shapes runs have.
"""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.viewer.layout import layout
from viewer.conftest import observe
from viewer.viewer_support import edge, graph_doc, node

REPO = Path(__file__).resolve().parents[2]
# A node is drawn 3 to 9 px wide at a zoom of about 1.3 px per graph unit (a typical run fitted
# to the 1400x900 page): a line closer than 8 graph units to its centre touches or crosses it.
RADIUS = 8.0
SAMPLES = 200

Point = tuple[float, float]


def drawn_lines(doc: dict[str, Any], lay: dict[str, Any]) -> list[tuple[str, str, list[Point]]]:
    """(source, target, polyline) of every edge the page draws, in its order: one fold edge per
    fold (process -> fold node), then graph.json's edges between drawn nodes."""
    at: dict[str, Point] = {}
    for i, n in enumerate(doc["nodes"]):
        if lay["x"][i] is not None:
            at[n["id"]] = (lay["x"][i], lay["y"][i])
    for proc, (x, y) in lay["folds"].items():
        at["fold:" + proc] = (x, y)
    pairs = [(proc, "fold:" + proc) for proc in lay["folds"]]
    pairs += [
        (e["source"], e["target"]) for e in doc["edges"] if {e["source"], e["target"]} <= at.keys()
    ]
    via = {int(c[0]): (c[1], c[2]) for c in lay["curves"]}
    paths = {int(p[0]): list(zip(p[1::2], p[2::2], strict=True)) for p in lay.get("paths", [])}
    lines = []
    for i, (s, t) in enumerate(pairs):
        (ax, ay), (bx, by) = at[s], at[t]
        if i in paths:
            lines.append((s, t, [(ax, ay), *paths[i], (bx, by)]))
            continue
        if i not in via:
            lines.append((s, t, [(ax, ay), (bx, by)]))
            continue
        cx, cy = via[i]
        pts = []
        for k in range(SAMPLES + 1):
            u = k / SAMPLES
            w = 1 - u
            pts.append(
                (w * w * ax + 2 * u * w * cx + u * u * bx, w * w * ay + 2 * u * w * cy + u * u * by)
            )
        lines.append((s, t, pts))
    return lines


def distance(p: Point, line: list[Point]) -> float:
    best = math.inf
    for (ax, ay), (bx, by) in itertools.pairwise(line):
        dx, dy = bx - ax, by - ay
        l2 = dx * dx + dy * dy
        u = max(0.0, min(1.0, ((p[0] - ax) * dx + (p[1] - ay) * dy) / l2)) if l2 else 0.0
        best = min(best, math.hypot(ax + u * dx - p[0], ay + u * dy - p[1]))
    return best


def crossings(
    doc: dict[str, Any], lay: dict[str, Any], radius: dict[str, float] | None = None
) -> list[tuple[str, str, str]]:
    """(source, target, node) for every drawn edge passing within RADIUS (or the node's own
    ``radius``) of a third node."""
    at = {
        n["id"]: (lay["x"][i], lay["y"][i])
        for i, n in enumerate(doc["nodes"])
        if lay["x"][i] is not None
    }
    at.update({"fold:" + p: (xy[0], xy[1]) for p, xy in lay["folds"].items()})
    out = []
    for s, t, line in drawn_lines(doc, lay):
        for nid, p in at.items():
            r = RADIUS if radius is None else radius[nid]
            if nid not in (s, t) and at[s] != p and at[t] != p and distance(p, line) < r:
                out.append((s, t, nid))
    return out


def check(doc: dict[str, Any]) -> dict[str, Any]:
    lay = layout(doc)
    assert all(b["y0"] == b["y1"] for b in lay["bands"] if b["n"]), "a lane wrapped into a block"
    assert crossings(doc, lay) == []
    return lay


def agent_run(tools: int, agents: int = 1) -> dict[str, Any]:
    """Agents invoking tool calls and one model, as a real run joins them: each agent's process
    spawns one process per tool call, which executes a program and writes a file; the model is
    served at an endpoint the agents' processes connect to."""
    t0 = 1_796_000_000_000_000_000
    ep = "endpoint:tcp:127.0.0.1:8000"
    nodes = [
        node("model:p:m", "model", "m", channels=["sem"], first_seen=t0 + 5),
        node(ep, "endpoint", "model server", channels=["os"], first_seen=t0 + 4),
        node(
            "executable:/usr/bin/sleep", "executable", "sleep", channels=["os"], first_seen=t0 + 9
        ),
    ]
    edges = [edge("served", "model:p:m", "served_at", ep, channels=["sem", "os"])]
    for a in range(agents):
        agent, proc = f"agent:s:a{a}", f"process:h:{a}:1"
        nodes += [
            node(agent, "agent", f"agent {a}", channels=["sem"], first_seen=t0 + a),
            node(proc, "process", f"python {a}", channels=["os"], first_seen=t0 + a),
        ]
        edges += [
            edge(f"req{a}", agent, "requested", "model:p:m", channels=["sem"]),
            edge(f"corr{a}", agent, "correlated_with_process", proc, channels=["sem", "os"]),
            edge(f"conn{a}", proc, "connected_to", ep, channels=["os"]),
        ]
        for t in range(tools):
            call, child, out = (
                f"tool_call:tr:{a}-{t}",
                f"process:h:{a}{t}:2",
                f"file:/work/out{a}-{t}",
            )
            seen = t0 + 10 + 10 * t + a
            nodes += [
                node(call, "tool_call", f"run {a}.{t}", channels=["sem"], first_seen=seen),
                node(child, "process", f"sleep {a}.{t}", channels=["os"], first_seen=seen + 1),
                node(out, "file", f"out{a}-{t}", channels=["os"], first_seen=seen + 2),
            ]
            edges += [
                edge(f"inv{a}-{t}", agent, "invoked", call, channels=["sem"]),
                edge(f"c{a}-{t}", call, "correlated_with_process", child, channels=["sem", "os"]),
                edge(f"sp{a}-{t}", proc, "spawned", child, channels=["os"]),
                edge(f"x{a}-{t}", child, "executed", "executable:/usr/bin/sleep", channels=["os"]),
                edge(f"w{a}-{t}", child, "wrote", out, channels=["os"]),
            ]
    return graph_doc(nodes, edges)


def test_the_checker_sees_the_line_through_the_tool_call() -> None:
    """Negative control: drawn straight, one agent, one tool call and one model cross."""
    doc = agent_run(1)
    lay = layout(doc)
    straight = {**lay, "curves": []}
    assert ("agent:s:a0", "model:p:m", "tool_call:tr:0-0") in crossings(doc, straight)
    assert lay["curves"], "the layout curved nothing"


@pytest.mark.parametrize("tools", [1, 2, 3])
def test_one_agent_one_model_and_tool_calls(tools: int) -> None:
    check(agent_run(tools))


@pytest.mark.parametrize("agents", [2, 3])
def test_several_agents(agents: int) -> None:
    check(agent_run(2, agents))


def test_a_lone_node_per_lane_in_a_column() -> None:
    """One node in each lane, every lane at x = 0, each joined to every other."""
    kinds = ["agent", "tool_call", "model", "span", "process", "executable", "file", "endpoint"]
    nodes = [
        node(f"{k}:n", k, k, channels=["sem"] if i < 4 else ["os"]) for i, k in enumerate(kinds)
    ]
    edges = [
        edge(f"e{i}-{j}", f"{a}:n", "related_to", f"{b}:n")
        for i, a in enumerate(kinds)
        for j, b in enumerate(kinds)
        if i < j
    ]
    check(graph_doc(nodes, edges))


@pytest.mark.slow
def test_real_runs(observed_run: Path, tmp_path: Path) -> None:
    """A real observe of the plain agent (three tool calls, one model) and of the ambiguous one
    (two tool calls running the same command at once)."""
    run = tmp_path / "amb"
    work = tmp_path / "work"
    work.mkdir()
    observe(run, work, [sys.executable, str(REPO / "examples" / "ambiguous_agent.py")], 180)
    for d in (observed_run, run):
        doc = json.loads((d / "graph.json").read_text())
        lay = check(doc)
        assert lay["curves"], f"{d}: nothing needed a curve (the shape this test is about)"


# Wrapped lanes: a row of 60 nodes leaves about 10 graph units between neighbours, so a node's
# box is its drawn radius (viewer.js nodeSize) at the scale a 600-unit-wide graph is fitted to
# the 1400x900 page (about 1.25 px per graph unit), but no more than 0.45 of the distance to its
# nearest neighbour in its row: a node drawn wider than that overlaps its neighbours at this
# zoom (a row of 60 tool calls), and its own part of the row is what an edge must keep off.
DRAWN_PX = {
    "agent": 9,
    "tool_call": 7,
    "command": 6,
    "model": 7,
    "process": 6,
    "executable": 4,
    "endpoint": 5,
    "folded": 6,
}
FIT_SCALE = 1.25


def boxes(doc: dict[str, Any], lay: dict[str, Any]) -> dict[str, float]:
    kind = {n["id"]: n["kind"] for n in doc["nodes"]}
    at = {n["id"]: (lay["x"][i], lay["y"][i]) for i, n in enumerate(doc["nodes"])}
    at.update({"fold:" + p: (xy[0], xy[1]) for p, xy in lay["folds"].items()})
    rows: dict[float, list[float]] = {}
    for x, y in at.values():
        if x is not None:
            rows.setdefault(y, []).append(x)
    out = {}
    for nid, (x, y) in at.items():
        if x is None:
            continue
        gap = min((abs(o - x) for o in rows[y] if o != x), default=math.inf)
        out[nid] = min(DRAWN_PX.get(kind.get(nid, "folded"), 3) / FIT_SCALE, 0.45 * gap)
    return out


def wrapped_run(files: int, tools: int = 2) -> dict[str, Any]:
    """agent_run with ``files`` files written by its first tool call's process, and the
    agent's process reading each: the files lane wraps into a block."""
    doc = agent_run(tools)
    t0 = 1_796_000_000_000_000_000
    nodes, edges = list(doc["nodes"]), list(doc["edges"])
    for f in range(files):
        fid = f"file:/work/data/part{f:03d}.csv"
        nodes.append(node(fid, "file", fid[5:], channels=["os"], first_seen=t0 + 100 + f))
        edges.append(edge(f"wd{f}", "process:h:00:2", "wrote", fid, channels=["os"]))
        edges.append(edge(f"rd{f}", "process:h:0:1", "read", fid, channels=["os"]))
    return graph_doc(nodes, edges)


def check_wrapped(doc: dict[str, Any]) -> dict[str, Any]:
    lay = layout(doc, paths=True)
    assert any(b["y0"] != b["y1"] for b in lay["bands"] if b["n"]), "no lane wrapped"
    assert lay["paths"], "nothing was routed through a corridor"
    assert crossings(doc, lay, boxes(doc, lay)) == []
    return lay


def test_the_checker_sees_lines_through_a_block() -> None:
    """Negative control: drawn straight, edges into a block cross its rows."""
    doc = wrapped_run(130)
    lay = layout(doc, paths=True)
    assert crossings(doc, {**lay, "paths": []}, boxes(doc, lay))


@pytest.mark.parametrize("files", [61, 130, 400])
def test_edges_into_a_wrapped_lane_pass_between_its_nodes(files: int) -> None:
    check_wrapped(wrapped_run(files))


@pytest.mark.parametrize("tools", [65, 130])
def test_wrapped_tool_call_and_process_lanes(tools: int) -> None:
    """Tool calls, their processes and files each more than 60: three blocks, edges across
    them and within one (the agent's process spawning every other)."""
    check_wrapped(agent_run(tools))
