"""``compare -o DIR`` never overwrites an earlier comparison without being told to.

As ``observe -o`` refuses a non-empty directory unless ``--replace``, ``compare`` refuses an
output directory that holds an earlier comparison (exit 2, one line naming the files, nothing
changed); ``--replace`` discards it (and only its files) and writes the new one. Fewer than
two runs are refused the same way (exit 2, one line, nothing written or discarded): a new user's
``compare RUN`` went ahead and reported "compared 1 runs".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import observed_run, run_cli, same_imports_env

Runs = tuple[Path, ...]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Two observed runs (compare needs at least two)."""
    return tuple(observed_run(tmp_path_factory.mktemp("observed"), "true") for _ in range(2))


def compare(runs: Runs, out: Path, *options: str) -> tuple[int, str]:
    done = run_cli("compare", *map(str, runs), "-o", str(out), "--no-ablation", *options,
                   env=same_imports_env())  # fmt: skip
    return done.returncode, done.stderr


def test_an_earlier_comparison_is_refused_then_replaced(run_dir: Runs, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    assert compare(run_dir, out) == (0, "")
    (out / "notes.txt").write_text("mine\n")
    (out / "compare-assist.json").write_text("{}\n")  # an earlier model pass's file
    (out / "compare.md").write_text("earlier\n")
    code, stderr = compare(run_dir, out)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "holds an earlier comparison (compare.json, compare.md, compare-assist.json)" in stderr
    assert "or --replace to discard this earlier comparison" in stderr
    assert (out / "compare.md").read_text() == "earlier\n"  # nothing changed
    assert compare(run_dir, out, "--replace") == (0, "")
    assert (out / "compare.md").read_text() != "earlier\n"
    assert not (out / "compare-assist.json").exists()  # no file of the earlier one is left
    assert (out / "notes.txt").read_text() == "mine\n"  # never anything else


def test_a_directory_holding_other_files_is_written_into(run_dir: Runs, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    assert compare(run_dir, tmp_path) == (0, "")
    assert (tmp_path / "compare.json").is_file()
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_one_run_is_refused_and_nothing_is_written(run_dir: Runs, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    assert compare(run_dir, out) == (0, "")
    earlier = (out / "compare.json").read_bytes()
    for options in (("--replace",), ("--group-by", "trace", "--replace")):
        code, stderr = compare(run_dir[:1], out, *options)
        assert code == 2, stderr
        assert len(stderr.strip().splitlines()) == 1, stderr
        assert stderr.startswith("otel-bridge: compare needs at least two runs"), stderr
        assert (out / "compare.json").read_bytes() == earlier  # nothing discarded
    code, stderr = compare(run_dir[:1], tmp_path / "new")
    assert "one run directory is one run: give two or more run directories" in stderr
    assert not (tmp_path / "new").exists()
