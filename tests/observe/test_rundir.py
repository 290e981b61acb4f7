"""The run directory writer and its manifest (otel_bridge.rundir)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from otel_bridge import rundir
from otel_bridge.errors import VerificationError


def _mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_create_makes_private_directories(tmp_path: Path) -> None:
    """create() makes the run directory and a missing parent with mode 0700."""
    run = rundir.RunDir.create(str(tmp_path / "runs" / "r1"))
    assert _mode(run.path) == 0o700
    assert _mode(tmp_path / "runs") == 0o700


def test_write_json_is_private_sorted_and_atomic(tmp_path: Path) -> None:
    """write_json writes sorted, indented JSON with mode 0600 and leaves no temp file."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    path = run.write_json("summary.json", {"b": 1, "a": [1, 2]})
    text = Path(path).read_text()
    assert text.index('"a"') < text.index('"b"')
    assert json.loads(text) == {"a": [1, 2], "b": 1}
    assert _mode(path) == 0o600
    assert sorted(os.listdir(run.path)) == ["summary.json"]


def test_secure_fixes_modes_of_files_written_by_others(tmp_path: Path) -> None:
    """secure() forces 0600 files and 0700 folders under the run directory."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    loose = Path(run.file("loose.jsonl"))
    loose.write_text("{}\n")
    os.chmod(loose, 0o644)
    sub = Path(run.path) / "sub"
    sub.mkdir(mode=0o755)
    (sub / "x").write_text("x")
    run.secure()
    assert _mode(loose) == 0o600
    assert _mode(sub) == 0o700
    assert _mode(sub / "x") == 0o600


def test_manifest_lists_every_file_with_digest_and_size(tmp_path: Path) -> None:
    """The manifest records sha256 and byte size of each file, but not itself."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    Path(run.file(rundir.OS_STREAM)).write_text("abc")
    Path(run.path, "sub").mkdir()
    rundir.write_private(str(Path(run.path, "sub", "blob")), b"blob")
    run.write_manifest({"id": "run-9"})
    manifest = json.loads(Path(run.file(rundir.MANIFEST)).read_text())
    assert manifest["format"] == "otel-bridge.manifest"
    assert manifest["run"] == {"id": "run-9"}
    files = manifest["files"]
    assert rundir.MANIFEST not in files
    assert files[rundir.OS_STREAM] == {
        "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        "bytes": 3,
    }
    assert files["sub/blob"] == {"sha256": hashlib.sha256(b"blob").hexdigest(), "bytes": 4}
    assert rundir.verify(run.path) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "unreadable manifest"),
        ('{"format": "other"}', "not an otel-bridge manifest"),
        ('{"format": "otel-bridge.manifest"}', "no file list"),
    ],
)
def test_verify_rejects_bad_manifests(tmp_path: Path, content: str, message: str) -> None:
    """A malformed manifest is a VerificationError saying what is wrong."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    Path(run.file(rundir.MANIFEST)).write_text(content)
    with pytest.raises(VerificationError, match=message):
        rundir.verify(run.path)


def test_verify_missing_manifest(tmp_path: Path) -> None:
    """A directory without a manifest is not a run directory."""
    with pytest.raises(VerificationError, match="not a run directory"):
        rundir.verify(str(tmp_path))


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.dictionaries(
        st.sampled_from(["os.jsonl", "sem.jsonl", "graph.json", "summary.json"]),
        st.binary(max_size=64),
        min_size=1,
    ),
    st.data(),
)
def test_any_single_byte_change_is_detected(
    tmp_path_factory: pytest.TempPathFactory, contents: dict[str, bytes], data: st.DataObject
) -> None:
    """Changing, truncating or extending any one file makes verify name exactly that file."""
    run = rundir.RunDir.create(str(tmp_path_factory.mktemp("r") / "run"))
    for name, blob in contents.items():
        Path(run.file(name)).write_bytes(blob)
    run.write_manifest()
    assert rundir.verify(run.path) == []
    victim = data.draw(st.sampled_from(sorted(contents)))
    original = contents[victim]
    tampered = data.draw(st.binary(max_size=64).filter(lambda b: b != original))
    Path(run.file(victim)).write_bytes(tampered)
    assert rundir.verify(run.path) == [f"modified: {victim}"]


def test_files_skips_temporaries_and_manifest(tmp_path: Path) -> None:
    """files() lists real files only (no manifest, no in-flight temporaries)."""
    run = rundir.RunDir.create(str(tmp_path / "r"))
    Path(run.file("a.json")).write_text("1")
    Path(run.file(".tmp-abc")).write_text("partial")
    Path(run.file(rundir.MANIFEST)).write_text("{}")
    assert run.files() == ["a.json"]
