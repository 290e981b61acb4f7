"""The compare command's refusals: what it cannot read exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otel_bridge import cli


def test_a_directory_without_a_manifest_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["compare", str(tmp_path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err
    assert not (tmp_path / "out").exists()


def test_a_foreign_manifest_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "something-else"}))
    assert cli.main(["compare", str(tmp_path)]) == 2
    assert "not an otel-bridge manifest" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["5", "-0.1", "nan", "high"])
def test_a_threshold_that_is_not_a_similarity_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """Similarities are 0 to 1: ``--threshold 5`` was accepted and joined no two calls."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["compare", str(tmp_path), "--threshold", value, "-o", str(tmp_path / "out")])
    assert exited.value.code == 2
    assert "--threshold" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
