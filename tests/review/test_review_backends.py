"""One reading of "what was written and reached" under the ``linux`` and ``strace`` backends,
and the opt-in artifact size and sha256 (``observe --hash-files``).

The same stdlib agent is observed for real under each backend: its tool call runs a process that
writes known bytes to ``out.txt`` and makes a non-blocking TCP connect to a listener the agent
holds. ``linux`` sees the write (fanotify close-write) and the connection (kernel socket state);
``strace`` sees ``openat(O_WRONLY|O_CREAT)`` and a ``connect`` returning ``EINPROGRESS``. The
report, the review and compare must name the same written file and the same endpoint under both,
each saying how it was observed (``otel_bridge.graph.reading``), and the weaker observation must
never be presented as the stronger one. Both runs hash the files written: the artifact has the
size and sha256 of the bytes written, read at the close (``linux``) or at the end of the run
(``strace``); a run without the flag reads no content at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli

from otel_bridge.compare.report import LEFT_OUT
from otel_bridge.testing import tool_call_agent

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow

TOOL = r"""
import select, socket, sys
with open("out.txt", "w", encoding="utf-8") as f:
    f.write("artifact bytes\n")
s = socket.socket()
s.setblocking(False)
s.connect_ex(("127.0.0.1", int(sys.argv[1])))
select.select([], [s], [], 30)
s.setblocking(True)
s.sendall(b"x")
s.recv(1)
s.close()
"""

LISTENER = r"""
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
def serve():
    conn, _ = listener.accept()
    conn.recv(1)
    conn.sendall(b"y")
    conn.close()
