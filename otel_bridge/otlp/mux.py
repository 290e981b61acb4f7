"""One listening port for both OTLP transports: OTLP/gRPC (HTTP/2) and OTLP/HTTP (HTTP/1.1).

An OpenTelemetry SDK exporter is configured by ``OTEL_EXPORTER_OTLP_ENDPOINT`` alone, whatever its
transport: the gRPC exporter speaks HTTP/2 to it, the HTTP exporters POST ``/v1/traces`` over
HTTP/1.1. :class:`ProtocolMux` listens on one loopback port, reads (without consuming) the first
bytes of each connection, and relays the connection unchanged to the gRPC server when they are
the HTTP/2 client preface (``PRI * HTTP/2.0``), otherwise to the HTTP server. The servers are
untouched: they see an ordinary loopback client.

The mux keeps no data: bytes are relayed as they arrive, in both directions, and a half-close is
passed on so a client that shuts down its sending side still gets its answer. It counts
connections per protocol (:attr:`ProtocolMux.connections`) and how many are open
(:meth:`ProtocolMux.wait_idle` returns once every relayed connection is closed: the drain
condition of ``observe``).

While a connection is relayed, the mux states which client it relays for
(:func:`relayed_from`): the servers' transport peer is the mux's own upstream socket, and the
``otlp`` receiver reads the client's end (address, port, the mux's port) from here instead, so
the sender the correlator looks for is the client, not the collector.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
"""The HTTP/2 client connection preface (RFC 9113, 3.4)."""
_SNIFF_BYTES = 4
_SNIFF_TIMEOUT = 10.0
_CHUNK = 65536


_RELAYED: dict[tuple[str, int], tuple[str, int, int]] = {}
"""Upstream socket's local (address, port) -> (client address, client port, the mux's port)."""
_RELAYED_LOCK = threading.Lock()


def relayed_from(address: str, port: int) -> tuple[str, int, int] | None:
    """The client a connection from ``address``:``port`` (a mux's upstream socket) is relaying
    for, as (client address, client port, the mux's listening port); None when no mux of this
    process relays through that socket now."""
    with _RELAYED_LOCK:
        return _RELAYED.get((address, port))


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where one transport's connections are relayed to."""

    host: str
    port: int


@runtime_checkable
class GrpcOnDemand(Protocol):
    """A receiver whose gRPC server can start at the first gRPC connection instead of at start
    (the OTLP receiver): the mux calls :meth:`start_grpc` when it sees an HTTP/2 preface."""

    def defer_grpc(self) -> None:
        """Do not start the gRPC server at start (before start)."""

    def start_grpc(self) -> tuple[str, int] | None:
        """Start it now if not running: its ``(host, port)``, None when it cannot."""


GrpcUpstream = Upstream | Callable[[], Upstream | None] | None
"""The gRPC upstream: where it listens, or a function starting it on first use (None: none)."""


def listen(host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket on ``host`` and a port the kernel chooses."""
    return socket.create_server((host, 0), backlog=socket.SOMAXCONN)


def is_http2(head: bytes) -> bool:
    """Whether the first bytes of a connection are (the start of) the HTTP/2 client preface."""
    return len(head) >= _SNIFF_BYTES and H2_PREFACE.startswith(head[:_SNIFF_BYTES])


class ProtocolMux:
    """A loopback listener relaying each connection to the gRPC or the HTTP upstream."""

    def __init__(
        self,
        *,
        grpc: GrpcUpstream,
        http: Upstream | None,
        host: str = "127.0.0.1",
        listener: socket.socket | None = None,
    ) -> None:
        """``listener``: a socket bound and listening before the servers existed (``observe``
        binds it before its command runs: the kernel's backlog holds an early client's
        connection until the mux accepts it here). Closed when the mux stops.
        ``grpc`` may be a function starting the gRPC server: it is called (once) when the first
        HTTP/2 connection arrives."""
        if grpc is None and http is None:
            if listener is not None:
                listener.close()
            raise ValueError("mux: no upstream")
        self._upstreams: dict[str, GrpcUpstream] = {"grpc": grpc, "http": http}
        self._resolving = threading.Lock()
        self._listener = listener if listener is not None else listen(host)
        self.host = self._listener.getsockname()[0]
        self.port: int = self._listener.getsockname()[1]
        self.connections = {"grpc": 0, "http": 0, "unroutable": 0}
        """Connections accepted, per protocol they were relayed to."""
        self._open = 0
        self._cond = threading.Condition()
        self._stopped = False
        self._socks: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept_loop, name="otlp-mux", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The endpoint URL a client is given (``http://127.0.0.1:PORT``)."""
        return f"http://{self.host}:{self.port}"

    def serves(self, name: str) -> bool:
        """Whether connections of protocol ``name`` (``grpc``, ``http``) have an upstream (one
        started on demand counts)."""
        return self._upstreams.get(name) is not None

    @property
    def open_connections(self) -> int:
        """Connections being relayed now."""
        with self._cond:
            return self._open

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no connection is open (at most ``timeout`` s); whether it is idle."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._open:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def stop(self) -> None:
        """Stop accepting and close every relayed connection. Safe twice."""
        with self._cond:
            if self._stopped:
                return
            self._stopped = True
            socks = list(self._socks)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._cond:
                if self._stopped:
                    conn.close()
                    return
                self._open += 1
                self._socks.add(conn)
            threading.Thread(target=self._serve, args=(conn,), name="otlp-mux-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            name = self._sniff(conn)
            target = self._upstream(name) if name else None
            if target is None:
                self._count("unroutable")
                return
            upstream = socket.create_connection((target.host, target.port), timeout=10)
            upstream.settimeout(None)
            with self._cond:
                self._socks.add(upstream)
            self._count(name or "unroutable")
            relay = self._note_relay(conn, upstream)
            try:
                _relay(conn, upstream)
            finally:
                if relay is not None:
                    with _RELAYED_LOCK:
                        _RELAYED.pop(relay, None)
        except OSError:
            pass
        finally:
            with self._cond:
                for s in (conn, upstream):
                    if s is not None:
                        self._socks.discard(s)
                        s.close()
                self._open -= 1
                self._cond.notify_all()

    def _note_relay(self, conn: socket.socket, upstream: socket.socket) -> tuple[str, int] | None:
        """State (before a byte is relayed) that ``upstream`` relays for ``conn``'s client."""
        local, client = upstream.getsockname(), conn.getpeername()
        if not (isinstance(local, tuple) and isinstance(client, tuple)):
            return None
        key = (_plain(local[0]), int(local[1]))
        with _RELAYED_LOCK:
            _RELAYED[key] = (_plain(client[0]), int(client[1]), self.port)
        return key

    def _upstream(self, name: str) -> Upstream | None:
        """Where ``name``'s connections go; starts an on-demand upstream on first use."""
        with self._resolving:
            target = self._upstreams.get(name)
            if callable(target):
                target = self._upstreams[name] = target()
            return target

    def _sniff(self, conn: socket.socket) -> str | None:
        """``grpc`` or ``http`` from the first bytes (not consumed); None if the peer left."""
        conn.settimeout(_SNIFF_TIMEOUT)
        deadline = time.monotonic() + _SNIFF_TIMEOUT
        head = b""
        while len(head) < _SNIFF_BYTES:
            head = conn.recv(_SNIFF_BYTES, socket.MSG_PEEK)
            if not head:
                return None
            if not H2_PREFACE.startswith(head) or time.monotonic() > deadline:
                break
            if len(head) < _SNIFF_BYTES:
                time.sleep(0.001)  # a preface split across segments: wait for the rest
        conn.settimeout(None)
        return "grpc" if is_http2(head) else "http"

    def _count(self, name: str) -> None:
        with self._cond:
            self.connections[name] += 1


def _plain(address: str) -> str:
    """An IPv4-mapped IPv6 address as IPv4 (how the receiver writes a peer address)."""
    return address[7:] if address.startswith("::ffff:") and "." in address else address


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both directions are closed, passing half-closes on."""
    peer = {a: b, b: a}
    open_reads = {a, b}
    with selectors.DefaultSelector() as sel:
        for s in open_reads:
            sel.register(s, selectors.EVENT_READ)
        while open_reads:
            for key, _ in sel.select():
                src: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    data = b""
                if data:
                    try:
                        peer[src].sendall(data)
                        continue
                    except OSError:
                        return
                sel.unregister(src)
                open_reads.discard(src)
                with contextlib.suppress(OSError):
                    peer[src].shutdown(socket.SHUT_WR)
