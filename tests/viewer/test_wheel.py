"""The page works from the built wheel: its static files are package data."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from viewer.viewer_support import edge, graph_doc, node

REPO = Path(__file__).resolve().parents[2]
STATIC = (
    "otel_bridge/viewer/static/index.html",
    "otel_bridge/viewer/static/viewer.js",
    "otel_bridge/viewer/static/canvasgraph.js",
    "otel_bridge/viewer/static/viewer.css",
    "otel_bridge/viewer/static/vendor/sigma.min.js",
    "otel_bridge/viewer/static/vendor/graphology.min.js",
    "otel_bridge/viewer/static/vendor/LICENSE-sigma.txt",
    "otel_bridge/viewer/static/vendor/LICENSE-graphology.txt",
    "otel_bridge/viewer/static/vendor/VERSIONS.json",
)


@pytest.mark.slow
def test_export_from_the_wheel(tmp_path: Path) -> None:
    """The wheel carries every static file, and ``view --export`` run from it inlines them."""
    source = tmp_path / "src"
    # Build from a copy so the build never writes into the working tree.
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", "*.egg-info", ".*_cache", "__pycache__", ".hypothesis"
        ),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("otel_bridge-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        assert set(STATIC) <= set(zf.namelist())
        zf.extractall(site)
    graph = tmp_path / "graph.json"
    graph.write_text(
        json.dumps(
            graph_doc(
                [node("process:h:1:1", "process", "p"), node("file:/w/a", "file", "/w/a")],
                [edge("e-1", "process:h:1:1", "wrote", "file:/w/a")],
            )
        )
    )
    out = tmp_path / "report.html"
    env = {**os.environ, "PYTHONPATH": str(site)}
    subprocess.run(
        [sys.executable, "-m", "otel_bridge", "view", str(graph), "--export", str(out)],
        check=True,
        capture_output=True,
        env=env,
        cwd=tmp_path,
    )
    text = out.read_text()
    assert (site / "otel_bridge/viewer/static/vendor/sigma.min.js").read_text() in text
    assert '"process:h:1:1"' in text
