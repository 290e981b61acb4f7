"""``compare`` model refinement: patch operations against the scripted model server (offline).

A real HTTP exchange with ``examples/model_server.py``; the answer mixes acceptable operations
with ones that break temporal order, the schema, name missing ids or remove observed edges.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from assist_support import ModelServers, Serve, answer
from review_support import RunBuilder, Session

from otel_bridge.assist import AuditLog, ModelConfig
from otel_bridge.cli import main
from otel_bridge.compare import compare
from otel_bridge.compare.assist import assist_compare, write_assist
from otel_bridge.compare.synthetic import Step, synthetic_run

STEPS = [
    Step("search", {"q": "sales"}, {"summary": "quarterly revenue figures"}),
    Step("chart", {"title": "Revenue quarterly chart"}, {"ok": True}),
    Step("load", {"n": 1}, {"done": True}, writes=["/w/x.csv"]),
    Step("transform", {"n": 2}, {"done": True}, reads=["/w/x.csv"], writes=["/w/y.csv"]),
]


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[Serve]:
    """Scripted model servers on loopback, stopped after the test."""
    servers = ModelServers(tmp_path)
    yield servers.serve
    servers.stop()


def _provenance() -> dict[str, Any]:
    doc = compare([synthetic_run("r1", STEPS)])
    prov: dict[str, Any] = doc["provenance"]
    return prov


def _calls(prov: dict[str, Any]) -> dict[str, str]:
    return {a["tool"]: a["id"] for a in prov["r1"]["activities"] if a["type"] == "tool_call"}


def test_checked_operations_are_kept_and_the_rest_rejected_with_why(
    tmp_path: Path, model_server: Serve
) -> None:
    prov = _provenance()
    ids = _calls(prov)
    by_method = {
        (e["source"], e["target"]): e["method"]
        for e in prov["r1"]["edges"]
        if e["relation"] == "wasInformedBy" and e["method"] != "observed"
    }
    assert by_method[(ids["chart"], ids["search"])] == "candidate"
    assert by_method[(ids["transform"], ids["load"])] == "observed_dataflow"

    def op(kind: str, source: str, target: str, **extra: Any) -> dict[str, Any]:
        return {"op": kind, "run": "r1", "source": source, "target": target, **extra}

    operations = [
        op("add", ids["transform"], ids["search"], reason="the summary shaped the transform"),
        op("remove", ids["chart"], ids["search"], relation="wasInformedBy"),
        op("add", ids["search"], ids["transform"]),  # the earlier call informed by a later one
        op("remove", ids["transform"], ids["load"]),  # an observed dataflow edge
        op("add", ids["chart"], "tool_call:does-not-exist"),
        op("add", "file:/w/x.csv", "file:/w/y.csv", relation="used"),  # entity to entity
        op("add", ids["chart"], "result:" + ids["search"], relation="used"),  # valid shape...
        {"op": "add", "run": "nope", "source": ids["chart"], "target": ids["search"]},
        op("rename", ids["chart"], ids["search"]),
        {"op": "add", "run": ["r1"], "source": ids["chart"], "target": ids["search"]},
    ]
    url = model_server(answer({"operations": operations}))
    config = ModelConfig(url, "scripted", timeout=10)
    result = assist_compare(prov, config, AuditLog(str(tmp_path / "audit.jsonl")))
    assert result["status"] == "ok"
    run = result["runs"]["r1"]
    assert [(e["source"], e["target"], e["method"]) for e in run["added"]] == [
        (ids["transform"], ids["search"], "model:scripted"),
        (ids["chart"], "result:" + ids["search"], "model:scripted"),
    ]
    assert all(e["inferred"] is True and e["candidate"] is True for e in run["added"])
    assert [(e["source"], e["target"]) for e in run["removed"]] == [(ids["chart"], ids["search"])]
    reasons = [r["reason"] for r in result["rejected"]]
    assert reasons[0].endswith("breaks temporal order")
    assert reasons[1] == "only candidate edges can be removed; this one is observed_dataflow"
    assert reasons[2] == "no target 'tool_call:does-not-exist' in run r1"
    assert reasons[3] == "used joins activity -> entity, not entity -> entity: breaks the schema"
    assert reasons[4] == "no run 'nope' in the comparison"
    assert reasons[5] == "not an operation: needs op add or remove"
    assert reasons[6] == "no run ['r1'] in the comparison"
    assert len(reasons) == 7
    # the comparison itself is untouched: observed and exact edges all still there
    assert prov == _provenance()
    [exchange] = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    shown = json.loads(exchange["request"]["messages"][1]["content"])
    assert [(c["source"], c["target"]) for c in shown["runs"]["r1"]["candidates"]] == [
        (ids["chart"], ids["search"])
    ]
    assert json.loads(exchange["response"])["choices"][0]["message"]["content"] == answer(
        {"operations": operations}
    )


def test_the_files_are_owner_only_and_summary_provenance_is_an_error(
    tmp_path: Path, model_server: Serve
) -> None:
    url = model_server(answer({"operations": []}))
    doc = compare([synthetic_run("r1", STEPS)])
    (tmp_path / "compare.json").write_text(json.dumps(doc))
    result = write_assist(str(tmp_path), str(tmp_path / "compare.json"), ModelConfig(url, "m"))
    assert result["status"] == "ok"
    assert result["runs"] == {}
    for name in ("compare-assist.json", "compare-audit.jsonl"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    summary = {"r1": {"counts": {"activities": 8}}}
    config = ModelConfig(url, "m")
    refused = assist_compare(summary, config, AuditLog(str(tmp_path / "a2.jsonl")))
    assert refused["status"] == "error"
    assert "--provenance full" in refused["error"]
    assert not (tmp_path / "a2.jsonl").exists()  # nothing was asked


def test_compare_model_writes_its_own_file_and_leaves_compare_json_alone(
    tmp_path: Path, model_server: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = []
    for name, trace in (("run", "11"), ("other", "22")):  # compare needs at least two runs
        builder = RunBuilder()
        session = Session(trace=trace * 16, task="t", answer="done", commands=[(["ls"], 0, [], [])])
        builder.add(session, 1000)
        run = builder.write(tmp_path / name)
        (run / "manifest.json").write_text(json.dumps({"format": "otel-bridge.manifest"}))
        runs.append(str(run))
    plain, assisted = tmp_path / "plain", tmp_path / "assisted"
    assert main(["compare", *runs, "-o", str(plain), "--no-ablation"]) == 0
    bad = {"op": "remove", "run": "run", "source": "x", "target": "y"}
    url = model_server(answer({"operations": [bad]}))
    argv = ["compare", *runs, "-o", str(assisted), "--no-ablation", "--model", url]
    assert main([*argv, "--model-name", "scripted"]) == 0
    assert "model model:scripted: 0 added, 0 removed, 1 rejected" in capsys.readouterr().out
    assert (plain / "compare.json").read_bytes() == (assisted / "compare.json").read_bytes()
    result = json.loads((assisted / "compare-assist.json").read_text())
    assert result["rejected"] == [{"operation": bad, "reason": "no source 'x' in run run"}]
    assert len((assisted / "compare-audit.jsonl").read_text().splitlines()) == 1
