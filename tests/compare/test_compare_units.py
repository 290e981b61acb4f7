"""compare on small hand-built runs: dependency methods, joined-graph support, impact, schema."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from otel_bridge.compare import CompareConfig, compare, render_markdown, validate_document
from otel_bridge.compare.gold import reported_edges
from otel_bridge.compare.impact import shapley
from otel_bridge.compare.synthetic import Step, synthetic_run
from otel_bridge.errors import DecodeError


def pipeline_steps(detour: bool = False) -> list[Step]:
    """load -> transform -> (inspect) -> report; files and values pass between the calls."""
    steps = [
        Step(
            "load", {"dataset": "sales"}, {"path": "/w/raw.csv", "rows": 5}, writes=["/w/raw.csv"]
        ),
        Step(
            "transform",
            {"source": "/w/raw.csv"},
            {"output": "/w/clean.csv"},
            reads=["/w/raw.csv"],
            writes=["/w/clean.csv"],
        ),
    ]
    if detour:
        steps.append(
            Step("inspect", {"table": "/w/clean.csv"}, {"ok": True}, reads=["/w/clean.csv"])
        )
    steps.append(
        Step(
            "report",
            {"input": "/w/clean.csv"},
            {"report": "/w/report.md"},
            reads=["/w/clean.csv"],
            writes=["/w/report.md"],
        )
    )
    return steps


def five_runs() -> list[Any]:
    """Five runs of one task; run r4 takes a detour (an extra inspect call)."""
    return [
        synthetic_run(f"r{n}", pipeline_steps(detour=n == 4), score=1.0 if n != 4 else 0.5)
        for n in range(5)
    ]


def node_by_tool(doc: dict[str, Any], tool: str) -> dict[str, Any]:
    nodes = [n for n in doc["joined"]["nodes"] if n["tool"] == tool]
    assert len(nodes) == 1, nodes
    node: dict[str, Any] = nodes[0]
    return node


def test_a_detour_of_one_run_in_five_has_support_1_and_the_common_path_5() -> None:
    doc = compare(five_runs())
    validate_document(doc)
    for tool in ("load", "transform", "report"):
        node = node_by_tool(doc, tool)
        assert node["support"] == 5
        assert node["multiplicity"] == {f"r{n}": 1 for n in range(5)}
    inspect = node_by_tool(doc, "inspect")
    assert inspect["support"] == 1
    assert inspect["multiplicity"] == {"r4": 1}
    assert [d["id"] for d in doc["joined"]["detours"]] == [inspect["id"]]
    assert inspect["score"]["mean"] == 0.5
    assert inspect["score"]["mean_without"] == 1.0
    ids = {t: node_by_tool(doc, t)["id"] for t in ("load", "transform", "inspect", "report")}
    # hand-computed: load->transform in 5 runs, transform->report in 5 (every run's report reads
    # clean.csv written by transform), transform->inspect in 1
    support = {(e["source"], e["target"]): e["support"] for e in doc["joined"]["edges"]}
    assert support == {
        (ids["load"], ids["transform"]): 5,
        (ids["transform"], ids["report"]): 5,
        (ids["transform"], ids["inspect"]): 1,
    }
    motif_nodes = {m["id"] for m in doc["joined"]["motifs"] if m["type"] == "node"}
    assert motif_nodes == {ids["load"], ids["transform"], ids["report"]}


def test_support_counts_multiplicity_of_a_repeated_call() -> None:
    retry = pipeline_steps()
    retry.insert(
        2, Step("report", {"input": "/w/clean.csv"}, {"error": "timeout"}, reads=["/w/clean.csv"])
    )
    runs = [
        synthetic_run("a", pipeline_steps()),
        synthetic_run("b", retry),
        synthetic_run("c", pipeline_steps()),
    ]
    doc = compare(runs)
    report_nodes = [n for n in doc["joined"]["nodes"] if n["tool"] == "report"]
    assert sum(n["multiplicity"].get("b", 0) for n in report_nodes) == 2
    assert {n["support"] for n in report_nodes} <= {1, 3}
    assert sum(len(n["members"]) for n in doc["joined"]["nodes"]) == 4 + 3 + 3


def test_coverage_matrix_and_intersections() -> None:
    doc = compare(five_runs())
    cov = doc["coverage"]
    assert cov["tools"] == ["inspect", "load", "report", "transform"]
    assert cov["matrix"]["r4"] == {"inspect": 1, "load": 1, "report": 1, "transform": 1}
    assert cov["matrix"]["r0"]["inspect"] == 0
    assert cov["intersections"] == [
        {"tools": ["load", "report", "transform"], "runs": ["r0", "r1", "r2", "r3"], "size": 4},
        {"tools": ["inspect", "load", "report", "transform"], "runs": ["r4"], "size": 1},
    ]


def test_methods_are_never_mixed_and_each_is_right() -> None:
    doc = compare([synthetic_run("r", pipeline_steps(detour=True))])
    edges = reported_edges(doc["provenance"]["r"])
    exact = {(p, c) for p, c, m in edges if m == "exact_reference"}
    observed = {(p, c) for p, c, m in edges if m == "observed_dataflow"}
    # exact: transform's source is load's path; inspect's table and report's input are values of
    # no result (transform's result names /w/clean.csv under "output"), so they reference it
    assert exact == {("call_1", "call_2"), ("call_2", "call_3"), ("call_2", "call_4")}
    assert observed == {("call_1", "call_2"), ("call_2", "call_3"), ("call_2", "call_4")}
    for edge in doc["provenance"]["r"]["edges"]:
        assert isinstance(edge["method"], str)
    flows = [e for e in doc["provenance"]["r"]["edges"] if e["method"] == "observed_dataflow"]
    assert {e["detail"]["path"] for e in flows} == {"/w/raw.csv", "/w/clean.csv"}
    assert all(e["detail"]["written"] < e["detail"]["read"] for e in flows)


def test_exact_reference_takes_the_latest_producer_and_ignores_small_values() -> None:
    steps = [
        Step("a", {}, {"file": "/w/m.py", "count": 3, "flag": True}),
        Step("b", {"n": 3, "flag": True}, {"x": "zz"}),
        Step("a", {}, {"file": "/w/m.py"}),
        Step("c", {"target": "/w/m.py"}, {}),
    ]
    doc = compare([synthetic_run("r", steps)])
    exact = {(p, c) for p, c, m in reported_edges(doc["provenance"]["r"]) if m == "exact_reference"}
    assert exact == {("call_3", "call_4")}


def test_observed_dataflow_needs_a_read_after_another_calls_write() -> None:
    steps = [
        Step("w1", writes=["/w/f"]),
        Step("rw", reads=["/w/f"], writes=["/w/f"]),  # opened and wrote: no read
        Step("r", reads=["/w/f"]),  # the latest write before it is rw's
        Step("r0", reads=["/w/never-written"]),
    ]
    doc = compare([synthetic_run("r", steps)])
    observed = {
        (p, c) for p, c, m in reported_edges(doc["provenance"]["r"]) if m == "observed_dataflow"
    }
    assert observed == {("call_2", "call_3")}


def test_candidates_are_flagged_scored_and_separate() -> None:
    steps = [
        Step("search", {"q": "revenue"}, {"columns": ["region", "revenue_total"]}),
        Step("query", {"sql": "select region from t"}, {}),
    ]
    doc = compare([synthetic_run("r", steps)])
    cands = [e for e in doc["provenance"]["r"]["edges"] if e["method"] == "candidate"]
    assert len(cands) == 1
    assert cands[0]["detail"] == {"tokens": ["region"], "candidate": True}
    assert 0 < cands[0]["score"] <= 1
    assert not list(doc["joined"]["edges"])  # candidates never reach the joined graph


def closed_form(tool_sets: dict[str, frozenset[str]], scores: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for run, tools in tool_sets.items():
        for t in tools:
            out[t] = out.get(t, 0.0) + scores[run] / len(tools) / len(tool_sets)
    return out


def test_exact_shapley_matches_the_closed_form_of_its_value_function() -> None:
    tool_sets = {"a": frozenset("xy"), "b": frozenset("xyz"), "c": frozenset("z")}
    scores = {"a": 1.0, "b": 0.6, "c": 0.3}
    impact = shapley(tool_sets, scores)
    assert impact["method"] == "exact"
    expected = closed_form(tool_sets, scores)
    for t, v in impact["tools"].items():
        assert v["shapley"] == pytest.approx(expected[t])
    assert sum(v["shapley"] for v in impact["tools"].values()) == pytest.approx(
        sum(scores.values()) / 3
    )


def test_sampled_shapley_beyond_12_tools_is_within_its_error() -> None:
    tools = [f"t{i:02d}" for i in range(15)]
    tool_sets = {
        f"r{n}": frozenset(c) for n, c in enumerate(itertools.combinations(tools, 4)) if n % 7 == 0
    }
    scores = {r: (int(r[1:]) * 37 % 100) / 100 for r in tool_sets}
    impact = shapley(tool_sets, scores, samples=400, seed=1)
    assert impact["method"] == "permutation_sampling"
    assert impact["samples"] == 400
    expected = closed_form(tool_sets, scores)
    for t, v in impact["tools"].items():
        assert v["stderr"] > 0
        assert abs(v["shapley"] - expected[t]) <= 5 * v["stderr"] + 1e-12


def test_ablation_reports_every_component_and_clustering_is_deterministic() -> None:
    runs = five_runs()
    doc = compare(runs)
    again = compare(list(runs))
    assert doc == again
    ablation = doc["joined"]["ablation"]
    assert set(ablation["dropped"]) == {"tool", "io", "context", "lineage"}
    assert ablation["calls"] == 16
    assert all(0 <= v["changed"] <= 16 for v in ablation["dropped"].values())


def test_a_threshold_of_one_splits_differing_capsules() -> None:
    doc = compare(five_runs(), CompareConfig(threshold=1.0))
    transforms = [n for n in doc["joined"]["nodes"] if n["tool"] == "transform"]
    assert sum(n["support"] for n in transforms) == 5
    # transform's context in r4 differs (it also informs inspect): its own node at threshold 1
    assert sorted(n["support"] for n in transforms) == [1, 4]


def test_markdown_names_every_run_and_unknowns() -> None:
    text = render_markdown(compare(five_runs()))
    for n in range(5):
        assert f"| r{n} |" in text
    assert "unknown" in text  # tokens and cost were not stated
    assert "Value function:" in text


def test_markdown_says_why_there_is_no_impact_and_no_edge() -> None:
    """Two unscored runs (what two plain ``observe`` runs give): compare.md showed "Method:
    unknown." over an empty Shapley table and an edge list with nothing under it."""
    doc = compare([synthetic_run(f"r{n}", [Step("ls", {"dir": "/w"}, {"n": 1})]) for n in (0, 1)])
    assert doc["joined"]["edges"] == []
    text = render_markdown(doc)
    assert "No tool impact: no run has a score" in text
    assert "--scores FILE" in text
    assert "| tool | Shapley value |" not in text
    assert "Edges (confirmed dependencies only):\n\n- none" in text


