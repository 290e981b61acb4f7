"""review.json and compare.json documents written from the issue texts' "Output shape" sections.

The producers (``otel-bridge review``, ``otel-bridge compare``) are built elsewhere; these small
documents follow the shapes the issues fix, with a ground truth stated here, so the viewer's
review and compare views are tested before the real producers land.
"""

from __future__ import annotations

from typing import Any

PLOT = "file:/work/plot.png"
"""The artifact the supported claim's ground truth names."""


def review_doc() -> dict[str, Any]:
    """A data-analysis session: one supported claim (plot.png), one contradicted, one partial."""
    return {
        "format": "otel-bridge.review",
        "version": 1,
        "run": {"id": "20261201T000000Z-aaaaaa"},
        "records": {"spans": 6, "os_events": 40},
        "workflow": [
            {"id": "w:context", "kind": "context", "rule": "rule:user_request"},
            {"id": "w:execute", "kind": "execute", "rule": "rule:writes_artifact"},
            {"id": "w:validate", "kind": "validate", "rule": "rule:test_runner"},
            {"id": "w:claim", "kind": "claim", "rule": "rule:final_answer"},
        ],
        "evidence": [
            {"id": "tool_call:t:s1", "kind": "tool_call", "label": "run_command python plot.py"},
            {
                "id": "process:h:1:2",
                "kind": "process",
                "label": "python plot.py",
                "rule": "rule:bridge",
            },
            {
                "id": "process:h:3:4",
                "kind": "process",
                "label": "pytest",
                "rule": "rule:process_run",
            },
            {
                "id": PLOT,
                "kind": "file",
                "path": "/work/plot.png",
                "sha256": "ab" * 32,
                "size": 1234,
            },
            {
                "id": "file:/work/notes.txt",
                "kind": "file",
                "path": "/work/notes.txt",
                "content": "n=3\n",
            },
        ],
        "edges": [
            {
                "id": "r-1",
                "source": "w:context",
                "target": "w:execute",
                "kind": "frames",
                "method": "rule:frames",
            },
            {
                "id": "r-2",
                "source": "w:claim",
                "target": "w:execute",
                "kind": "supports",
                "method": "rule:mentions",
            },
            {
                "id": "r-3",
                "source": "w:execute",
                "target": "tool_call:t:s1",
                "kind": "uses",
                "method": "observed",
            },
            {
                "id": "r-4",
                "source": "tool_call:t:s1",
                "target": "process:h:1:2",
                "kind": "uses",
                "method": "observed",
            },
            {
                "id": "r-5",
                "source": "process:h:1:2",
                "target": PLOT,
                "kind": "produces",
                "method": "observed",
                "grade": "A",
            },
            {
                "id": "r-6",
                "source": "w:validate",
                "target": "process:h:3:4",
                "kind": "uses",
                "method": "observed",
            },
            {
                "id": "r-7",
                "source": "w:claim",
                "target": "file:/work/notes.txt",
                "kind": "supports",
                "method": "model:scripted",
                "inferred": True,
            },
        ],
        "claims": [
            {
                "id": "c-plot",
                "text": "The plot is in plot.png.",
                "status": "supported",
                "mentions": ["plot.png"],
                "support": ["r-2", "r-3", "r-4", "r-5"],
            },
            {
                "id": "c-notes",
                "text": "The notes hold the counts.",
                "status": "partially_supported",
                "mentions": ["notes.txt"],
                "support": ["r-7"],
            },
            {
                "id": "c-tests",
                "text": "All tests pass.",
                "status": "contradicted",
                "mentions": ["all tests pass"],
                "support": [],
            },
        ],
        "findings": [
            {
                "kind": "contradicted_claim",
                "subject": "c-tests",
                "message": "the last pytest run exited 1",
                "evidence": ["process:h:3:4"],
            },
        ],
    }


RUNS = ("r1", "r2", "r3", "r4", "r5")
DETOUR_RUN = "r3"


def compare_doc(run_paths: dict[str, str]) -> dict[str, Any]:
    """Five runs of read -> write -> test; r3 alone takes a detour through ``search``."""
    common = ("read", "write", "test")
    tools = [*common, "search"]
    matrix = {r: dict.fromkeys(common, 1) for r in RUNS}
    matrix[DETOUR_RUN]["search"] = 1
    nodes = [
        {
            "id": f"j:{t}",
            "tool": t,
            "support": 5,
            "multiplicity": dict.fromkeys(RUNS, 1),
            "members": [f"{r}:{t}" for r in RUNS],
            "score": {"mean": 1.0},
        }
        for t in common
    ]
    nodes.append(
        {
            "id": "j:search",
            "tool": "search",
            "support": 1,
            "multiplicity": {DETOUR_RUN: 1},
            "members": [f"{DETOUR_RUN}:search"],
            "score": {},
        }
    )
    return {
        "format": "otel-bridge.compare",
        "version": 1,
        "runs": [
            {
                "id": r,
                "path": run_paths.get(r, ""),
                "metrics": {"tool_calls": 4 if r == DETOUR_RUN else 3},
            }
            for r in RUNS
        ],
        "coverage": {
            "tools": tools,
            "matrix": matrix,
            "intersections": [
                {"runs": list(RUNS), "tools": list(common), "count": 3},
                {"runs": [DETOUR_RUN], "tools": ["search"], "count": 1},
            ],
        },
        "impact": {},
        "provenance": {r: {"activities": [], "entities": [], "edges": []} for r in RUNS},
        "joined": {
            "nodes": nodes,
            "edges": [
                {"source": "j:read", "target": "j:write", "support": 5},
                {"source": "j:write", "target": "j:test", "support": 4},
                {"source": "j:write", "target": "j:search", "support": 1},
                {"source": "j:search", "target": "j:test", "support": 1},
            ],
            "motifs": [{"nodes": ["j:read", "j:write", "j:test"]}],
            "detours": [{"run": DETOUR_RUN, "nodes": ["j:search"]}],
        },
    }
