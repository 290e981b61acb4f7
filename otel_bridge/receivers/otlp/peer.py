"""The transport peer of an OTLP request: who sent it, as the receiving socket saw it.

Recorded once per request and set on every resource the request carries
(:attr:`otel_bridge.model.Resource.peer`), never per span. ``correlate`` joins a loopback peer
to the sender's socket that the host plane attributed to a process (docs/contracts.md,
"Exact identity").
"""

from __future__ import annotations

import time

from otel_bridge.identity import canonical_ip, host_id
from otel_bridge.model import TransportPeer


def transport_peer(protocol: str, address: str, port: int, local_port: int) -> TransportPeer | None:
    """The :class:`TransportPeer` of a request from ``address``:``port`` to ``local_port``;
    None when ``address`` is no IP address (a Unix socket)."""
    ip = canonical_ip(address)
    if ip is None:
        return None
    return TransportPeer(
        protocol=protocol,
        address=ip,
        port=port,
        local_port=local_port,
        host_id=host_id(),
        time_unix_nano=time.time_ns(),
    )


def grpc_peer(peer: str, local_port: int) -> TransportPeer | None:
    """The transport peer of a gRPC call from its ``context.peer()`` (``ipv4:127.0.0.1:54321``,
    ``ipv6:[::1]:54321``; anything else, a Unix socket, gives None)."""
    family, _, rest = peer.partition(":")
    if family not in ("ipv4", "ipv6"):
        return None
    address, _, port = rest.rpartition(":")
    if not port.isdigit():
        return None
    return transport_peer("grpc", address, int(port), local_port)
