"""Short-lived children under CPU load: each recorded argv is the child's own, or absent.

The workload (a Python parent) starts many ~5 ms children (``cp``, ``true``, ``sh -c``,
``sleep``) through ``subprocess`` and writes a receipt for each: its pid and the argv it was
given. Two busy processes load both cores meanwhile. Every child's records are checked against
its receipt: an exec argv equals the receipt or is absent (unknown, counted), and no record of a
child carries the parent's argv or executable (the fork-time image of issue 12).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from host_support import Gated, Observed, finish, needs_root, python, require_backend
from host_support import start_receiver as start
from waiting import poll

from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.procfs import ProcessInfo
from otel_bridge.receivers.host.starts import StartGate, identity_only, read_image
from otel_bridge.testing import SHORT_CHILDREN_WORKLOAD, cpu_load

CHILDREN = 40


def run_children(backend: str, tmp_path: Path, n: int = CHILDREN) -> tuple[Observed, list[Any]]:
    """Observe the parent workload under load; its receipts."""
    (tmp_path / "parent.py").write_text(SHORT_CHILDREN_WORKLOAD)
    src = tmp_path / "src.txt"
    src.write_text("data\n")
    receipts = tmp_path / "receipts.json"
    script = f"exec {shlex.quote(python())} parent.py {receipts} {src} {n}"
    work = Gated(script, cwd=str(tmp_path))
    try:
        observed = start(HostConfig(backend=backend, startup_timeout=30), work.pid)
    except BaseException:
        work.kill()
        raise
    with cpu_load():
        work.release()
        assert work.wait(timeout=120) == 0
    observed.receiver.wait_idle()
    return finish(observed), json.loads(receipts.read_text())


def check_children(observed: Observed, receipts: list[Any], parent_pid: int) -> dict[str, int]:
    """Counts of exact, unknown and wrong argv among the receipts' children."""
    parent = observed.for_pid("process.exec", parent_pid) or observed.for_pid(
        "process.start", parent_pid
    )
    parent_argv = parent[-1].get("process.command_args")
    assert parent_argv, "the parent's own argv is known"
    counts = {"exact": 0, "unknown": 0, "wrong": 0, "missing": 0, "parent_image": 0}
    for receipt in receipts:
        pid = receipt["pid"]
        starts = observed.for_pid("process.start", pid)
        execs = observed.for_pid("process.exec", pid)
        for rec in starts + execs:
            if rec.get("process.command_args") == parent_argv:
                counts["parent_image"] += 1
            if "python" in str(rec.get("process.executable.name", "")):
                counts["parent_image"] += 1
        if not execs:
            counts["missing"] += 1
            continue
        argv = execs[0].get("process.command_args")
        if argv is None:
            counts["unknown"] += 1
        elif list(argv) == receipt["argv"]:
            counts["exact"] += 1
        else:
            counts["wrong"] += 1
    return counts


_ROOT = (pytest.mark.root, needs_root)


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend", [pytest.param("linux", marks=_ROOT), pytest.param("strace", marks=_ROOT)]
)
def test_short_children_under_load_are_never_mislabelled(backend: str, tmp_path: Path) -> None:
    """Every child's exec argv is its receipt's or unknown; none carries the parent's image."""
    require_backend(backend)
    observed, receipts = run_children(backend, tmp_path)
    assert len(receipts) == CHILDREN
    counts = check_children(observed, receipts, receipts_parent(observed, receipts))
    print(f"{backend}: {counts}")  # the unknown count is part of the report
    assert counts["parent_image"] == 0
    assert counts["wrong"] == 0
    assert counts["missing"] == 0
    assert counts["exact"] + counts["unknown"] == CHILDREN
    unknown = observed.host.telemetry.counters().get("receiver.host.argv_unknown", 0)
    assert unknown >= counts["unknown"]
    if counts["unknown"]:
        state = [
            a for a in observed.events("collection.state") if a["collection.name"] == "process"
        ][-1]
        assert "argv could not be read" in str(state["collection.reason"])
    if backend == "strace":
        assert counts["exact"] == CHILDREN  # the traced argv is exact


def receipts_parent(observed: Observed, receipts: list[Any]) -> int:
    """The pid of the children's parent, from their start records."""
    first = observed.for_pid("process.start", receipts[0]["pid"])
    assert first, "the first child's start was recorded"
    return int(first[0]["process.parent_pid"])


class _Ctx:
    """The parts of a HostContext that read_image uses."""

    def __init__(self) -> None:
        from otel_bridge.receivers.host.config import HostConfig as Config
        from otel_bridge.redaction import Redactor

        self.redactor = Redactor()
        self.config = Config()


def test_read_image_refuses_another_identity() -> None:
    """An image is read only for the identity it belongs to (a recycled pid is not ours)."""
    proc = subprocess.Popen(["sleep", "5"])
    try:
        ctx: Any = _Ctx()
        from otel_bridge.identity import linux_start_time_ms

        start_ms = linux_start_time_ms(proc.pid)
        assert start_ms is not None
        # until the child has exec'd sleep (200 reads in a row could all fall before the exec,
        # or inside it, on a loaded machine: CI saw none of them succeed)
        image = poll(
            lambda: read_image(ctx, proc.pid, start_ms),
            lambda found: found is not None and found.argv == ["sleep", "5"],
        )
        assert image is not None
        assert image.argv == ["sleep", "5"]
        assert read_image(ctx, proc.pid, start_ms + 10_000) is None
    finally:
        proc.kill()
        proc.wait()
    assert read_image(ctx, proc.pid, start_ms) is None  # gone


def test_identity_only_drops_the_image() -> None:
    """identity_only keeps pid, start, parent and the approximate flag, nothing else."""
    info = ProcessInfo(pid=5, start_ms=9, ppid=2, approximate=True, exe="/x", argv=["x"], cwd="/")
    bare = identity_only(info)
    assert (bare.pid, bare.start_ms, bare.ppid, bare.approximate) == (5, 9, 2, True)
    assert (bare.exe, bare.argv, bare.cwd, bare.env) == ("", [], "", None)


def test_gate_holds_a_start_until_exec_and_emits_no_image(tmp_path: Path) -> None:
    """A child that execs gets an identity-only start; one gone unseen counts image_unknown."""
    from test_host_interpreters import Harness

    h = Harness()
    gate = StartGate(h.ctx, attribution="syscall")
    gate.forked(ProcessInfo(pid=10**7 + 1, start_ms=5, ppid=1, exe="/py", argv=["py"]), 1)
    gate.forked(ProcessInfo(pid=10**7 + 2, start_ms=6, ppid=1), 2)
    assert gate
    assert h.named("process.start") == []  # held
    gate.execed(10**7 + 1)
    gate.exited(10**7 + 2)
    starts = h.named("process.start")
    assert [s["process.pid"] for s in starts] == [10**7 + 1, 10**7 + 2]
    assert all("process.command_args" not in s for s in starts)
    assert all("process.executable.path" not in s for s in starts)
    assert gate.image_unknown == 1
    assert not gate
