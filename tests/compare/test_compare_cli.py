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
