"""A real PostgreSQL server for the store tests: one per session, in a temporary directory.

The server is Debian's (``/usr/lib/postgresql/*/bin``, ``.ci/run`` installs it), initialized with
``initdb`` and started with ``pg_ctl`` on a free 127.0.0.1 port with its socket in the same
directory. ``initdb`` refuses to run as root, so under root the server runs as the ``postgres``
system user (``runuser``). Every test gets its own database (``pg_url``). Without the binaries
or psycopg the tests skip with the reason.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from otel_bridge.store import driver_available
from store.store_support import Server, bindir, free_port


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


_NUMBERS = itertools.count()


@pytest.fixture
def pg_url(pg_server: Server) -> str:
    """A fresh, empty database on the session's server; its URL."""
    import psycopg

    name = f"t{os.getpid()}_{next(_NUMBERS)}"
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg_server.url(name)
