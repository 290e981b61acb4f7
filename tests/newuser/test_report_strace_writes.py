"""``report.md`` under the strace file plane names the files a tool call opened for writing.

strace sees opens with their access mode, never the write itself, so its graph has ``opened``
edges with ``file.access: write`` and no ``wrote`` edge. The report used to say "none observed"
for a ``cp`` whose destination strace had seen opened ``O_WRONLY|O_CREAT``. A real ``observe``
with the strace backend of a small agent (stdlib only: it reports its tool call over OTLP
HTTP/JSON and hands the call's trace context to the command through ``TRACEPARENT``).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from cli_support import run_cli

from otel_bridge.testing import tool_call_agent

AGENT = tool_call_agent('["cp", "src.txt", "dst.txt"]', service="nu-agent")
OBSERVE = ("observe", "--set", "receivers.host.backend=strace")


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_report_names_files_opened_for_writing(tmp_path: Path) -> None:
    (tmp_path / "src.txt").write_text("hi\n", encoding="utf-8")
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    run = tmp_path / "run"
    argv = [*OBSERVE, "-o", str(run), "--", sys.executable, "agent.py"]
    done = run_cli(*argv, cwd=tmp_path, env=os.environ.copy(), timeout=300)
    assert done.returncode == 0, done.stderr
    if "file:     available: strace" not in done.stdout + done.stderr:
        pytest.skip(f"the strace file plane is not available here: {done.stderr[-400:]}")
    report = (run / "report.md").read_text(encoding="utf-8")
    row = next(line for line in report.splitlines() if "`cp src.txt dst.txt`" in line)
    assert f"{tmp_path}/dst.txt (opened for writing)" in row
    assert "src.txt (" not in row  # opened for reading only: not a write
