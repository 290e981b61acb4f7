"""The transport peer of an OTLP request: who sent it, as the receiving socket saw it.

A request relayed by this process's own protocol mux (``observe``'s one endpoint for both
transports, :mod:`otel_bridge.otlp.mux`) is the mux's connection to the server: its peer is read
from the mux instead, as the client's end of the connection to the mux's port.

Recorded once per request and set on every resource the request carries
(:attr:`otel_bridge.model.Resource.peer`), never per span. ``correlate`` joins a loopback peer
to the sender's socket that the host plane attributed to a process (docs/contracts.md,
"Exact identity").
"""

from __future__ import annotations

import functools
import time
import urllib.parse

from otel_bridge.identity import canonical_ip, host_id
from otel_bridge.model import TransportPeer
from otel_bridge.otlp.mux import relayed_from

_canonical = functools.lru_cache(maxsize=256)(canonical_ip)
"""``canonical_ip`` remembered: a receiver sees few peer addresses, and parsing one costs some
5 us, per request."""


def transport_peer(protocol: str, address: str, port: int, local_port: int) -> TransportPeer | None:
    """The :class:`TransportPeer` of a request from ``address``:``port`` to ``local_port``;
    None when ``address`` is no IP address (a Unix socket)."""
    ip = _canonical(address)
    if ip is None:
        return None
    relayed = relayed_from(ip, port)
    if relayed is not None:  # through this process's mux: the client's end, the mux's port
        ip, port, local_port = relayed
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
    ``ipv6:[::1]:54321``, ``ipv6:%5B::1%5D:54321``; anything else, a Unix socket, gives None)."""
    family, _, rest = peer.partition(":")
    if family not in ("ipv4", "ipv6"):
        return None
    # gRPC percent-encodes an IPv6 address's brackets in some versions (``%5B::1%5D``).
    address, _, port = urllib.parse.unquote(rest).rpartition(":")
    if not port.isdigit():
        return None
    return transport_peer("grpc", address, int(port), local_port)
