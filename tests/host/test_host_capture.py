"""The opt-in content capture's readings (``receivers/host/capture.py``) on real files.

What a reading cannot establish is stated: a file above ``max_bytes`` keeps its size only, a
gone file is ``missing``, a pipe or directory is never opened (a FIFO would block a reader), and
the paths read at the end of the run are exactly those written and still there under that name,
and those only read (inputs), runtime reads and kernel interfaces left out.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from otel_bridge.model import AnyValue, LogRecord
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.capture import CaptureConfig, ContentCapture, read_path
from otel_bridge.testing import make_log


def test_a_small_file_is_hashed(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"hello\n")
    assert read_path(str(f), 1024) == {
        "file.content.state": "hashed",
        "file.size": 6,
        "file.hash.sha256": hashlib.sha256(b"hello\n").hexdigest(),
    }


def test_an_empty_file_is_hashed_as_empty(tmp_path: Path) -> None:
    f = tmp_path / "empty"
    f.write_bytes(b"")
    got = read_path(str(f), 0)
    assert got["file.content.state"] == "hashed"
    assert got["file.hash.sha256"] == hashlib.sha256(b"").hexdigest()


def test_a_file_above_max_bytes_keeps_its_size_only(tmp_path: Path) -> None:
    f = tmp_path / "big.bin"
    f.write_bytes(b"x" * 5000)
    assert read_path(str(f), 4096) == {"file.content.state": "too_large", "file.size": 5000}


def test_missing_pipes_and_directories_are_stated_not_read(tmp_path: Path) -> None:
    assert read_path(str(tmp_path / "gone"), 10) == {"file.content.state": "missing"}
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_path(str(fifo), 10) == {"file.content.state": "not_regular"}  # did not block
    assert read_path(str(tmp_path), 10) == {"file.content.state": "not_regular"}


def _record(name: str, attrs: dict[str, AnyValue]) -> LogRecord:
    return make_log(event_name=name, attributes=attrs)


def test_the_run_end_reads_the_paths_written_or_read_and_still_there(tmp_path: Path) -> None:
    """Written files still there under their name, and files only read (inputs), are read at
    the end; runtime reads (bytecode, libraries), kernel interfaces and the run directory are
    not."""
    kept, moved, deleted, read_only = (tmp_path / n for n in ("kept", "moved", "deleted", "ro"))
    for f in (kept, deleted, read_only):
        f.write_bytes(b"data")
    (tmp_path / "run").mkdir()
    sent: list[LogRecord] = []
    capture = ContentCapture(
        CaptureConfig(file_hashes=True),
        lambda name, _t, attrs: _record(name, attrs),
        sent.append,
        exclude=(str(tmp_path / "run"),),
    )
    events: list[tuple[str, dict[str, AnyValue]]] = [
        ("file.open", {"file.path": str(kept), "file.access": "write"}),
        ("file.open", {"file.path": str(read_only), "file.access": "read"}),
        ("file.write", {"file.path": str(tmp_path / "old")}),
        ("file.rename", {"file.path": str(tmp_path / "old"), "file.new_path": str(moved)}),
        ("file.create", {"file.path": str(deleted)}),
        ("file.delete", {"file.path": str(deleted)}),
        ("file.write", {"file.path": str(tmp_path / "run" / "graph.json")}),
        ("file.open", {"file.path": str(tmp_path / "__pycache__" / "m.cpython-311.pyc")}),
        ("file.open", {"file.path": "/proc/self/status", "file.access": "read"}),
        ("file.read", {"file.path": str(tmp_path / "run" / "os.jsonl")}),
    ]
    moved.write_bytes(b"moved!")
    for name, attrs in events:
        capture.note(_record(name, attrs))
    capture.finish()
    got = {str(r.attributes["file.path"]): r.attributes for r in sent}
    assert sorted(got) == sorted([str(kept), str(moved), str(read_only)])
    assert got[str(moved)]["file.size"] == 6
    assert got[str(read_only)]["file.hash.sha256"] == hashlib.sha256(b"data").hexdigest()
    assert {a["file.content.read_at"] for a in got.values()} == {"run_end"}
    assert all(r.event_name == "file.content" for r in sent)


def test_capture_is_off_by_default_and_max_bytes_is_checked() -> None:
    assert HostConfig().capture == CaptureConfig(file_hashes=False)
    bad = HostConfig(capture=CaptureConfig(file_hashes=True, max_bytes=-1))
    assert bad.validate() == ["capture.max_bytes: must be >= 0"]
