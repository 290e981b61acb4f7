"""Issue 11, reproduction 5: ``auto`` picks a backend per plane among those that work here.

* Without CAP_SYS_ADMIN (fanotify refused) the file plane still comes from a backend that works
  (strace), and the summary names which backend observed which plane.
* Root with no capability at all, and a plain unprivileged user running a standing collector,
  still get processes, files and connections (strace, attached to processes of their own user).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from standing_support import (
    IS_ROOT,
    REPO,
    RunningCollector,
    need,
    run_agent,
    subprocess_env,
    unprivileged_prefix,
)


def observe_dropped(tmp_path: Path, caps: str) -> tuple[dict[str, Any], dict[str, Any], Path]:
    """``observe`` of a shell command that writes a file, under ``setpriv --bounding-set=CAPS``;
    its summary, its graph and the file's path."""
    if not IS_ROOT:
        pytest.skip("dropping capabilities from root needs root")
    need("setpriv")
    need("strace")
    out = tmp_path / "written.txt"
    run_dir = tmp_path / "run"
    cmd = ["setpriv", f"--bounding-set={caps}", "--inh-caps=-all"]
    cmd += [sys.executable, "-m", "otel_bridge", "observe", "-o", str(run_dir)]
    cmd += ["--", "sh", "-c", f"echo privileges > {out}"]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    graph = json.loads((run_dir / "graph.json").read_text())
    return summary, graph, out


def file_paths(graph: dict[str, Any]) -> set[str]:
    """Paths of the graph's file nodes."""
    return {n["facts"]["path"] for n in graph["nodes"] if n["kind"] == "file" and n["facts"]}


def test_without_cap_sys_admin_files_are_still_observed(tmp_path: Path) -> None:
    """Reproduction 5: fanotify is refused, so the file plane comes from strace; processes
    stay with the process connector, and the summary says which backend observed what."""
    summary, graph, out = observe_dropped(tmp_path, "-sys_admin")
    files = summary["collection"]["file"]
    assert files.startswith("available: strace:"), summary["collection"]
    assert summary["collection"]["process"].startswith("available: linux:")
    assert "per plane: process: linux, file: strace" in summary["host_backend"]
    assert summary["host_backend_name"] == "linux+strace"
    assert str(out) in file_paths(graph)


def test_with_no_capability_at_all_every_plane_still_observed(tmp_path: Path) -> None:
    """Root with an empty bounding set (the issue's exact command): no fanotify and no eBPF
    (the process connector may still be allowed, depending on the kernel); the file plane
    comes from strace and the file write is recorded."""
    summary, graph, out = observe_dropped(tmp_path, "-all")
    assert summary["collection"]["file"].startswith("available: strace:"), summary["collection"]
    assert "ebpf:" in summary["host_backend"]  # skipped, with its reason
    assert summary["collection"]["process"].startswith("available: ")
    assert str(out) in file_paths(graph)


@pytest.mark.slow  # ~15 s: a collector and an agent under strace
def test_standing_collector_as_an_unprivileged_user(tmp_path: Path) -> None:
    """A plain user's standing collector (configs/local.yaml) follows that user's SDK agent
    (strace for files and connections; no fanotify, no eBPF) and records its process, file
    write and connection."""
    need("strace")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
    prefix = unprivileged_prefix()
    os.chmod(tmp_path, 0o777)
    graph_path = tmp_path / "graph.json"
    env = {"OTEL_BRIDGE_GRAPH": str(graph_path), "OTEL_BRIDGE_RECORDS": str(tmp_path / "r.jsonl")}
    collector = RunningCollector(REPO / "configs" / "local.yaml", tmp_path, env, prefix)
    agent, out, port = run_agent(collector, tmp_path, "http/protobuf", prefix)
    assert "receiver host: strace" in collector.output
    graph: dict[str, Any] = json.loads(graph_path.read_text())
    (proc,) = [
        n for n in graph["nodes"] if n["kind"] == "process" and n["facts"]["pid"] == agent.pid
    ]
    targets = {e["target"] for e in graph["edges"] if e["source"] == proc["id"]}
    assert f"file:{out}" in targets or str(out) in file_paths(graph), targets
    ports = {n["facts"]["port"] for n in graph["nodes"] if n["kind"] == "endpoint"}
    assert port in ports


def test_a_plain_users_observe_says_which_stronger_backends_it_lacks(tmp_path: Path) -> None:
    """``observe`` as a plain user printed ``backend:  strace`` (or ``portable``) and its
    planes, but not why nothing stronger ran; the reasons (``linux: needs root ...``) were in
    summary.json only. The printed backend line now names them: what more privilege gives."""
    prefix = unprivileged_prefix()
    os.chmod(tmp_path, 0o777)
    run_dir = tmp_path / "run"
    cmd = [*prefix, sys.executable, "-m", "otel_bridge", "observe", "--no-review", "-o"]
    cmd += [str(run_dir), "--", "sh", "-c", f"echo plain > {tmp_path / 'out.txt'}"]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    skipped = summary["host_backends_skipped"]
    assert any(s.startswith("linux: ") for s in skipped), summary
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("  backend:  ")]
    assert line == (
        f"  backend:  {summary['host_backend_name']} (not used here: {'; '.join(skipped)})"
    ), proc.stderr
