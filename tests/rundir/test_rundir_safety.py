"""Run directories that cannot be turned against the user (issue 13, reproduction 4).

Real files, links and FIFOs on the real filesystem: nothing below a run directory is followed
out of it, nothing non-regular is opened for reading, and verify sees directories and links.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import run_cli

from otel_bridge import rundir
from otel_bridge.component import Host, Telemetry
from otel_bridge.errors import StartupError, VerificationError
from otel_bridge.exporters.file import Config, FileExporter
from otel_bridge.exporters.otlp.wal import WriteAheadLog, queue_dir_name
from otel_bridge.rundir import RunDirError


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _finishes(action: Callable[[], object], timeout: float = 20.0) -> None:
    """Run ``action`` in a thread; fail (instead of hanging the suite) if it blocks."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            action()
        except BaseException as exc:  # re-raised in the test thread
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{action} blocked for {timeout} s"
    if errors:
        raise errors[0]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside any run directory, mode 0644, that links inside will point at."""
    target = tmp_path / "outside.txt"
    target.write_text("precious\n")
    os.chmod(target, 0o644)
    return target


def test_existing_non_empty_directory_is_refused_untouched(tmp_path: Path, outside: Path) -> None:
    """-o EXISTING_DIR with contents is refused; nothing in it, or behind its links, changes."""
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    (existing / "link").symlink_to(outside)
    with pytest.raises(RunDirError, match="exists and is not empty"):
        rundir.RunDir.create(str(existing))
    assert _mode(outside) == 0o644
    assert _mode(existing) == 0o755


def test_replace_only_an_earlier_run_directory(tmp_path: Path, outside: Path) -> None:
    """replace=True empties an earlier run directory (links removed, targets kept) and refuses
    to empty a directory that is not one."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    with pytest.raises(RunDirError, match="not a run directory"):
        rundir.RunDir.create(str(plain), replace=True)
    assert (plain / "notes.txt").read_text() == "mine"

    earlier = rundir.RunDir.create(str(tmp_path / "run"))
    Path(earlier.file(rundir.OS_STREAM)).symlink_to(outside)
    (Path(earlier.path) / "sub").mkdir()
    (Path(earlier.path) / "sub" / "link").symlink_to(tmp_path)
    earlier.write_manifest()
    again = rundir.RunDir.create(earlier.path, replace=True)
    assert os.listdir(again.path) == []
    assert outside.read_text() == "precious\n"
    assert plain.exists()


def test_a_symbolic_link_as_the_run_directory_is_refused(tmp_path: Path) -> None:
    """-o LINK is refused: the run directory is never reached through a link."""
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(RunDirError, match="symbolic link"):
        rundir.RunDir.create(str(tmp_path / "link"))
    assert _mode(real) == 0o755


def test_secure_and_manifest_never_follow_links(tmp_path: Path, outside: Path) -> None:
    """Fixing modes skips links (their targets keep their mode) and the manifest records each
    link by its target without reading through it."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    Path(run.file("to-file")).symlink_to(outside)
    Path(run.file("to-dir")).symlink_to(tmp_path)
    run.write_manifest()
    assert _mode(outside) == 0o644
    manifest = json.loads(Path(run.file(rundir.MANIFEST)).read_text())
    assert manifest["entries"]["to-file"] == {"kind": "symbolic link", "target": str(outside)}
    assert "to-file" not in manifest["files"]
    assert rundir.verify(run.path) == []


def test_a_fifo_in_the_run_directory_never_blocks(tmp_path: Path) -> None:
    """A FIFO (no writer) is recorded as a fifo: securing, hashing and verifying never open it
    for reading, so they finish."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    Path(run.file(rundir.SUMMARY)).write_text("{}")
    os.mkfifo(run.file("pipe"), 0o644)
    _finishes(run.write_manifest)
    manifest = json.loads(Path(run.file(rundir.MANIFEST)).read_text())
    assert manifest["entries"]["pipe"] == {"kind": "fifo", "target": None}
    _finishes(lambda: rundir.verify(run.path))
    assert rundir.verify(run.path) == []


