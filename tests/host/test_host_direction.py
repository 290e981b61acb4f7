"""Accepted vs initiated sockets: an accepted socket is never recorded as an outbound connect."""

from __future__ import annotations

import os
import shlex
import socket
from pathlib import Path

import pytest
from host_support import Gated, finish, needs_root, python, require_backend, start_receiver
from waiting import wait_until

from otel_bridge.component import Telemetry
from otel_bridge.identity import ephemeral_range
from otel_bridge.model import AnyValue, LogRecord
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.direction import Direction, DirectionRule
from otel_bridge.receivers.host.events import (
    SAMPLED,
    Emitter,
    EventFactory,
    HostContext,
    Lineage,
)
from otel_bridge.receivers.host.netscan import SocketScanner
from otel_bridge.redaction import Redactor
from otel_bridge.testing import RecordingConsumer

EPH = (32768, 60999)


def test_rule_accepted_by_a_listener_seen_once() -> None:
    """A local port that was seen listening is accepted even after the listener is gone."""
    rule = DirectionRule(EPH)
    rule.saw_listener("tcp", 40000)
    assert rule.decide("tcp", "127.0.0.1", 40000, "127.0.0.1", 50000) is Direction.ACCEPTED
    assert rule.decide("tcp", "127.0.0.1", 50000, "127.0.0.1", 40000) is Direction.INITIATED


def test_rule_by_ephemeral_ports() -> None:
    """Ephemeral local + service peer is initiated; the reverse is accepted; else unknown."""
    rule = DirectionRule(EPH)
    assert rule.decide("tcp", "10.0.0.2", 45000, "10.0.0.9", 443) is Direction.INITIATED
    assert rule.decide("tcp", "10.0.0.2", 8080, "10.0.0.9", 45000) is Direction.ACCEPTED
    assert rule.decide("tcp", "127.0.0.1", 45000, "127.0.0.1", 46000) is Direction.UNKNOWN
    assert rule.decide("tcp", "127.0.0.1", 80, "127.0.0.1", 8080) is Direction.UNKNOWN


def test_rule_listener_port_of_a_remote_peer_is_not_evidence() -> None:
    """A remote peer's port equal to a local listening port says nothing about direction."""
    rule = DirectionRule(EPH)
    rule.saw_listener("tcp", 45001)
    assert rule.decide("tcp", "10.0.0.2", 45000, "10.0.0.9", 45001) is Direction.UNKNOWN


def test_ephemeral_range_falls_back(tmp_path: Path) -> None:
    """An unreadable or malformed range file yields the kernel default."""
    assert ephemeral_range(str(tmp_path / "missing")) == EPH
    bad = tmp_path / "range"
    bad.write_text("x y\n")
    assert ephemeral_range(str(bad)) == EPH
    good = tmp_path / "good"
    good.write_text("1024\t65000\n")
    assert ephemeral_range(str(good)) == (1024, 65000)


def _ctx(root: int, sink: RecordingConsumer) -> HostContext:
    telemetry = Telemetry()
    emitter = Emitter(sink, telemetry, batch_size=1, interval=1.0)
    return HostContext(
        config=HostConfig(),
        lineage=Lineage(root),
        events=EventFactory("linux", "run", emitter),
        telemetry=telemetry,
        redactor=Redactor(),
    )


def test_scan_after_the_listener_closed_claims_no_connect() -> None:
    """Both ends of a loopback connection whose ephemeral listener closed unseen: no claim.

    Before, the accepted end was read as an outbound connect to the client's ephemeral port
    (the phantom connection of issue 12).
    """
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    client_port = client.getsockname()[1]
    accepted, _ = server.accept()
    server.close()
    sink = RecordingConsumer()
    ctx = _ctx(os.getpid(), sink)
    scanner = SocketScanner(ctx, attribution=SAMPLED, rule=DirectionRule())
    try:
        scanner.scan()
        scanner.scan()
    finally:
        client.close()
        accepted.close()
    connects = [r.attributes for r in sink.logs if r.event_name == "network.connect"]
    assert not [a for a in connects if a.get("network.peer.port") == client_port]
    if ephemeral_range()[0] <= port <= ephemeral_range()[1]:
        assert not [a for a in connects if a.get("network.peer.port") == port]
        assert scanner.undecided == 2  # both ends, counted once each
        assert ctx.telemetry.counters()["receiver.host.network.direction_unknown"] == 2


_SERVER = """
import socket, sys, time
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(srv.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
conn, _ = srv.accept()
srv.close()
conn.sendall(b"x")
time.sleep(0.4)
conn.close()
"""


def _wait_file(path: Path, timeout: float = 10.0) -> str:
    wait_until(path.exists, timeout, f"{path} to be written")
    return path.read_text()


def _phantoms(backend: str, tmp_path: Path) -> tuple[list[dict[str, AnyValue]], int, int]:
    """Run a lineage server that closes its listener after accept(); connect from outside."""
    code = tmp_path / "server.py"
    code.write_text(_SERVER)
    port_file = tmp_path / "port"
    script = f"exec {shlex.quote(python())} {code} {port_file}"
    work = Gated(script, cwd=str(tmp_path))
    try:
        config = HostConfig(backend=backend, poll_interval=0.005, startup_timeout=30)
        observed = start_receiver(config, work.pid)
    except BaseException:
        work.kill()
        raise
    work.release()
    port = int(_wait_file(port_file))
    client = socket.create_connection(("127.0.0.1", port))
    client_port: int = client.getsockname()[1]
    assert client.recv(1) == b"x"
    assert work.wait() == 0
    client.close()
    logs: list[LogRecord] = finish(observed).logs
    connects = [dict(r.attributes) for r in logs if r.event_name == "network.connect"]
    return connects, port, client_port


_ROOT = (pytest.mark.root, needs_root)


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend",
    [pytest.param("linux", marks=_ROOT), pytest.param("strace", marks=_ROOT), "portable"],
)
def test_server_closing_its_listener_is_not_a_client(backend: str, tmp_path: Path) -> None:
    """A real lineage server that closes its listener after accept() makes no connect claim."""
    if backend != "portable":
        require_backend(backend)
    connects, port, client_port = _phantoms(backend, tmp_path)
    assert [a for a in connects if a.get("network.peer.port") == client_port] == []
    assert [a for a in connects if a.get("network.local.port") == port] == []
