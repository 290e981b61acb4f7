"""``otel-bridge review --model URL`` against the examples' scripted model server (offline).

The model's answer mixes one acceptable proposal with invalid and malicious ones; only the
acceptable one may come through, marked ``model:<name>``, and everything is audited.
"""

from __future__ import annotations

import json
import socket
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from assist_support import ModelServers, Serve, answer
from review_support import RunBuilder, Session

from otel_bridge.cli import main
from otel_bridge.review import build_review
from otel_bridge.rundir import RunDir, verify

TRACE = "11" * 16
SESSION = Session(
    trace=TRACE,
    task="Fix mod.py and run the tests.",
    answer="I ran `pytest -q` and all tests pass. I wrote out.txt with the results.",
    commands=[(["pytest", "-q"], 1, ["/w/mod.py"], [])],
)
CONTRADICTED = f"claim:{TRACE}:1"  # the failed pytest run contradicts it
UNSUPPORTED = f"claim:{TRACE}:2"  # no write seen, file collection not available
PROCESS = "process:h1:1002:1002"


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[Serve]:
    """Scripted model servers on loopback, stopped after the test."""
    servers = ModelServers(tmp_path)
    yield servers.serve
    servers.stop()


def _run(tmp_path: Path) -> Path:
    builder = RunBuilder()
    builder.add(SESSION, first_span=1000)
    run: Path = builder.write(tmp_path / "run", coverage=False)
    return run


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _load(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text())
    return value


MALICIOUS = {
    "supports": [
        {"claim": UNSUPPORTED, "evidence": PROCESS, "reason": "the session ran a process"},
        {"claim": UNSUPPORTED, "evidence": "process:h1:9999:9999", "reason": "invented id"},
        {"claim": CONTRADICTED, "evidence": PROCESS, "reason": "pytest ran, so tests pass"},
        {"claim": "claim:nope:1", "evidence": PROCESS},
        "not an object",
    ],
    "splits": [
        {"claim": CONTRADICTED, "parts": ["I ran `pytest -q`", "all tests pass."]},
        {"claim": UNSUPPORTED, "parts": ["I wrote out.txt", "and verified it"]},
        {"claim": [UNSUPPORTED], "parts": ["I wrote"]},
    ],
}


def test_only_checked_proposals_are_kept_and_every_exchange_is_audited(
    tmp_path: Path, model_server: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path)
    plain, _ = build_review(str(run))
    url = model_server(answer(MALICIOUS))
    assert main(["review", str(run), "--model", url, "--model-name", "scripted"]) == 0
    assert "1 supports, 1 splits accepted, 6 rejected" in capsys.readouterr().out
    # the deterministic review is exactly what it is without a model
    assert _load(run / "review.json")["claims"] == plain["claims"]
    assert _load(run / "review.json")["edges"] == plain["edges"]

    result = _load(run / "review-assist.json")
    assert result["status"] == "ok"
    assert result["model"]["method"] == "model:scripted"
    [edge] = result["edges"]
    assert (edge["source"], edge["target"], edge["relation"]) == (UNSUPPORTED, PROCESS, "supports")
    assert edge["method"] == "model:scripted"
    assert (edge["inferred"], edge["causal"], edge["grade"]) == (True, False, "D")
    assert edge["support"] == [PROCESS]  # the cited evidence id, verified to exist
    # the only status change a model can cause; the contradicted claim stays contradicted
    assert result["status_changes"] == [
        {"claim": UNSUPPORTED, "from": "unsupported", "to": "partially_supported"}
    ]
    assert result["splits"] == [
        {"claim": CONTRADICTED, "parts": ["I ran `pytest -q`", "all tests pass."]}
    ]
    reasons = [r["reason"] for r in result["rejected"]]
    assert reasons == [
        "no evidence node 'process:h1:9999:9999' in the review",
        "the claim is contradicted by observed evidence; a model cannot support it",
        "no claim 'claim:nope:1' in the review",
        "not an object",
        "part 'and verified it' is not a verbatim piece of the claim's text (in order)",
        f"no claim {[UNSUPPORTED]!r} in the review",
    ]

    [exchange] = [
        json.loads(line) for line in (run / "review-audit.jsonl").read_text().splitlines()
    ]
    assert exchange["purpose"] == "review"
    assert exchange["model"] == "scripted"
    shown = json.loads(exchange["request"]["messages"][1]["content"])
    assert [c["id"] for c in shown["claims"]] == [UNSUPPORTED]  # only the open claims
    assert json.loads(json.loads(exchange["response"])["choices"][0]["message"]["content"]) == (
        MALICIOUS
    )
    assert _mode(run / "review-audit.jsonl") == 0o600
    assert _mode(run / "review-assist.json") == 0o600


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_an_unreachable_model_is_a_message_and_the_review_is_still_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path)
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    assert main(["review", str(run), "--model", url, "--model-timeout", "5"]) == 0
    err = capsys.readouterr().err
    assert "model assistance failed" in err
    assert "cannot be reached" in err
    assert (run / "review.json").exists()
    result = _load(run / "review-assist.json")
    assert result["status"] == "error"
    assert result["edges"] == []
    [exchange] = [
        json.loads(line) for line in (run / "review-audit.jsonl").read_text().splitlines()
    ]
    assert "cannot be reached" in exchange["error"]
    assert "response" not in exchange


def test_an_answer_that_is_not_json_is_audited_and_accepts_nothing(
    tmp_path: Path, model_server: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path)
    url = model_server("Sure! The claim looks supported to me.")
    assert main(["review", str(run), "--model", url, "--quiet"]) == 0
    assert "not a JSON object" in capsys.readouterr().err
    result = _load(run / "review-assist.json")
    assert result["status"] == "error"
    assert result["status_changes"] == []
    [exchange] = [
        json.loads(line) for line in (run / "review-audit.jsonl").read_text().splitlines()
    ]
    assert "Sure!" in exchange["response"]
    assert "not a JSON object" in exchange["error"]


def test_without_model_nothing_is_asked(tmp_path: Path) -> None:
    run = _run(tmp_path)
    assert main(["review", str(run), "--quiet"]) == 0
    assert not (run / "review-assist.json").exists()
    assert not (run / "review-audit.jsonl").exists()


def test_a_verified_run_directory_still_verifies_after_the_model_pass(
    tmp_path: Path, model_server: Serve
) -> None:
    run = _run(tmp_path)
    RunDir(str(run)).write_manifest({"id": "synthetic"})
    url = model_server("```json\n" + answer({"supports": [], "splits": []}) + "\n```")
    assert main(["review", str(run), "--model", url, "--quiet"]) == 0
    assert _load(run / "review-assist.json")["status"] == "ok"  # a fenced answer is read
    assert verify(str(run)) == []


def test_an_http_error_is_a_clear_message(
    tmp_path: Path, model_server: Serve, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path)
    url = model_server(answer({})).replace("/v1", "/nowhere")
    assert main(["review", str(run), "--model", url, "--quiet"]) == 0
    assert "HTTP 404" in capsys.readouterr().err
    assert _load(run / "review-assist.json")["status"] == "error"
