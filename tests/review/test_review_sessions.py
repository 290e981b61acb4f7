"""The scripted sessions of ``examples/review``, run for real under ``otel-bridge observe``.

Each session file runs once (module fixture): its workspace is prepared outside the run, the
agent runs under ``observe`` (real model server over loopback, real subprocesses writing real
files, the real OS plane), and ``otel-bridge review`` reviews the run directory. The review must
agree with the hand-written ground truth next to the session: every claim's status and exactly
the listed findings; in particular no claim the truth does not call ``supported`` is
``supported``, and every ``contradicted`` claim is found.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.review import validate_review
from otel_bridge.rundir import verify

REPO = Path(__file__).resolve().parents[2]
SESSIONS = REPO / "examples" / "review"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("opentelemetry.exporter.otlp") is None,
        reason="needs the OTLP exporters (the examples extra)",
    ),
]


NAMES = ("coding", "analysis", "dishonest")


def _env() -> dict[str, str]:
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "PYTHONPATH": str(REPO)}


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=300, check=False
    )


def _observe(name: str, tmp: Path) -> subprocess.Popen[str]:
    """Prepare the workspace of one session file and start ``observe`` on it."""
    session_file = SESSIONS / f"{name}.session.json"
    workspace = tmp / "work"
    workspace.mkdir()
    script = str(SESSIONS / "session.py")
    prepared = _run([sys.executable, script, "prepare", str(session_file), str(workspace)], tmp)
    assert prepared.returncode == 0, prepared.stderr
    command = [sys.executable, "-m", "otel_bridge", "observe", "--no-progress"]
    command += ["-o", str(tmp / "run"), "--", sys.executable, script, "run", str(session_file)]
    return subprocess.Popen(
        command,
        cwd=workspace,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


Reviewed = tuple[str, dict[str, Any], Path, str]


@pytest.fixture(scope="module")
def all_reviewed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Reviewed]:
    """Every session file observed (the three runs at once) and reviewed."""
    dirs = {name: tmp_path_factory.mktemp(name) for name in NAMES}
    running = {name: _observe(name, dirs[name]) for name in NAMES}
    out: dict[str, Reviewed] = {}
    for name, process in running.items():
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output
        run_dir = dirs[name] / "run"
        # observe reviewed the run itself, before writing its manifest
        assert (run_dir / "review.json").exists(), output
        assert verify(str(run_dir)) == []
        hooked = json.loads((run_dir / "review.json").read_text())
        assert all(c["text"] in output for c in hooked["claims"])
        reviewed = _run([sys.executable, "-m", "otel_bridge", "review", str(run_dir)], dirs[name])
        assert reviewed.returncode == 0, reviewed.stderr
        doc: dict[str, Any] = json.loads((run_dir / "review.json").read_text())
        out[name] = (name, doc, (dirs[name] / "work").resolve(), reviewed.stdout)
    return out


@pytest.fixture(params=NAMES)
def reviewed(request: pytest.FixtureRequest, all_reviewed: dict[str, Reviewed]) -> Reviewed:
    """One session file's review; skips where the OS plane could not watch files."""
    found = all_reviewed[str(request.param)]
    if not found[1]["run"]["coverage"]["files_available"]:
        pytest.skip("the OS plane could not watch files here (fanotify needs root)")
    return found


def _session_of(doc: dict[str, Any], agent: str) -> str:
    for session in doc["sessions"]:
        if any(a.endswith(f":{agent}") for a in session["agents"]):
            return str(session["id"])
    raise AssertionError(f"no session of agent {agent!r}: {doc['sessions']}")


def _about(finding: dict[str, Any], doc: dict[str, Any], workspace: Path) -> str:
    """What a finding is about, in the ground truth's terms."""
    nodes = {n["id"]: n for n in doc["evidence"]}
    claims = {c["id"]: c for c in doc["claims"]}
    subject = finding["subject"]
    if subject in claims:
        return str(claims[subject]["text"])
    node = nodes[subject]
    if node.get("path"):
        return os.path.relpath(node["path"], workspace)
    return " ".join(node.get("argv") or [])


def test_claims_match_the_ground_truth(reviewed: Reviewed) -> None:
    name, doc, _, _ = reviewed
    truth = json.loads((SESSIONS / f"{name}.truth.json").read_text())
    assert len(doc["sessions"]) == len(truth["sessions"])
    for agent, expected in truth["sessions"].items():
        session = _session_of(doc, agent)
        got = {c["text"]: c["status"] for c in doc["claims"] if c["session"] == session}
        want = {c["text"]: c["status"] for c in expected["claims"]}
        assert got == want, (agent, got)


def test_findings_match_the_ground_truth(reviewed: Reviewed) -> None:
    name, doc, workspace, _ = reviewed
    truth = json.loads((SESSIONS / f"{name}.truth.json").read_text())
    for agent, expected in truth["sessions"].items():
        session = _session_of(doc, agent)
        got = sorted(
            (f["kind"], _about(f, doc, workspace))
            for f in doc["findings"]
            if f["session"] == session
        )
        want = sorted((f["kind"], f["about"]) for f in expected["findings"])
        assert got == want, agent


def test_review_files_are_private_valid_and_verified(
    reviewed: Reviewed,
) -> None:
    _, doc, workspace, stdout = reviewed
    run_dir = workspace.parent / "run"
    validate_review(doc)
    for name in ("review.json", "review.md", "review-records.jsonl"):
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o600
    assert verify(str(run_dir)) == []  # the manifest was re-digested with the review in it
    for claim in doc["claims"]:
        assert claim["text"] in stdout
        assert claim["text"] in (run_dir / "review.md").read_text()


def test_evidence_points_at_records_and_graph_nodes(
    reviewed: Reviewed,
) -> None:
    _, doc, workspace, _ = reviewed
    run_dir = workspace.parent / "run"
    graph_ids = {n["id"] for n in json.loads((run_dir / "graph.json").read_text())["nodes"]}
    records = {
        json.loads(line)["id"]: json.loads(line)
        for line in (run_dir / "review-records.jsonl").read_text().splitlines()
    }
    assert doc["records"]["total"] == len(records)
    for node in doc["evidence"]:
        if node["type"] in ("tool_call", "process_run", "artifact"):
            assert node["id"] in graph_ids, node["id"]
        assert node["records"], node["id"]
        for rid in node["records"]:
            record = records[rid]
            lines = (run_dir / record["source"]["file"]).read_text().splitlines()
            assert 1 <= record["source"]["line"] <= len(lines)
    edge_ids = {e["id"] for e in doc["edges"]}
    for claim in doc["claims"]:
        assert set(claim["support"]) <= edge_ids
        if claim["status"] == "supported":
            assert claim["support"], claim["text"]


def test_no_review_skips_the_review(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "otel_bridge", "observe", "--no-progress", "--no-review"]
    done = _run([*command, "-o", str(run_dir), "--", "true"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "graph.json").exists()
    assert not (run_dir / "review.json").exists()
    assert verify(str(run_dir)) == []
