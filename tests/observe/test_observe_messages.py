"""Two messages a new user met: a taken OTLP port (``run`` and ``observe -c``) and ``observe``
started in a directory it cannot write. Each is one clear line on stderr, nothing else."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import run_cli

pytest.importorskip("grpc", reason="needs grpcio (the OTLP receiver's gRPC server)")


@pytest.fixture(name="taken_port")
def _taken_port() -> Iterator[int]:
    """A loopback port another process's socket listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def _config(tmp_path: Path, grpc_port: int) -> Path:
    path = tmp_path / "collector.yaml"
    path.write_text(
        "receivers:\n"
        "  otlp:\n"
        "    protocols:\n"
        f"      grpc: {{endpoint: 127.0.0.1:{grpc_port}}}\n"
        "      http: {endpoint: 127.0.0.1:0}\n"
        "exporters:\n"
        f"  file: {{path: {tmp_path / 'out.jsonl'}}}\n"
        "service:\n"
        "  pipelines:\n"
        "    traces: {receivers: [otlp], exporters: [file]}\n"
    )
    return path


def _cold() -> dict[str, str]:
    """This environment with observe's warm server off (each command starts its own)."""
    return dict(os.environ, OTEL_BRIDGE_WARM="0")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "observe"])
def test_a_taken_grpc_port_is_one_clear_line(tmp_path: Path, taken_port: int, command: str) -> None:
    """gRPC's C-core prints its own error line when its bind fails; the port is tried first,
    so the user reads one line naming the port and what to do, and nothing runs."""
    config = str(_config(tmp_path, taken_port))
    marker = tmp_path / "ran"
    argv = (
        ["run", "-c", config]
        if command == "run"
        else ["observe", "-c", config, "-o", str(tmp_path / "run"), "--", "touch", str(marker)]
    )
    result = run_cli(*argv, cwd=tmp_path, env=_cold())
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"otel-bridge: receiver otlp: cannot listen for gRPC on 127.0.0.1:{taken_port}: port "
        f"{taken_port} is already in use by another process (another collector?): stop it, or "
        "set protocols.grpc.endpoint to a free port"
    ], result.stderr
    assert not marker.exists()


def _read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory this process cannot write: a read-only tmpfs as root, else mode 0555."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


@pytest.fixture(name="read_only_cwd")
def _read_only_cwd(tmp_path: Path) -> Iterator[Path]:
    yield from _read_only_dir(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("extra", [(), ("--backend", "portable")])
def test_an_unwritable_working_directory_is_one_clear_line(
    tmp_path: Path, read_only_cwd: Path, extra: tuple[str, ...]
) -> None:
    """``observe`` in a directory it cannot write (armed, and collector first): one line that
    names the run directory, why, and ``-o``; the command never ran, nothing was created; with
    ``-o`` elsewhere the same command runs."""
    marker = tmp_path / "ran"
    argv = ["observe", "--no-progress", *extra, "--", "touch", str(marker)]
    result = run_cli(*argv, cwd=read_only_cwd, env=_cold())
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        f"otel-bridge: cannot create the run directory {read_only_cwd}/otel-bridge-runs/"
    )
    assert lines[0].endswith("; choose a writable place with -o DIR")
    assert not marker.exists()
    assert list(read_only_cwd.iterdir()) == []
    elsewhere = tmp_path / "run"
    argv = ["observe", "--no-progress", "-o", str(elsewhere), *extra, "--", "touch", str(marker)]
    ok = run_cli(*argv, cwd=read_only_cwd, env=_cold())
    assert ok.returncode == 0, ok.stderr
    assert marker.exists()
    assert (elsewhere / "summary.json").exists()