def test_duplicate_run_ids_and_schema_breaks_are_refused() -> None:
    run = synthetic_run("same", pipeline_steps())
    with pytest.raises(DecodeError, match="same run id"):
        compare([run, run])
    doc = compare([run])
    doc["version"] = 2
    with pytest.raises(DecodeError, match="version"):
        validate_document(doc)
    assert math.isclose(doc["impact"]["runs_scored"], 0)


def test_a_thing_without_a_stable_key_gives_no_feature() -> None:
    """A process, file or endpoint with the empty key (nothing stable observed of it) adds no
    feature, and a call naming no tool has a tool feature of its own: two runs are never joined
    by what nobody observed (``docs/compare.md``, "joined")."""
    from otel_bridge.compare.inputs import Call, FileAccess, RunData
    from otel_bridge.compare.joined import capsules

    def run(n: int) -> RunData:
        call = Call(
            id=f"tool_call:t{n}:s",
            tool="unknown_tool",
            key="",
            call_id=None,
            start=1,
            end=2,
            processes=[f"process:h:{n}:?", f"process:h:{n}0:1"],
            reads=[FileAccess(f"process:h:{n}0:1", "file:/a", 1, 1)],
            endpoints=["endpoint:tcp:10.0.0.1:80"],
        )
        keys = {
            f"process:h:{n}:?": "",
            f"process:h:{n}0:1": "process:/bin/cat:cat a",
            "file:/a": "",
            "endpoint:tcp:10.0.0.1:80": "endpoint:tcp:10.0.0.1:80",
        }
        return RunData(id=f"r{n}", path="", calls=[call], keys=keys, metrics={})

    (first,) = capsules(run(1), [])
    (second,) = capsules(run(2), [])
    assert first[0] == {"unkeyed:tool_call:t1:s"}
    assert second[0] != first[0]
    assert first[1] == {"endpoint:endpoint:tcp:10.0.0.1:80"}  # no "read:" of a keyless file
    assert first[2] == {"proc:process:/bin/cat:cat a"}  # no "proc:" of a keyless process
