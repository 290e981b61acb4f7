"""``observe --view``: the live page gains the tool call's process while the run is still going."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from waiting import Stderr

from viewer.viewer_support import screenshot, wait_ready

REPO = Path(__file__).resolve().parents[2]
GATE_SCRIPT = """\
import os, sys, time
# The tool's command: it runs until the test creates ./gate (bounded), so the run is provably
# still going while the test looks at the live page.
deadline = time.monotonic() + 120
while not os.path.exists("gate") and time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(0 if os.path.exists("gate") else 3)
"""

PROCESS_WITH_GATE = """() => obViewer.state.model.nodes.some(n => n.kind === 'process' && n.raw &&
    n.raw.facts && (n.raw.facts.argv || []).some(a => a.endsWith('wait_gate.py')))"""


@pytest.mark.slow
def test_live_page_gains_the_tool_process_before_the_run_ends(
    page: Any, tmp_path: Path, shots: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "wait_gate.py").write_text(GATE_SCRIPT)
    script = {
        "model": "scripted-model",
        "steps": [
            {
                "tool_calls": [
                    {
                        "name": "run_command",
                        "arguments": {"command": f"{sys.executable} wait_gate.py"},
                    }
                ]
            },
            {"content": "waited for the gate"},
        ],
    }
    (work / "script.json").write_text(json.dumps(script))
    argv = [
        sys.executable,
        "-m",
        "otel_bridge",
        "observe",
        "-o",
        str(tmp_path / "run"),
        "--no-progress",
        "--view",
        "--",
        sys.executable,
        str(REPO / "examples" / "plain_otel_agent.py"),
        "--script",
        "script.json",
    ]
    with subprocess.Popen(
        argv, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as proc:
        err = Stderr(proc, timeout=60)
        try:
            url = err.wait_for(r"live view at (http://127\.0\.0\.1:\d+/)").group(1)
            page.goto(url)
            wait_ready(page)
            assert "live, updating" in page.inner_text("#ob-status")
            page.wait_for_function(PROCESS_WITH_GATE, timeout=60_000)
            assert proc.poll() is None  # the gate is closed: the run cannot have ended
            assert not (work / "gate").exists()
            screenshot(page, shots, "live-during-run")
            (work / "gate").touch()
            page.wait_for_function("() => obViewer.state.bundle.ended === true", timeout=60_000)
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
        err.rest()
    final = json.loads((tmp_path / "run" / "graph.json").read_text())
    shown = set(page.evaluate("obViewer.nodeIds()"))
    folded = {m for f in page.evaluate("obViewer.state.model.folds").values() for m in f["members"]}
    # The finished live page renders exactly what the run directory's graph.json renders.
    assert {n for n in shown if not n.startswith("fold:")} | folded == {
        n["id"] for n in final["nodes"]
    }
    assert "run ended" in page.inner_text("#ob-status")
