"""A real ``observe`` run's process tree and stable keys (``docs/host.md``, "The root's parent";
``docs/model.md``, "Stable keys").

The root's parent (``observe`` itself, or the warm server's child) is not followed: the graph
has no node for it, made from its pid alone, and no ``spawned`` edge to the root; the root keeps
``parent_pid`` as a fact. No node has a stable key made of placeholders.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from observe_support import observe_in

from otel_bridge.importers.sessions import agent_process
from otel_bridge.review.build import read_graph

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the process tree from /proc")


def test_the_root_is_the_top_of_the_tree_and_no_key_is_made_of_nothing(tmp_path: Path) -> None:
    done = observe_in(tmp_path, "sh", "-c", "echo x > out.txt; cat out.txt > copy.txt")
    assert done.returncode == 0, done.stderr
    graph: dict[str, Any] = json.loads((tmp_path / "run" / "graph.json").read_text())
    nodes = {n["id"]: n for n in graph["nodes"]}
    processes = {i: n for i, n in nodes.items() if n["kind"] == "process"}
    spawned = [e for e in graph["edges"] if e["relation"] == "spawned"]
    assert spawned, "cat is a child of sh: one spawned edge at least"
    for edge in spawned:
        for end in (edge["source"], edge["target"]):
            facts = processes[end]["facts"]
            assert facts["start_time_ms"] is not None, processes[end]
            assert processes[end]["key"], processes[end]  # each followed process ran something
    children = {e["target"] for e in spawned}
    (root,) = (n for i, n in processes.items() if i not in children)
    assert root["facts"]["argv"][:2] == ["sh", "-c"]
    assert root["facts"]["parent_pid"] is not None  # kept as a fact, not made a node
    assert root["facts"]["parent_pid"] not in {n["facts"]["pid"] for n in processes.values()}
    for node in processes.values():  # no process known by its pid alone
        assert node["facts"]["start_time_ms"] is not None, node
    for node in graph["nodes"]:
        assert "?" not in str(node["key"]).split(":"), node
    # the session importer's last rule for the agent's process ("the run's only process no
    # observed process spawned") finds the root, not observe's own process
    index = read_graph(str(tmp_path / "run" / "graph.json")).index
    assert agent_process((), index, None) == (root["id"], "run_root")
