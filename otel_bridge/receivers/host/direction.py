"""Was an established TCP socket *initiated* here (``connect``) or *accepted* from a listener?

Socket tables (``/proc/net/tcp``, psutil, sock_diag) list an established socket the same way
whichever end opened it. Backends that see syscalls (``strace``, ``ebpf``) know the direction
exactly (only ``connect`` is traced); the sampling backends decide it here, from facts that stay
true after the listener is gone:

0. the socket's 4-tuple was reported by the kernel as initiated
   (``connect``) or accepted (:mod:`.socktrace`, when the eBPF socket tracer runs): exactly that;
1. the socket's local port is a port some socket of this network namespace was seen listening
   on (now, or in any earlier scan of this run) -> **accepted** (a connect never gets a port that
   a listener holds on the same address);
2. the peer is on this machine (loopback or the socket's own address) and the peer port is such
   a listening port -> **initiated**;
3. the local port is in the kernel's ephemeral range (``ip_local_port_range``) and the peer port
   is not -> **initiated** (``connect`` without ``bind`` draws its port from that range, while a
   server's accepted socket carries the server's port, which a service binds outside it);
4. the local port is outside the ephemeral range and the peer port inside it -> **accepted**;
5. anything else (both ports ephemeral, e.g. a server bound to port 0 whose listener closed
   before any scan saw it, or both fixed) -> **unknown**: no ``network.connect`` is claimed; the
   socket is counted and the network collection says so.

Rules 1 and 4 only ever withhold a claim. Rules 2 and 3 claim a connection only towards a port
that was listening or lies outside the ephemeral range; the one accepted socket they could
misread is a server on an ephemeral port whose *client* bound a fixed port, and rule 1 covers it
whenever any scan saw that listener.
"""

from __future__ import annotations

import enum
import ipaddress
import threading
from collections import OrderedDict

from otel_bridge.identity import ephemeral_range

_KNOWN_LIMIT = 65536


class Direction(enum.Enum):
    """Which end of an established connection a socket is."""

    INITIATED = "initiated"
    ACCEPTED = "accepted"
    UNKNOWN = "unknown"


def is_local_address(address: str, local_address: str) -> bool:
    """True when ``address`` is loopback or the socket's own local address."""
    if address == local_address:
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class DirectionRule:
    """The rule of the module docstring, with the listening ports remembered across scans."""

    def __init__(self, ephemeral: tuple[int, int] | None = None) -> None:
        self.ephemeral = ephemeral if ephemeral is not None else ephemeral_range()
        self._listened: set[tuple[str, int]] = set()
        self._known: OrderedDict[tuple[str, int, str, int], Direction] = OrderedDict()
        """4-tuples whose direction the kernel reported (bounded: oldest forgotten first)."""
        self._lock = threading.Lock()

    def saw_initiated(self, key: tuple[str, int, str, int]) -> None:
        """The kernel reported ``key`` (local, local port, peer, peer port) as a ``connect``."""
        self._know(key, Direction.INITIATED)

    def saw_accepted(self, key: tuple[str, int, str, int]) -> None:
        """The kernel reported ``key`` as a socket accepted from a listener."""
        self._know(key, Direction.ACCEPTED)

    def _know(self, key: tuple[str, int, str, int], direction: Direction) -> None:
        with self._lock:
            self._known[key] = direction
            while len(self._known) > _KNOWN_LIMIT:
                self._known.popitem(last=False)

    def saw_listener(self, transport: str, port: int) -> None:
        """Remember that ``port`` was seen listening (it stays a service port for the run)."""
        if port:
            with self._lock:
                self._listened.add((transport, port))

    def listened(self, transport: str, port: int) -> bool:
        """True when ``port`` was ever seen listening in this run."""
        return (transport, port) in self._listened

    def _ephemeral(self, port: int) -> bool:
        low, high = self.ephemeral
        return low <= port <= high

    def decide(
        self, transport: str, local_address: str, local_port: int, peer_address: str, peer_port: int
    ) -> Direction:
        """The direction of one established socket."""
        known = self._known.get((local_address, local_port, peer_address, peer_port))
        if known is not None:
            return known
        if self.listened(transport, local_port):
            return Direction.ACCEPTED
        if is_local_address(peer_address, local_address) and self.listened(transport, peer_port):
            return Direction.INITIATED
        local_eph, peer_eph = self._ephemeral(local_port), self._ephemeral(peer_port)
        if local_eph and not peer_eph:
            return Direction.INITIATED
        if peer_eph and not local_eph:
            return Direction.ACCEPTED
        return Direction.UNKNOWN


def undecided_brief(count: int) -> str:
    """:func:`undecided_note` in a few words (the run summary's line)."""
    return f"{count} socket(s) of unknown direction not recorded"


def undecided_note(count: int) -> str:
    """The network collection's reason when ``count`` sockets were left undecided."""
    return (
        f"{count} established TCP socket(s) of undecidable direction (both ports ephemeral and "
        "no listener seen on either) were not recorded as connections"
    )
