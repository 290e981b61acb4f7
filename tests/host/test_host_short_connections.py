"""1 ms loopback HTTP requests under the ``linux`` backend: none lost between two socket scans.

The workload (a lineage Python process) makes short ``urllib.request.urlopen`` requests to an
``http.server`` run by the test; the server answers each with the client's port, and the
workload writes a receipt per request (its pid and that port). Every receipt must match exactly
one ``network.connect`` record with the workload's pid (a scan, the eBPF socket tracer, or a
destroy notification of a socket a scan saw it hold), or be counted among the "unattributed
machine connections" (a destroy notification with no evidence of its owner is never recorded).
"""

from __future__ import annotations

import http.server
import json
import re
import shlex
import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from host_support import Gated, Observed, finish, needs_root, python, require_backend
from host_support import start_receiver as start

from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.direction import DirectionRule
from otel_bridge.receivers.host.sockdiag import (
    INET_DIAG_INFO,
    SOCK_DIAG_BY_FAMILY,
    DestroyWatcher,
    parse_destroyed,
)
from otel_bridge.testing import HTTP_CLIENT_WORKLOAD, closing_server, cpu_load

TRIES = 20


class _PortEcho(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = str(self.client_address[1]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def echo_server() -> Iterator[int]:
    """A local HTTP server answering each request with the client's port; yields its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PortEcho)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def run_requests(tmp_path: Path, n: int = TRIES) -> tuple[Observed, list[Any], int]:
    """Observe the client workload under CPU load; its receipts and the server port."""
    (tmp_path / "client.py").write_text(HTTP_CLIENT_WORKLOAD)
    receipts = tmp_path / "receipts.json"
    with echo_server() as port:
        url = f"http://127.0.0.1:{port}/"
        script = f"exec {shlex.quote(python())} client.py {url} {receipts} {n}"
        work = Gated(script, cwd=str(tmp_path))
        try:
            observed = start(HostConfig(backend="linux"), work.pid)
        except BaseException:
            work.kill()
            raise
        with cpu_load():
            work.release()
            assert work.wait(timeout=120) == 0
        observed.receiver.wait_idle()
        return finish(observed), json.loads(receipts.read_text()), port


def match_receipts(observed: Observed, receipts: list[Any], port: int) -> dict[str, int]:
    """How each receipt was recorded: with its pid, without one, wrongly, twice, or not."""
    connects = [a for a in observed.events("network.connect") if a["network.peer.port"] == port]
    counts = {"pid": 0, "unowned": 0, "wrong_pid": 0, "duplicate": 0, "missed": 0}
    for receipt in receipts:
        found = [a for a in connects if a["network.local.port"] == receipt["port"]]
        if not found:
            counts["missed"] += 1
            continue
        if len(found) > 1:
            counts["duplicate"] += 1
        rec = found[0]
        if "process.pid" not in rec:
            counts["unowned"] += 1
        elif rec["process.pid"] == receipt["pid"]:
            counts["pid"] += 1
        else:
            counts["wrong_pid"] += 1
    return counts


@pytest.mark.root
@pytest.mark.slow
@needs_root
def test_short_http_requests_are_all_recorded(tmp_path: Path) -> None:
    """Each of 20 short loopback requests is recorded once with its pid or counted as an
    unattributed machine connection; none is recorded without a pid or with a wrong one."""
    require_backend("linux")
    observed, receipts, port = run_requests(tmp_path)
    assert len(receipts) == TRIES
    counts = match_receipts(observed, receipts, port)
    print(f"linux short connections: {counts}")
    assert counts["unowned"] == 0
    assert counts["wrong_pid"] == 0
    assert counts["duplicate"] == 0
    state = [a for a in observed.events("collection.state") if a["collection.name"] == "network"]
    assert "destroy notifications" in str(state[0]["collection.reason"])
    found = re.search(
        r"unattributed machine connections: (\d+)", str(state[-1]["collection.reason"])
    )
    assert counts["missed"] <= (int(found[1]) if found else 0)


def _diag_message(sport: int, dport: int, rtt: int, inode: int = 0) -> bytes:
    head = struct.pack("=BBBB", socket.AF_INET, 7, 0, 0) + struct.pack(">HH", sport, dport)
    addr = socket.inet_aton("127.0.0.1") + bytes(12)
    tail = struct.pack("=IIIIIIII", 0, 1, 2, 0, 0, 0, 0, inode)
    info = bytes(68) + struct.pack("=I", rtt) + bytes(16)
    attr = struct.pack("=HH", 4 + len(info), INET_DIAG_INFO) + info
    body = head + addr + addr + tail + attr
    return struct.pack("=IHHII", 16 + len(body), SOCK_DIAG_BY_FAMILY, 0, 0, 0) + body


def test_parse_destroyed_reads_ports_inode_and_handshake() -> None:
    """Ports, inode and whether the handshake completed are read from one datagram."""
    data = _diag_message(45000, 8080, rtt=25, inode=7) + _diag_message(45001, 0, rtt=0)
    first, second = parse_destroyed(data)
    assert (first.local_address, first.local_port, first.peer_port) == ("127.0.0.1", 45000, 8080)
    assert (first.inode, first.established) == (7, True)
    assert (second.peer_port, second.established) == (0, False)


@needs_root
@pytest.mark.root
def test_destroy_watcher_dedups_attributes_and_withholds(tmp_path: Path) -> None:
    """Seen-by-scan is one occurrence; accepted ones are not claimed; a pid is known only
    through a scanned inode or 4-tuple, and a connection with neither is counted, not kept."""
    from test_host_interpreters import Harness

    from otel_bridge.receivers.host.events import SAMPLED
    from otel_bridge.receivers.host.netscan import SocketScanner

    h = Harness()
    scanner = SocketScanner(h.ctx, attribution=SAMPLED, rule=DirectionRule((32768, 60999)))
    scanner.rule.saw_listener("tcp", 8080)
    watcher = DestroyWatcher(h.ctx, scanner)
    try:
        scanner.inode_pids[99] = 4242
        scanner.claim(("127.0.0.1", 45005, "127.0.0.1", 8080))
        scanner.saw_holder(("127.0.0.1", 45004, "127.0.0.1", 8080), 4343)  # e.g. SYN_SENT
        for data in (
            _diag_message(45000, 8080, rtt=25),  # initiated, no owner seen: counted, not kept
            _diag_message(45000, 8080, rtt=25),  # the same again: counted again, not kept
            _diag_message(8080, 45000, rtt=25),  # the accepted end: nothing
            _diag_message(45001, 8080, rtt=0),  # never established: nothing
            _diag_message(45002, 46000, rtt=25),  # both ephemeral: undecided, nothing
            _diag_message(45003, 8080, rtt=25, inode=99),  # scanned inode: its pid
            _diag_message(45004, 8080, rtt=25),  # 4-tuple a scan saw the pid hold: its pid
            _diag_message(45005, 8080, rtt=25),  # already recorded by a scan: nothing
        ):
            for gone in parse_destroyed(data):
                watcher.handle(gone)
    finally:
        watcher.stop()
    connects = h.named("network.connect")
    assert [c["network.local.port"] for c in connects] == [45003, 45004]
    assert [c["process.pid"] for c in connects] == [4242, 4343]
    assert {c["evidence.attribution"] for c in connects} == {"sampled_process"}
    # without an owner seen, a connection is no one's: both ephemeral (undecided) included
    assert watcher.unattributed == 3
    assert scanner.undecided == 0
    (state,) = [a for a in h.named("collection.state") if a["collection.name"] == "network"]
    assert "unattributed machine connections: 3" in str(state["collection.reason"])


@pytest.mark.root
@needs_root
def test_refused_destroy_notifications_degrade_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without CAP_NET_ADMIN for sock_diag the backend still runs; the network state says why."""
    import errno

    from otel_bridge.receivers.host import sockdiag

    require_backend("linux")

    def refuse() -> socket.socket:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(sockdiag, "open_destroy_socket", refuse)
    work = Gated("true", cwd=str(tmp_path))
    try:
        observed = start(HostConfig(backend="linux", files=False), work.pid)
    finally:
        work.release()
        work.wait()
    observed = finish(observed)
    # the last network state (the eBPF socket tracer, when it runs here, adds its own)
    state = [a for a in observed.events("collection.state") if a["collection.name"] == "network"][
        -1
    ]
    assert state["collection.state"] == "degraded"
    assert "refused (needs CAP_NET_ADMIN)" in str(state["collection.reason"])


def short_connections(port: int, n: int) -> list[int]:
    """``n`` connections from this process (outside any lineage) to ``port``, each closed at
    once by both ends; their local ports."""
    ports: list[int] = []
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port)) as conn:
            ports.append(conn.getsockname()[1])
            conn.recv(16)  # the server closes first: this end is destroyed on close
    return ports


