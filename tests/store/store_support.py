"""Helpers of the store tests: a real PostgreSQL server, and a small evidence stream:
exec'd processes (facts merged per field), runtime reads that fold, written files, a derived
relation with method, score and support, entity observations, and coverage records.

The fixtures ``pg_server`` and ``pg_url`` (imported by ``tests/store/conftest.py`` and by
``tests/fleet/test_fleet_store.py``): the server is Debian's (``/usr/lib/postgresql/*/bin``,
``.ci/run`` installs it), initialized with ``initdb`` and started with ``pg_ctl`` on a free
127.0.0.1 port with its socket in the same directory. ``initdb`` refuses to run as root, so under
root the server runs as the ``postgres`` system user (``runuser``). Every test gets its own
database (``pg_url``). Without the binaries or psycopg the tests skip with the reason.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from cli_support import run_cli, same_imports_env

from otel_bridge.identity import file_key, process_key
from otel_bridge.model import (
    Attribution,
    Batch,
    Channel,
    CoverageRecord,
    Entity,
    EntityKind,
    Evidence,
    FileFacts,
    Observation,
    ProcessFacts,
    RelationKind,
    Source,
)
from otel_bridge.store import driver_available

T0 = 1_767_225_600_000_000_000
SYSCALL = Evidence(attribution=Attribution.SYSCALL, causal=True, inferred=False)
DERIVED = Evidence(
    attribution=Attribution.HEURISTIC,
    inferred=True,
    method="time-window",
    score=0.75,
    support=("obs-1", "obs-2"),
)


def _process(
    pid: int, exe: str | None, argv: tuple[str, ...] | None, exit_code: int | None = None
) -> Entity:
    facts = ProcessFacts(
        host_id="host-a",
        pid=pid,
        start_time_ms=1000 + pid,
        executable_path=exe,
        executable_name=None if exe is None else exe.rsplit("/", 1)[-1],
        argv=argv,
        exit_code=exit_code,
    )
    return Entity(
        kind=EntityKind.PROCESS,
        id=f"process:host-a:{pid}:{1000 + pid}",
        label=f"{pid}",
        facts=facts,
        key=process_key(exe, argv) or "",
    )


def _file(path: str) -> Entity:
    return Entity(
        kind=EntityKind.FILE,
        id=f"file:{path}",
        label=path,
        facts=FileFacts(path=path),
        key=file_key(path) or "",
        attrs={"path": path},
    )


def batches(n_files: int = 30, *, prefix: str = "") -> list[Batch]:
    """Three batches of observations (a process that exec'd, its reads and writes, a derived
    link, an exit), the last one with coverage records."""
    src = Source(channel=Channel.OS, backend="linux", record_id="r")
    shell = _process(10, "/bin/sh", ("sh", "-c", "python3 job.py"))
    py = _process(10, "/usr/bin/python3", ("python3", "job.py"))
    child = _process(11, "/usr/bin/git", ("git", "status"))
    out: list[list[Observation]] = [[], [], []]
    t = T0
    for i, (ent, batch) in enumerate(((shell, 0), (py, 0), (child, 1))):
        out[batch].append(
            Observation(id=f"{prefix}p{i}", time_unix_nano=t + i, source=src, subject=ent)
        )
    out[0].append(
        Observation(
            id=f"{prefix}spawn",
            time_unix_nano=t + 5,
            source=src,
            subject=py,
            relation=RelationKind.SPAWNED,
            object=child,
            evidence=SYSCALL,
            occurrence="spawn-1",
        )
    )
    for i in range(n_files):
        path = f"/usr/lib/python3.11/mod{i}.pyc" if i % 2 else f"/srv/work/out{i}.csv"
        rel = RelationKind.OPENED if i % 3 else RelationKind.WROTE
        out[1 + i % 2].append(
            Observation(
                id=f"{prefix}f{i}",
                time_unix_nano=t + 100 + i,
                end_time_unix_nano=t + 200 + i,
                source=src,
                subject=py,
                relation=rel,
                object=_file(path),
                evidence=SYSCALL,
                occurrence=f"occ-{i % 7}",
                attrs={"flags": "O_RDONLY", "n": i},
            )
        )
    gw = Source(channel=Channel.GW, backend="correlate", record_id="c")
    agent = Entity(kind=EntityKind.AGENT, id="agent:planner", label="planner", key="agent:planner")
    out[2].append(
        Observation(
            id=f"{prefix}link",
            time_unix_nano=t + 300,
            source=gw,
            subject=agent,
            relation=RelationKind.CORRELATED_WITH_PROCESS,
            object=py,
            evidence=DERIVED,
        )
    )
    out[2].append(
        Observation(
            id=f"{prefix}exit",
            time_unix_nano=t + 400,
            source=src,
            subject=_process(10, None, None, exit_code=0),
        )
    )
    coverage = (
        CoverageRecord(source=src, reason="collection.network.degraded", time_unix_nano=t + 1),
        CoverageRecord(source=src, reason="collection.network.degraded", time_unix_nano=t + 1),
        CoverageRecord(source=gw, reason="decode.error", time_unix_nano=t + 2, detail="x"),
    )
    return [
        Batch(observations=tuple(out[0])),
        Batch(observations=tuple(out[1])),
        Batch(observations=tuple(out[2]), coverage=coverage),
    ]


@dataclass(frozen=True)
class Server:
    """A running test server."""

    port: int
    data: str
    bindir: str
    run_as: list[str]

    def url(self, db: str = "postgres") -> str:
        """The URL of database ``db`` as the superuser ``otel_bridge``."""
        return f"postgresql://otel_bridge@127.0.0.1:{self.port}/{db}"

    def socket_url(self, db: str) -> str:
        """The URL of database ``db`` through the server's Unix socket (reachable from any
        network namespace of this machine)."""
        return f"postgresql://otel_bridge@/{db}?host={self.data}&port={self.port}"

    def create_database(self) -> str:
        """A fresh, empty database; its name."""
        import psycopg

        name = f"t{os.getpid()}_{next(_NUMBERS)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name

    def ctl(self, *args: str) -> None:
        """Run ``pg_ctl`` on the server's data directory."""
        subprocess.run(
            [*self.run_as, os.path.join(self.bindir, "pg_ctl"), "-D", self.data, *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        """Stop the server (fast shutdown; waits)."""
        self.ctl("-m", "fast", "-w", "stop")

    def start(self) -> None:
        """(Re)start the server on its port; returns once it accepts connections."""
        opts = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.ctl("-o", opts, "-l", os.path.join(self.data, "server.log"), "-w", "start")


def bindir() -> str | None:
    for path in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(path, "initdb")):
            return path
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m otel_bridge ARGS`` with this test process's import path (the worktree's
    package, not an installed one), its output captured as text."""
    return run_cli(*args, env=same_imports_env())


_NUMBERS = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    """The session's PostgreSQL server (skips without the binaries or psycopg)."""
    if not driver_available():
        pytest.skip("psycopg 3 is not installed (pip install 'otel-bridge[postgres]')")
    binaries = bindir()
    if binaries is None:
        pytest.skip("PostgreSQL server binaries not found (apt-get install postgresql)")
    root = tempfile.mkdtemp(prefix="otel-bridge-pg-")
    data = os.path.join(root, "data")
    run_as: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: initdb refuses root")
        try:
            import pwd

            entry = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and no postgres system user to run the server as")
        os.chmod(root, 0o700)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [
            *run_as,
            os.path.join(binaries, "initdb"),
            "-D",
            data,
            "-U",
            "otel_bridge",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    server = Server(port=free_port(), data=data, bindir=binaries, run_as=run_as)
    server.start()
    try:
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: Server) -> str:
    """A fresh, empty database on the session's server; its URL."""
    return pg_server.url(pg_server.create_database())