def test_verify_sees_an_added_empty_directory(tmp_path: Path) -> None:
    """An empty directory added after the manifest is reported as unexpected."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    Path(run.file(rundir.SUMMARY)).write_text("{}")
    run.write_manifest()
    os.mkdir(run.file("added"))
    assert rundir.verify(run.path) == ["unexpected: added (directory)"]


def test_verify_sees_a_file_swapped_for_a_link(tmp_path: Path) -> None:
    """A listed file replaced by a link to identical bytes elsewhere is reported as modified."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    Path(run.file(rundir.OS_STREAM)).write_text("same\n")
    run.write_manifest()
    copy = tmp_path / "copy.jsonl"
    copy.write_text("same\n")
    os.unlink(run.file(rundir.OS_STREAM))
    os.symlink(copy, run.file(rundir.OS_STREAM))
    assert rundir.verify(run.path) == [
        f"modified: {rundir.OS_STREAM} (now a symbolic link to {copy})"
    ]


def test_verify_sees_a_manifest_swapped_for_a_link(tmp_path: Path) -> None:
    """The manifest itself is never read through a link."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    run.write_manifest()
    real = tmp_path / "elsewhere.json"
    os.rename(run.file(rundir.MANIFEST), real)
    os.symlink(real, run.file(rundir.MANIFEST))
    with pytest.raises(VerificationError, match="not a regular file"):
        rundir.verify(run.path)


def test_an_unfinished_run_is_incomplete(tmp_path: Path) -> None:
    """begin() marks the run in progress: verify says 'incomplete: ...' (exit 1), not 'not a
    run directory'; the complete manifest replaces it."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    run.begin({"id": "r-1"})
    Path(run.file(rundir.OS_STREAM)).write_text("{}\n")
    [problem] = rundir.verify(run.path)
    assert problem.startswith("incomplete: run r-1 never finished")
    result = run_cli("verify", run.path, timeout=60)
    assert result.returncode == 1
    assert "incomplete: run r-1" in result.stderr
    run.write_manifest({"id": "r-1"})
    assert rundir.verify(run.path) == []


def test_a_required_file_never_written_is_missing(tmp_path: Path) -> None:
    """A file the run must hold (graph.json) that was never written is reported as missing."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    Path(run.file(rundir.SUMMARY)).write_text("{}")
    run.write_manifest(required=(rundir.GRAPH, rundir.SUMMARY))
    assert rundir.verify(run.path) == [f"missing: {rundir.GRAPH} (never written)"]


def _wal(run: rundir.RunDir, exporter: str) -> WriteAheadLog:
    wal = WriteAheadLog(
        run.file(rundir.QUEUE_DIR), queue_dir_name(exporter), max_batches=10, max_bytes=1 << 20
    )
    wal.open()
    return wal


def _queued_run(tmp_path: Path) -> tuple[rundir.RunDir, Path]:
    """A run directory whose exporter kept two batches in its persistent queue."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    Path(run.file(rundir.SUMMARY)).write_text("{}")
    wal = _wal(run, "otlp/jaeger")
    wal.append("traces", 1, b"first")
    wal.append("traces", 2, b"second")
    wal.close()
    run.write_manifest(mutable=(rundir.QUEUE_DIR,))
    return run, Path(run.file(rundir.QUEUE_DIR)) / queue_dir_name("otlp/jaeger")


def test_a_queue_directory_is_checked_for_its_layout_not_its_bytes(tmp_path: Path) -> None:
    """The write-ahead log's files may change after the manifest (a later collector replays
    and acknowledges them: the log rewritten, acks appended), and another exporter's queue may
    appear beside; the manifest lists none of them."""
    run, component = _queued_run(tmp_path)
    manifest = json.loads(Path(run.file(rundir.MANIFEST)).read_text())
    assert manifest["mutable"] == [rundir.QUEUE_DIR]
    assert manifest["entries"][rundir.QUEUE_DIR] == {"kind": "directory", "target": None}
    assert not [f for f in manifest["files"] if f.startswith(rundir.QUEUE_DIR + "/")]
    before = {p.name: p.read_bytes() for p in component.iterdir()}
    wal = _wal(run, "otlp/jaeger")  # the later collector: replays both, the backend takes them
    wal.ack(0)
    wal.ack(1)
    wal.close()
    _wal(run, "otlphttp/other").close()
    assert {p.name: p.read_bytes() for p in component.iterdir()} != before
    (component / "wal.log.tmp").write_bytes(b"")  # a compaction cut short
    assert rundir.check(run.path) == ([], [rundir.QUEUE_DIR])


