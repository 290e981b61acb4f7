"""Edge cases of the run directory: modes, atomic writes and manifest checks."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from otel_bridge import rundir
from otel_bridge.errors import VerificationError


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_nested_files_are_listed_in_the_manifest_and_verified(tmp_path: Path) -> None:
    """A file in a subfolder appears in the manifest by its relative path, with digest and size,
    and a change to it is reported by that path."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    Path(run.path, "sub").mkdir()
    rel = "sub/blob"
    rundir.write_private(run.file(rel), b"abc")
    run.write_json(rundir.SUMMARY, {"exit": 0})
    run.write_manifest({"id": "run-1"})
    manifest = json.loads(Path(run.file(rundir.MANIFEST)).read_text())
    assert manifest["files"][rel] == {"sha256": hashlib.sha256(b"abc").hexdigest(), "bytes": 3}
    assert manifest["run"] == {"id": "run-1"}
    assert _mode(Path(run.path, "sub")) == 0o700
    Path(run.file(rel)).write_bytes(b"abd")
    assert rundir.verify(run.path) == [f"modified: {rel}"]


def test_verify_reports_every_problem_kind_sorted(tmp_path: Path) -> None:
    """Missing, modified and unexpected files are all reported in one pass."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    for name in ("a.json", "b.json", "c.json"):
        Path(run.file(name)).write_text(name)
    run.write_manifest()
    os.unlink(run.file("a.json"))
    Path(run.file("b.json")).write_text("changed")
    Path(run.file("z.txt")).write_text("new")
    assert rundir.verify(run.path) == ["missing: a.json", "modified: b.json", "unexpected: z.txt"]


def test_verify_treats_a_malformed_entry_as_modified(tmp_path: Path) -> None:
    """A file entry that is not an object (no digest) is reported as modified, not a crash."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    Path(run.file("a.json")).write_text("x")
    run.write_manifest()
    path = Path(run.file(rundir.MANIFEST))
    manifest = json.loads(path.read_text())
    manifest["files"]["a.json"] = "not-an-object"
    path.write_text(json.dumps(manifest))
    assert rundir.verify(run.path) == ["modified: a.json"]


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ({"format": rundir.MANIFEST_FORMAT, "files": ["a"]}, "no file list"),
        ({"format": rundir.MANIFEST_FORMAT}, "no file list"),
        ([1, 2], "not an otel-bridge manifest"),
        ({"format": "other", "files": {}}, "not an otel-bridge manifest"),
    ],
)
def test_verify_rejects_structurally_wrong_manifests(
    tmp_path: Path, manifest: object, message: str
) -> None:
    """A manifest of the wrong shape raises VerificationError naming the problem."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    Path(run.file(rundir.MANIFEST)).write_text(json.dumps(manifest))
    with pytest.raises(VerificationError, match=message):
        rundir.verify(run.path)


def test_directory_in_place_of_a_listed_file_is_missing(tmp_path: Path) -> None:
    """A directory where a listed file was is reported as missing (not read as a file)."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    Path(run.file("a.json")).write_text("x")
    run.write_manifest()
    os.unlink(run.file("a.json"))
    os.mkdir(run.file("a.json"))
    assert rundir.verify(run.path) == ["missing: a.json"]


def test_write_private_replaces_atomically_and_keeps_no_temporary(tmp_path: Path) -> None:
    """Overwriting a file replaces its content whole, fixes its mode and leaves no temp file."""
    target = tmp_path / "f.json"
    target.write_text("old content that is longer")
    os.chmod(target, 0o644)
    rundir.write_private(str(target), b"new")
    assert target.read_bytes() == b"new"
    assert _mode(target) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_write_private_into_missing_directory_raises_and_leaves_nothing(tmp_path: Path) -> None:
    """Writing into a directory that does not exist raises and creates nothing."""
    with pytest.raises(FileNotFoundError):
        rundir.write_private(str(tmp_path / "absent" / "f"), b"x")
    assert list(tmp_path.iterdir()) == []


def test_write_private_cleans_its_temporary_when_replace_fails(tmp_path: Path) -> None:
    """When the final rename fails (target is a directory) the temporary file is removed."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "inner").write_text("keep")
    with pytest.raises(OSError, match="d"):
        rundir.write_private(str(tmp_path / "d"), b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_create_is_idempotent_and_re_privatises(tmp_path: Path) -> None:
    """create() on an existing, too-open directory succeeds and resets it to 0700."""
    path = tmp_path / "r"
    path.mkdir(mode=0o755)
    os.chmod(path, 0o755)
    run = rundir.RunDir.create(str(path))
    assert _mode(run.path) == 0o700
    assert rundir.RunDir.create(str(path)).path == run.path


def test_create_resolves_relative_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative run path is stored absolute, so later file() calls do not depend on the cwd."""
    monkeypatch.chdir(tmp_path)
    run = rundir.RunDir.create("rel-run")
    assert run.path == str(tmp_path / "rel-run")
    assert run.file("x") == str(tmp_path / "rel-run" / "x")


def test_manifest_written_by_another_process_verifies_here(tmp_path: Path) -> None:
    """A manifest written by a separate Python process verifies cleanly in this one."""
    path = tmp_path / "r"
    code = (
        "from otel_bridge import rundir;"
        f"r=rundir.RunDir.create({str(path)!r});"
        "r.write_json('summary.json',{'a':1});r.write_manifest()"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20)
    assert rundir.verify(str(path)) == []
    assert _mode(path / rundir.MANIFEST) == 0o600


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=32), min_size=1, max_size=6))
def test_manifest_round_trips_any_file_set(
    tmp_path_factory: pytest.TempPathFactory, blobs: list[bytes]
) -> None:
    """For any set of written files the fresh manifest verifies and lists each file once."""
    run = rundir.RunDir.create(str(tmp_path_factory.mktemp("r") / "run"))
    for n, blob in enumerate(blobs):
        rundir.write_private(run.file(f"{n}.bin"), blob)
    run.write_manifest()
    assert rundir.verify(run.path) == []
    listed = json.loads(Path(run.file(rundir.MANIFEST)).read_text())["files"]
    assert listed == {
        f"{n}.bin": {"sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
        for n, blob in enumerate(blobs)
    }
