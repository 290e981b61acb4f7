"""What ``observe`` refuses before CMD starts leaves nothing behind that it created.

A configuration ``observe`` cannot run (an invalid ``--set``, a host receiver given a
``root_pid``, which ``observe`` would silently replace by its own command) is refused with exit 2
and one clear message before the run directory exists: no empty ``-o DIR`` and no
``otel-bridge-runs/<id>`` are left, CMD never runs, and a directory the user made beforehand is
kept as it was.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from cli_support import run_cli, same_imports_env

BAD_SET = ("--set", "receivers.host.backend=bogus")
ROOT_PID_SET = ("--set", "receivers.host.root_pid=1")
PROBE = ("sh", "-c", "echo ran > ran.txt")


def observe(cwd: Path, *options: str) -> tuple[int, str]:
    """``observe --no-warm --no-review OPTIONS -- PROBE`` in ``cwd``: exit code and stderr."""
    done = run_cli(
        "observe", "--no-warm", "--no-review", *options, "--", *PROBE,
        cwd=cwd, env=same_imports_env(),
    )  # fmt: skip
    return done.returncode, done.stderr


@pytest.mark.parametrize(
    "output", [("-o", "s2"), ("-o", "a/b/s2"), ()], ids=["new-dir", "new-parents", "default"]
)
def test_a_bad_configuration_leaves_no_run_directory(
    tmp_path: Path, output: tuple[str, ...]
) -> None:
    code, stderr = observe(tmp_path, *output, *BAD_SET)
    assert code == 2, stderr
    assert "receivers.host.backend: must be one of" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no s2, no a/, no otel-bridge-runs


def test_a_bad_configuration_keeps_the_users_own_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    code, stderr = observe(tmp_path, "-o", "mine", *BAD_SET)
    assert code == 2, stderr
    assert (tmp_path / "mine").is_dir()
    assert list((tmp_path / "mine").iterdir()) == []
    assert not (tmp_path / "ran.txt").exists()


def test_root_pid_by_set_is_refused(tmp_path: Path) -> None:
    code, stderr = observe(tmp_path, "-o", "run", *ROOT_PID_SET)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "receivers.host.root_pid is set (by --set)" in lines[0]
    assert "observe follows the command it starts" in lines[0]
    assert "'otel-bridge run' with root_pid" in lines[0]
    assert list(tmp_path.iterdir()) == []  # CMD never ran (no ran.txt), no run directory


def test_root_pid_in_a_config_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "host.yaml"
    config.write_text("receivers:\n  host/mine:\n    root_pid: 1\n")
    code, stderr = observe(tmp_path, "-c", str(config), "-o", "run")
    assert code == 2, stderr
    assert f"receivers.host/mine.root_pid is set (in {config})" in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host.yaml"]


def test_root_pid_zero_is_the_default_and_runs(tmp_path: Path) -> None:
    code, stderr = observe(tmp_path, "-o", "run", "--set", "receivers.host.root_pid=0")
    assert code == 0, stderr
    assert (tmp_path / "ran.txt").read_text() == "ran\n"
    assert (tmp_path / "run" / "manifest.json").is_file()


# A configuration that validates but whose collector cannot start: the run directory was made
# (and CMD waited behind its gate) before the failure; it used to be left, empty but for an
# incomplete manifest, or with the streams of the receivers that had started.

OUTPUTS = [("-o", "s2"), ("-o", "a/b/s2"), ("-o", "mine"), ()]
OUTPUT_IDS = ["new-dir", "new-parents", "users-empty-dir", "default"]


def _config(tmp_path: Path, receiver: str, exporter_path: str) -> Path:
    config = tmp_path / "config" / "observe.yaml"
    config.parent.mkdir()
    config.write_text(
        f"receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: {receiver}\n"
        "  host:\n"
        f"exporters:\n  file:\n    path: {exporter_path}\n"
        "service:\n  pipelines:\n    evidence:\n      receivers: [otlp, host]\n"
        "      exporters: [file]\n"
    )
    return config


def _fails_to_start_and_leaves_nothing(
    tmp_path: Path, config: Path, output: tuple[str, ...], message: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if output == ("-o", "mine"):
        (work / "mine").mkdir()
    code, stderr = observe(work, "-c", str(config), *output)
    assert code == 2, stderr
    assert message in stderr
    left = sorted(str(p.relative_to(work)) for p in work.rglob("*"))
    assert left == (["mine"] if output == ("-o", "mine") else []), left  # and CMD never ran


@pytest.mark.parametrize("output", OUTPUTS, ids=OUTPUT_IDS)
def test_a_receiver_port_in_use_leaves_no_run_directory(
    tmp_path: Path, output: tuple[str, ...]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = _config(tmp_path, f"127.0.0.1:{port}", "records.jsonl")
        _fails_to_start_and_leaves_nothing(
            tmp_path, config, output, f"receiver otlp: cannot listen for HTTP on 127.0.0.1:{port}"
        )


@pytest.mark.parametrize("output", OUTPUTS, ids=OUTPUT_IDS)
def test_an_exporter_file_that_cannot_be_created_leaves_no_run_directory(
    tmp_path: Path, output: tuple[str, ...]
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    unwritable = tmp_path / "a-file" / "records.jsonl"
    config = _config(tmp_path, "127.0.0.1:0", str(unwritable))
    _fails_to_start_and_leaves_nothing(
        tmp_path, config, output, f"exporter file: cannot open {unwritable}"
    )


@pytest.mark.skipif(
    os.geteuid() != 0, reason="the armed start (CMD before the collector) needs root"
)
def test_a_collector_that_fails_after_cmd_ran_keeps_the_run_and_says_where(tmp_path: Path) -> None:
    """Armed, CMD runs while the collector is built; here it makes its own run directory's
    ``os.jsonl`` a directory, so the stream's exporter cannot start. CMD ran: the run directory
    is kept (its manifest incomplete), and a line says where."""
    run = tmp_path / "run"
    sabotage = 'mkdir "$0/os.jsonl" && echo ran > ran.txt'
    done = run_cli(
        "observe", "--no-warm", "--no-review", "-o", str(run), "--", "sh", "-c", sabotage, str(run),
        cwd=tmp_path, env=same_imports_env(),
    )  # fmt: skip
    if done.returncode != 2 and (run / "summary.json").exists():
        summary = json.loads((run / "summary.json").read_text())
        if not summary["start"].get("armed"):
            pytest.skip(f"no armed start here: {summary['host_backend']}")
    assert done.returncode == 2, done.stderr
    assert f"exporter file/run_os: cannot open {run}/os.jsonl: Is a directory" in done.stderr
    assert f"{run} keeps what was recorded until then (verify reports it incomplete)" in (
        done.stderr
    )
    assert (tmp_path / "ran.txt").read_text() == "ran\n"
    verified = run_cli("verify", str(run))
    assert verified.returncode == 1
    assert "incomplete: run " in verified.stderr
