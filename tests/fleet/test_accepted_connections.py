"""``network_accepted``: the host receiver records both ends of an accepted TCP connection.

Real sockets of this process, scanned by the linux backend's socket scanner (socket tables, no
privileges needed); the strace backend's ``accept4`` path runs in ``test_fleet_crosshost.py``.
"""

from __future__ import annotations

import os
import socket

from otel_bridge.component import Telemetry
from otel_bridge.model import Batch, RelationKind
from otel_bridge.processors.normalize import Normalizer
from otel_bridge.receivers.host import HostConfig
from otel_bridge.receivers.host.direction import DirectionRule
from otel_bridge.receivers.host.events import SAMPLED, Emitter, EventFactory, HostContext, Lineage
from otel_bridge.receivers.host.netscan import SocketScanner
from otel_bridge.redaction import Redactor
from otel_bridge.testing import RecordingConsumer


def _scan_once_connected(accepted_on: bool) -> tuple[RecordingConsumer, int, int]:
    sink = RecordingConsumer()
    telemetry = Telemetry()
    ctx = HostContext(
        config=HostConfig(network_accepted=accepted_on),
        lineage=Lineage(os.getpid()),
        events=EventFactory("linux", "run", Emitter(sink, telemetry, batch_size=1, interval=1.0)),
        telemetry=telemetry,
        redactor=Redactor(),
    )
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                scanner = SocketScanner(ctx, attribution=SAMPLED, rule=DirectionRule())
                scanner.scan()  # sees the listener: the accepted end is decided by it
                scanner.scan()
                return sink, port, client.getsockname()[1]


def test_accepted_connection_is_recorded_with_both_ends_and_normalized() -> None:
    sink, port, client_port = _scan_once_connected(True)
    (record,) = [r for r in sink.logs if r.event_name == "network.accept"]
    a = record.attributes
    assert (a["network.local.address"], a["network.local.port"]) == ("127.0.0.1", port)
    assert (a["network.peer.address"], a["network.peer.port"]) == ("127.0.0.1", client_port)
    (obs,) = Normalizer()(Batch(logs=(record,))).observations
    assert obs.relation is RelationKind.ACCEPTED
    assert obs.object is not None
    assert obs.object.id == f"endpoint:tcp:127.0.0.1:{client_port}"
    assert obs.attrs["network.local.port"] == port
    # the client's end is the usual connect, which keeps its local end too
    (connect,) = [r for r in sink.logs if r.event_name == "network.connect"]
    assert connect.attributes["network.local.port"] == client_port


def test_without_the_setting_an_accepted_socket_is_not_recorded() -> None:
    sink, _, _ = _scan_once_connected(False)
    assert [r for r in sink.logs if r.event_name == "network.accept"] == []
