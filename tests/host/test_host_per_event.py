"""The per-event shortcuts change no output: a real run's records, written and redacted.

The OS stream of a real ``linux`` receiver run (files written and read back, ``true`` children,
a child whose argv holds a secret, a non-ASCII and a secret-looking file name) is encoded by the
``file`` exporter's codec and compared line by line with the standard library's encoding of the
same OTLP/JSON objects, and redacted by the ``redact`` processor and compared with a redactor
that runs every rule on every value (an extra pattern that never matches turns the shortcuts
off). The lineage's ``ended`` marks (what the socket scans skip) are checked on their own.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from host_support import Gated, finish, needs_root, python, require_backend, start_receiver

from otel_bridge.exporters.file.codec import encode_lines
from otel_bridge.model import Batch, LogRecord
from otel_bridge.otlp import json_codec
from otel_bridge.processors.redact import AttributeRedactor, Config
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.events import Lineage

WORK = r"""
import hashlib, os, subprocess, sys
root = sys.argv[1]
for i in range(40):
    path = os.path.join(root, f"f{i % 4}.bin")
    with open(path, "wb") as f:
        f.write(hashlib.sha256(str(i).encode()).digest())
    with open(path, "rb") as f:
        f.read()
    if i % 8 == 0:
        os.waitpid(os.posix_spawn("/bin/true", ["true"], os.environ), 0)
for name in ("caf\u00e9 \u00fcber.txt", "API_KEY=sk-abcdefghijklmnopqrstuv.txt", "a:1"):
    with open(os.path.join(root, name), "w") as f:
        f.write("x")
subprocess.run(["sh", "-c", "true --password hunter2 TOKEN=abc"], check=True)
"""


def _stdlib_line(record: LogRecord) -> str:
    """The line as the standard library writes it (the encoder before the orjson one)."""
    return json.dumps(json_codec.encode_logs((record,)), separators=(",", ":"), ensure_ascii=False)


@needs_root
@pytest.mark.root
def test_a_real_runs_stream_is_written_and_redacted_as_before(tmp_path: Path) -> None:
    require_backend("linux")
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "work.py").write_text(WORK)
    work = Gated(f"exec {shlex.quote(python())} work.py {root}", cwd=str(tmp_path))
    try:
        observed = start_receiver(HostConfig(backend="linux", startup_timeout=30), work.pid)
    except BaseException:
        work.kill()
        raise
    work.release()
    assert work.wait(timeout=60) == 0
    observed.wait_for("file.open", path_end="a:1")
    observed.receiver.wait_idle()
    logs = finish(observed).logs
    mine = [r for r in logs if str(r.attributes.get("file.path", "")).startswith(str(root))]
    # Paced reading lets the kernel merge a process's repeated events on one file between two
    # reads (docs/host.md), so the number of records depends on the machine's speed; every file
    # the workload touched must be there.
    names = {os.path.basename(str(r.attributes["file.path"])) for r in mine}
    assert {"f0.bin", "f1.bin", "f2.bin", "f3.bin", "caf\u00e9 \u00fcber.txt", "a:1"} <= names, (
        names
    )
    assert any("café" in str(r.attributes.get("file.path")) for r in mine)

    for record in logs:
        assert encode_lines(Batch(logs=(record,)), ("logs",)) == [_stdlib_line(record)]

    fast = AttributeRedactor(Config())
    every_rule = AttributeRedactor(Config(patterns=["(?!)"]))  # never matches: no shortcut
    for record in logs:
        assert fast.log(record) == every_rule.log(record)
        assert fast.log(record) == every_rule.log(record)  # and again, from the caches
    redacted = [fast.log(r).attributes for r in logs]
    argvs = [a["process.command_args"] for a in redacted if "process.command_args" in a]
    assert ("sh", "-c", "true --password [REDACTED] TOKEN=[REDACTED]") in argvs
    paths = {a.get("file.path") for a in redacted}
    assert f"{root}/API_KEY=[REDACTED]" in paths
    assert f"{root}/a:1" in paths


def test_ended_pids_stay_in_the_lineage_but_are_not_live() -> None:
    lineage = Lineage(10)
    lineage.add(11)
    lineage.add(12)
    lineage.ended(11)
    lineage.ended(99)  # not tracked: nothing to mark
    assert 11 in lineage
    assert lineage.snapshot() == [10, 11, 12]
    assert lineage.live() == [10, 12]
    lineage.add(11)  # the pid forked again in the lineage: a new, live process
    assert lineage.live() == [10, 11, 12]
    lineage.ended(12)
    lineage.discard(12)
    lineage.add(12)
    assert lineage.live() == [10, 11, 12]
