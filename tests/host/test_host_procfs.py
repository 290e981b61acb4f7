"""``/proc`` reads (:mod:`otel_bridge.receivers.host.procfs`) give what a plain file read gives.

The reads are descriptor-level (``os.open``/``os.read``, fewer system calls than a buffered file
object: the ``linux`` event reader makes several per exec at real-time priority). They must
still return a file whole, however long, and None when it cannot be read.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from otel_bridge.receivers.host.procfs import read_bytes, read_process, read_stat
from otel_bridge.redaction import Redactor


def _plain(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_proc_files_read_whole(tmp_path: Path) -> None:
    """A process's ``cmdline`` and ``environ`` longer than one read come back whole, equal to a
    plain read of the same files; a regular file of several reads too."""
    big = "x" * 100_000  # one argument or variable holds at most 128 KiB
    code = "import sys; print('ready', flush=True); sys.stdin.read()"
    child = subprocess.Popen(
        [sys.executable, "-c", code, big, big],  # three reads long
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "BIG": big, "BIG2": big},
    )
    try:
        assert child.stdout is not None
        # Popen returns once the child's exec began (vfork), before its argv is in place
        assert child.stdout.readline() == b"ready\n"
        for name in ("cmdline", "environ", "stat"):
            path = f"/proc/{child.pid}/{name}"
            got = read_bytes(path)
            assert got is not None
            if name != "stat":  # the stat line changes as the child runs
                assert got == _plain(path)
        info = read_process(child.pid, Redactor())
        assert info is not None
        assert info.argv[-2:] == [big, big]
        assert read_stat(child.pid) is not None
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    data = os.urandom(300_000)
    (tmp_path / "f.bin").write_bytes(data)
    assert read_bytes(str(tmp_path / "f.bin")) == data


def test_unreadable_is_none(tmp_path: Path) -> None:
    """A file that does not exist, a directory, a process that is gone: None, never an error."""
    assert read_bytes(str(tmp_path / "missing")) is None
    assert read_bytes(str(tmp_path)) is None  # EISDIR on read
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its /proc directory is gone (pids are handed out in order)
    assert read_bytes(f"/proc/{gone.pid}/cmdline") is None
    assert read_stat(gone.pid) is None