def _ack_file_as_a_link(queue: Path, component: Path) -> None:
    (component / "wal.ack").unlink()
    (component / "wal.ack").symlink_to("/etc/passwd")


def _queue_as_a_link(queue: Path, component: Path) -> None:
    shutil.rmtree(queue)
    queue.symlink_to("/tmp")


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (lambda q, c: (q / "notes.txt").write_text("x"), "unexpected: queue/notes.txt"),
        (
            lambda q, c: (c / "x.bin").write_text("x"),
            "unexpected: queue/exporter_otlp_jaeger/x.bin",
        ),
        (
            lambda q, c: (c / "sub").mkdir(),
            "unexpected: queue/exporter_otlp_jaeger/sub (directory)",
        ),
        (lambda q, c: (q / "other").mkdir(), "unexpected: queue/other (directory)"),
        (
            _ack_file_as_a_link,
            "unexpected: queue/exporter_otlp_jaeger/wal.ack (symbolic link to /etc/passwd)",
        ),
        (
            _queue_as_a_link,
            "modified: queue (now a symbolic link to /tmp)",
        ),
        (lambda q, c: shutil.rmtree(q), "missing: queue"),
    ],
    ids=["file-in-queue", "other-file", "deeper-dir", "other-dir", "link", "queue-link", "gone"],
)
def test_anything_else_in_a_queue_directory_fails_verify(
    tmp_path: Path, tamper: Callable[[Path, Path], object], problem: str
) -> None:
    run, component = _queued_run(tmp_path)
    tamper(Path(run.file(rundir.QUEUE_DIR)), component)
    assert rundir.verify(run.path) == [problem]


def test_without_a_queue_nothing_is_mutable(tmp_path: Path) -> None:
    """A run without a queue directory records none; one added later is unexpected."""
    run = rundir.RunDir.create(str(tmp_path / "run"))
    run.write_manifest(mutable=(rundir.QUEUE_DIR,))
    assert json.loads(Path(run.file(rundir.MANIFEST)).read_text())["mutable"] == []
    (Path(run.file(rundir.QUEUE_DIR)) / "exporter_x").mkdir(parents=True)
    assert rundir.verify(run.path) == [
        "unexpected: queue (directory)",
        "unexpected: queue/exporter_x (directory)",
    ]


def _exporter(path: Path, *, append: bool) -> FileExporter:
    config = Config(path=str(path), signals=["logs"], flush_interval=0, append=append)
    return FileExporter(config, name="file", telemetry=Telemetry())


def test_file_exporter_replaces_a_link_and_never_writes_its_target(
    tmp_path: Path, outside: Path
) -> None:
    """A pre-existing link named os.jsonl is replaced by a new regular file; its target keeps
    its bytes and mode."""
    link = tmp_path / rundir.OS_STREAM
    link.symlink_to(outside)
    exporter = _exporter(link, append=False)
    exporter.start(Host())
    exporter.shutdown()
    assert outside.read_text() == "precious\n"
    assert _mode(outside) == 0o644
    assert not link.is_symlink()
    assert _mode(link) == 0o600


def test_file_exporter_appending_refuses_a_link_and_a_fifo(tmp_path: Path, outside: Path) -> None:
    """append: true refuses to open through a link or into a FIFO, at once, with a reason."""
    link = tmp_path / "link.jsonl"
    link.symlink_to(outside)
    with pytest.raises(StartupError, match="symbolic link"):
        _exporter(link, append=True).start(Host())
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(StartupError, match=str(fifo)):
        _finishes(lambda: _exporter(fifo, append=True).start(Host()))
    assert outside.read_text() == "precious\n"