@pytest.mark.root
@needs_root
@pytest.mark.parametrize("tracing", [False, True], ids=["no-ebpf", "ebpf"])
def test_an_unrelated_processs_short_connections_are_not_the_workloads(
    tmp_path: Path, tracing: bool
) -> None:
    """observe (root_pid) mode: while the workload holds a connection, this test process (not
    in the lineage) makes 40 short connections; none is recorded, the workload's is, with its
    pid; without the eBPF tracer the network state counts them as unattributed."""
    from host_support import child_code, loopback_server

    require_backend("linux")
    with loopback_server() as held, closing_server() as port:
        script = f"exec {shlex.quote(python())} -c {shlex.quote(child_code(held.port, 1.0))}"
        work = Gated(script, cwd=str(tmp_path))
        try:
            observed = start(
                HostConfig(backend="linux", files=False, socket_tracing=tracing), work.pid
            )
        except BaseException:
            work.kill()
            raise
        work.release()
        observed.wait_for("network.connect", work.pid)
        unrelated = short_connections(port, 40)
        assert work.wait(timeout=60) == 0
        observed = finish(observed)
    connects = observed.events("network.connect")
    assert [c for c in connects if c["network.peer.port"] == port] == []
    assert [c for c in connects if c["network.local.port"] in unrelated] == []
    (mine,) = [c for c in connects if c["network.peer.port"] == held.port]
    assert mine["process.pid"] == work.pid
    if not tracing:
        reason = str(
            [a for a in observed.events("collection.state") if a["collection.name"] == "network"][
                -1
            ]["collection.reason"]
        )
        found = re.search(r"unattributed machine connections: (\d+)", reason)
        assert found is not None, reason
        assert int(found[1]) >= 40, reason
