"""The transport peer as the receiver reads it from gRPC's ``context.peer()`` strings.

The receiving end of real requests is tested in ``tests/otlp/test_otlp_exporter.py`` (both
transports) and ``tests/observe/test_observe_sender.py`` (behind ``observe``'s mux).
"""

from __future__ import annotations

import pytest

from otel_bridge.receivers.otlp.peer import grpc_peer


@pytest.mark.parametrize(
    ("text", "address", "port"),
    [
        ("ipv4:127.0.0.1:54321", "127.0.0.1", 54321),
        ("ipv6:[::1]:54321", "::1", 54321),
        ("ipv6:%5B::1%5D:54321", "::1", 54321),
        ("ipv6:[::ffff:127.0.0.1]:54321", "127.0.0.1", 54321),
    ],
)
def test_grpc_peer_strings(text: str, address: str, port: int) -> None:
    peer = grpc_peer(text, 4317)
    assert peer is not None
    assert (peer.protocol, peer.address, peer.port, peer.local_port) == (
        "grpc",
        address,
        port,
        4317,
    )


@pytest.mark.parametrize("text", ["unix:/tmp/otlp.sock", "ipv4:127.0.0.1:x", "", "ipv4:host:1"])
def test_no_ip_peer_is_none(text: str) -> None:
    assert grpc_peer(text, 4317) is None
