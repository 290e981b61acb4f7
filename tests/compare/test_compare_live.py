"""compare on real runs: scripted tasks observed by ``otel-bridge observe``, then the CLI."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.compare import validate_document
from otel_bridge.compare.gold import reported_edges

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from compare_gold import TASK, observe  # noqa: E402 (the benchmark's own way to observe a task)

GOLD = json.loads((ROOT / "examples" / "compare" / "gold.json").read_text())
PLAN = [("pipeline", "base"), ("pipeline", "detour"), ("coding", "retry")]

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three observed runs, compared by the CLI."""
    base = tmp_path_factory.mktemp("compare-live")
    runs = []
    for n, (task, variant) in enumerate(PLAN):
        run_dir, workdir = base / f"run-{n}", base / f"work-{n}"
        observe(run_dir, task, variant, workdir, _env())
        runs.append((run_dir, task, variant, workdir))
    scores = base / "scores.json"
    manifest = json.loads((runs[0][0] / "manifest.json").read_text())
    scores.write_text(json.dumps({manifest["run"]["id"]: 0.25}))
    out = base / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_bridge",
            "compare",
            *(str(r[0]) for r in runs),
            "-o",
            str(out),
            "--scores",
            str(scores),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
        env=_env(),
    )
    doc = json.loads((out / "compare.json").read_text())
    return {"runs": runs, "out": out, "doc": doc, "stdout": done.stdout}


def _run_ids(observed: dict[str, Any]) -> list[str]:
    return [json.loads((r[0] / "manifest.json").read_text())["run"]["id"] for r in observed["runs"]]


def test_compare_writes_a_schema_valid_private_document(observed: dict[str, Any]) -> None:
    doc, out = observed["doc"], observed["out"]
    validate_document(doc)
    assert [r["id"] for r in doc["runs"]] == _run_ids(observed)
    for name in ("compare.json", "compare.md"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600
    assert "compared 3 runs" in observed["stdout"]
    assert "# Comparison of 3 runs" in (out / "compare.md").read_text()


def test_coverage_matrix_equals_the_runs_receipts(observed: dict[str, Any]) -> None:
    doc = observed["doc"]
    for run_id, (_, _, _, workdir) in zip(_run_ids(observed), observed["runs"], strict=True):
        receipt = json.loads((workdir / "receipt.json").read_text())
        expected: dict[str, int] = {}
        for call in receipt["calls"]:
            expected[call["tool"]] = expected.get(call["tool"], 0) + 1
        row = {t: n for t, n in doc["coverage"]["matrix"][run_id].items() if n}
        assert row == expected
        metrics = next(r["metrics"] for r in doc["runs"] if r["id"] == run_id)
        assert metrics["tool_calls"] == len(receipt["calls"])


def test_scores_come_from_the_spans_or_the_scores_file(observed: dict[str, Any]) -> None:
    doc = observed["doc"]
    ids = _run_ids(observed)
    by_id = {r["id"]: r["metrics"] for r in doc["runs"]}
    assert by_id[ids[0]]["score"] == 0.25
    assert by_id[ids[0]]["score_source"] == "scores_file"
    assert by_id[ids[1]]["score"] == 0.9
    assert by_id[ids[1]]["score_source"] == "attribute"
    assert by_id[ids[2]]["score"] == 0.75
    assert by_id[ids[0]]["tokens"] == {"input": None, "output": None}  # no model: unknown
    assert doc["impact"]["method"] == "exact"
    assert doc["impact"]["runs_scored"] == 3


def test_dependencies_match_the_hand_written_gold(observed: dict[str, Any]) -> None:
    doc = observed["doc"]
    for run_id, (run_dir, task, variant, _) in zip(
        _run_ids(observed), observed["runs"], strict=True
    ):
        reported = reported_edges(doc["provenance"][run_id])
        gold = {tuple(e) for e in GOLD[task][variant]}
        exact = {e for e in reported if e[2] == "exact_reference"}
        assert exact == {e for e in gold if e[2] == "exact_reference"}, (task, variant)
        collection = json.loads((run_dir / "summary.json").read_text()).get("collection", {})
        if not str(collection.get("file", "")).startswith("available"):
            continue  # no file events on this host: observed_dataflow cannot be checked
        observed_edges = {e for e in reported if e[2] == "observed_dataflow"}
        assert observed_edges == {e for e in gold if e[2] == "observed_dataflow"}, (task, variant)


def test_the_pipeline_detour_is_a_support_1_node(observed: dict[str, Any]) -> None:
    joined = observed["doc"]["joined"]
    inspect = [n for n in joined["nodes"] if n["tool"] == "inspect_data"]
    assert len(inspect) == 1
    assert inspect[0]["support"] == 1
    assert inspect[0]["id"] in {d["id"] for d in joined["detours"]}
    fetch = [n for n in joined["nodes"] if n["tool"] == "fetch_data"]
    assert [n["support"] for n in fetch] == [2]


def test_one_directory_of_three_traces_splits_by_trace_or_by_session(tmp_path: Path) -> None:
    """A standing collector's output holds many runs: --group-by trace makes one per trace,
    --group-by session one per stated session (a trace stating none stays on its own)."""
    run_dir = tmp_path / "run"
    # without the launcher's TRACEPARENT, each agent starts a trace of its own, as agents
    # reporting to a standing collector do; the first two state one session
    task = f"{sys.executable} {TASK} --task pipeline"
    script = (
        f"unset TRACEPARENT; {task} --session s1 --workdir {tmp_path}/a && "
        f"{task} --variant skip --session s1 --workdir {tmp_path}/b && "
        f"{task} --variant skip --workdir {tmp_path}/c"
    )
    subprocess.run(
        [sys.executable, "-m", "otel_bridge", "observe", "-o", str(run_dir), "--", "sh", "-c",
         script],
        check=True, capture_output=True, timeout=300, env=_env(),
    )  # fmt: skip
    run_id = json.loads((run_dir / "manifest.json").read_text())["run"]["id"]
    docs = {}
    for by in ("trace", "session"):
        subprocess.run(
            [sys.executable, "-m", "otel_bridge", "compare", "--group-by", by, str(run_dir),
             "-o", str(tmp_path / by)],
            check=True, capture_output=True, timeout=300, env=_env(),
        )  # fmt: skip
        docs[by] = json.loads((tmp_path / by / "compare.json").read_text())
        assert all(r["id"].startswith(f"{run_id}#") for r in docs[by]["runs"])
    rows = sorted(docs["trace"]["coverage"]["matrix"].values(), key=lambda row: -sum(row.values()))
    assert [sum(row.values()) for row in rows] == [5, 4, 4]  # base: fetch, clean, rate, ...
    assert [row["clean_data"] for row in rows] == [1, 0, 0]  # skip: no clean_data
    assert sorted(r["metrics"]["score"] for r in docs["trace"]["runs"]) == [0.6, 0.6, 1.0]
    by_session = {r["id"].split("#", 1)[1]: r for r in docs["session"]["runs"]}
    assert len(by_session) == 2
    s1 = by_session.pop("session:s1")
    assert docs["session"]["coverage"]["matrix"][s1["id"]]["clean_data"] == 1
    assert s1["metrics"]["tool_calls"] == 9  # both traces of the session, one run
    (alone,) = by_session.values()
    assert alone["metrics"]["tool_calls"] == 4
    assert alone["metrics"]["score"] == 0.6