threading.Thread(target=serve, daemon=True).start()
port = str(listener.getsockname()[1])
"""
AGENT = tool_call_agent(
    '[sys.executable, "tool.py", port]', service="backends-agent", prelude=LISTENER
)

EXPECTED = {
    "linux": ("written", "connected"),
    "strace": ("opened_for_writing", "attempted"),
}
CONTENT = b"artifact bytes\n"
READ_AT = {"linux": ("close_write", "run_end"), "strace": ("run_end",)}
"""When the content was read: ``linux`` at the close unless the tool's close came before its fork
event was read (the event is held without its descriptor, docs/host.md), then at the end."""


def _observe(tmp_path: Path, backend: str, *extra: str) -> tuple[Path, Path]:
    work = tmp_path / (backend + "".join(extra))
    work.mkdir()
    (work / "agent.py").write_text(AGENT, encoding="utf-8")
    (work / "tool.py").write_text(TOOL, encoding="utf-8")
    run = work / "run"
    argv = ["observe", "--no-progress", "--backend", backend, *extra, "-o", str(run)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = run_cli(*argv, "--", sys.executable, "agent.py", cwd=work, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    planes = json.dumps(summary)
    if f"available: {backend}" not in planes:
        pytest.skip(f"the {backend} backend did not observe here: {done.stderr[-300:]}")
    return run, work.resolve()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    if os.geteuid() != 0:
        pytest.skip("the linux backend needs root")
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    tmp = tmp_path_factory.mktemp("backends")
    return {backend: _observe(tmp, backend, "--hash-files") for backend in EXPECTED}


def _load(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return value


@pytest.mark.parametrize("backend", sorted(EXPECTED))
def test_review_names_the_artifact_and_endpoint_with_how_they_were_seen(
    runs: dict[str, tuple[Path, Path]], backend: str
) -> None:
    run, work = runs[backend]
    wrote, reached = EXPECTED[backend]
    doc = _load(run / "review.json")
    artifacts = {n["id"]: n for n in doc["evidence"] if n["type"] == "artifact"}
    files = {n["path"]: n for n in artifacts.values() if n["kind"] == "file" and n["written"]}
    assert list(files) == [f"{work}/out.txt"]
    artifact = files[f"{work}/out.txt"]
    assert artifact["write_observed"] == wrote
    endpoints = [n for n in artifacts.values() if n["kind"] == "endpoint"]
    assert [(n["address"], n["reach_observed"]) for n in endpoints] == [("127.0.0.1", reached)]
    [produces] = [
        e for e in doc["edges"] if e["relation"] == "produces" and e["target"] == artifact["id"]
    ]
    assert produces["detail"]["observed"] == wrote
    if wrote == "written":
        assert (produces["method"], produces["inferred"]) == ("observed", False)
        assert produces["grade"] != "D"
    else:  # an open for writing is never presented as an observed write
        assert produces["method"] == "rule:opened_for_writing"
        assert (produces["inferred"], produces["grade"]) == (True, "D")
    unchecked = [f for f in doc["findings"] if f["kind"] == "unchecked_artifact"]
    assert [f["subject"] for f in unchecked] == [artifact["id"]]


def test_report_names_the_same_file_and_endpoint(runs: dict[str, tuple[Path, Path]]) -> None:
    rows = {}
    for backend, (run, work) in runs.items():
        report = (run / "report.md").read_text(encoding="utf-8")
        row = next(line for line in report.splitlines() if "tool.py" in line)
        rows[backend] = row
        assert f"{work}/out.txt (" in row
    assert "out.txt (created, wrote)" in rows["linux"] or "out.txt (wrote)" in rows["linux"]
    assert "out.txt (opened for writing)" in rows["strace"]
    port = re.compile(r"127\.0\.0\.1:\d+")
    assert port.search(rows["linux"]) is not None
    assert "completion not observed" not in rows["linux"]
    assert port.search(rows["strace"]) is not None
    assert "(connect begun, completion not observed)" in rows["strace"]


def test_compare_counts_the_same_files_and_endpoints(
    runs: dict[str, tuple[Path, Path]], tmp_path: Path
) -> None:
    dirs = [str(runs[b][0]) for b in sorted(EXPECTED)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = run_cli("compare", *dirs, "-o", str(tmp_path), env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    doc = _load(tmp_path / "compare.json")
    by_backend = dict(zip(sorted(EXPECTED), doc["runs"], strict=True))
    for backend, entry in by_backend.items():
        metrics = entry["metrics"]
        wrote, reached = EXPECTED[backend]
        assert metrics["files_written"] == 1  # out.txt, however it was seen
        assert metrics["files_written_as"][wrote] == 1
        # the tool's endpoint; the agent's own OTLP export to observe is left out, and named
        assert metrics["endpoints"] == metrics["endpoints_as"][reached] == 1
        assert len(metrics["collector_endpoints_left_out"]) == 1, metrics
    md = (tmp_path / "compare.md").read_text(encoding="utf-8")
    assert "| 1 (1 opened for writing only) | 1 (1 connect not seen to complete) |" in md
    assert LEFT_OUT in md, md


@pytest.mark.parametrize("backend", sorted(EXPECTED))
def test_the_artifact_has_the_size_and_sha256_of_the_bytes_written(
    runs: dict[str, tuple[Path, Path]], backend: str
) -> None:
    run, work = runs[backend]
    doc = _load(run / "review.json")
    [artifact] = [
        n for n in doc["evidence"] if n["type"] == "artifact" and n.get("path") == f"{work}/out.txt"
    ]
    assert artifact["content_state"] == "hashed"
    assert artifact["size"] == len(CONTENT)
    assert artifact["sha256"] == hashlib.sha256(CONTENT).hexdigest()
    assert artifact["content_read_at"] in READ_AT[backend]
    assert isinstance(artifact["content_read_time"], int)
    # the typed fact the review read it from, and review.md
    graph = _load(run / "graph.json")
    [node] = [n for n in graph["nodes"] if n["id"] == artifact["id"]]
    assert node["facts"]["content"]["sha256"] == artifact["sha256"]
    md = (run / "review.md").read_text(encoding="utf-8")
    assert f"{len(CONTENT)} bytes, sha256 `{artifact['sha256']}`" in md
    # only what the workload wrote was read: nothing of the run directory, no content stored
    os_events = (run / "os.jsonl").read_text(encoding="utf-8")
    assert "artifact bytes" not in os_events
    assert str(run) + "/" not in "".join(
        line for line in os_events.splitlines() if "file.content" in line
    )


def test_without_the_flag_no_content_is_read(tmp_path: Path) -> None:
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    run, work = _observe(tmp_path, "strace")
    doc = _load(run / "review.json")
    [artifact] = [
        n for n in doc["evidence"] if n["type"] == "artifact" and n.get("path") == f"{work}/out.txt"
    ]
    assert artifact["written"] is True
    assert (artifact["size"], artifact["sha256"], artifact["content_state"]) == (None, None, None)
    assert "file.content" not in (run / "os.jsonl").read_text(encoding="utf-8")
    graph = _load(run / "graph.json")
    [node] = [n for n in graph["nodes"] if n["id"] == artifact["id"]]
    assert "content" not in node["facts"]
    md = (run / "review.md").read_text(encoding="utf-8")
    assert "content not captured (off by default" in md
