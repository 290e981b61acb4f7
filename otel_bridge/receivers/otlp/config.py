"""Configuration of the ``otlp`` receiver, shaped like the Collector's.

::

    receivers:
      otlp:
        protocols:
          grpc:                        # present (even empty) = on, with these defaults
            endpoint: 127.0.0.1:4317
            max_recv_msg_size_mib: 4
          http:
            endpoint: 127.0.0.1:4318
            max_request_body_size: 20971520

Each protocol also takes ``tls`` and ``auth`` (:mod:`otel_bridge.receivers.otlp.security`,
``docs/security.md``).

As in the Collector, a protocol is on when its section is present (``grpc:`` with no value means
"on, with defaults") and off when it is left out. Without any ``protocols`` section both are on
with their defaults, so ``receivers: {otlp: }`` is a working receiver. Port ``0`` asks the system
for a free port; the receiver reports the bound ports as ``grpc_port``/``http_port``.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass, field

from otel_bridge.errors import StartupError
from otel_bridge.identity import is_loopback
from otel_bridge.receivers.otlp.security import AuthConfig, TlsConfig

DEFAULT_GRPC_ENDPOINT = "127.0.0.1:4317"
DEFAULT_HTTP_ENDPOINT = "127.0.0.1:4318"


METRICS_REFUSED = (
    "otel-bridge records traces and logs, not metrics: this metrics request was not accepted "
    "(turn the exporter off with OTEL_METRICS_EXPORTER=none, or send metrics elsewhere)"
)
"""Why a metrics export request is refused (HTTP 404, gRPC UNIMPLEMENTED, as a Collector
without a metrics pipeline answers), counted in ``metrics_requests_unsupported``."""


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` or ``[v6]:port``; ValueError says what is wrong."""
    host, sep, port_text = endpoint.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{endpoint!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{endpoint!r}: write an IPv6 address in brackets, [::1]:4317")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{endpoint!r}: port must be a number from 0 to 65535")
    return host, int(port_text)


def bind_problem(host: str, port: int, *, reuse_port: bool = False, key: str = "grpc") -> str:
    """Why ``host:port`` cannot be listened on, in plain words ("" when it can, or for port 0).

    Tried with a plain socket first: a failed bind inside gRPC prints the C-core's own error
    line to stderr (and the message it raises names an environment variable, not the cause).
    ``SO_REUSEADDR`` as gRPC sets it (a closed connection in ``TIME_WAIT`` is no conflict);
    ``SO_REUSEPORT`` only when sharing the port was asked for.
    """
    if port == 0:
        return ""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (OSError, IndexError) as exc:
        return f"cannot resolve {host!r}: {exc}"
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port and hasattr(socket, "SO_REUSEPORT"):
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return port_problem(port, exc, key)
    return ""


def grpc_address(host: str, port: int) -> str:
    """``host:port`` as gRPC takes it (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_grpc_port(host: str, port: int, *, reuse_port: bool = False) -> None:
    """:class:`StartupError` naming the address and the cause when gRPC could not listen on it
    (said by us, before gRPC's C-core logs its own line to stderr, and without importing gRPC)."""
    problem = bind_problem(host, port, reuse_port=reuse_port)
    if problem:
        raise StartupError(f"cannot listen for gRPC on {grpc_address(host, port)}: {problem}")


def port_problem(port: int, exc: OSError, key: str) -> str:
    """A bind failure as one sentence saying what to do (``key``: ``grpc`` or ``http``)."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} is already in use by another process (another collector?): stop it, "
            f"or set protocols.{key}.endpoint to a free port"
        )
    if exc.errno == errno.EACCES:
        return f"not allowed to listen on port {port} (ports below 1024 need privileges)"
    return str(exc.strerror or exc)


def _endpoint_problems(endpoint: str, path: str) -> list[str]:
    try:
        split_endpoint(endpoint)
    except ValueError as exc:
        return [f"{path}: {exc}"]
    return []


def _security_problems(cfg: GrpcConfig | HttpConfig, path: str) -> list[str]:
    problems: list[str] = []
    if cfg.tls is not None:
        problems += cfg.tls.problems(f"{path}.tls")
    if cfg.auth is not None:
        problems += cfg.auth.problems(f"{path}.auth")
        if cfg.tls is None and not exposed_only_locally(cfg.endpoint):
            problems.append(
                f"{path}.auth: credentials would cross the network in clear text; "
                f"add {path}.tls or listen on a loopback address"
            )
    return problems


def exposed_only_locally(endpoint: str) -> bool:
    """Whether ``endpoint`` listens on a loopback address only (False if unparsable)."""
    try:
        host, _ = split_endpoint(endpoint)
    except ValueError:
        return False
    return host == "localhost" or is_loopback(host)


@dataclass(slots=True, kw_only=True)
class GrpcConfig:
    """OTLP/gRPC server settings."""

    endpoint: str = DEFAULT_GRPC_ENDPOINT
    """``host:port`` to listen on; port 0 picks a free port."""
    max_recv_msg_size_mib: int = 4
    """Largest accepted request, in MiB; larger ones get ``RESOURCE_EXHAUSTED``."""
    tls: TlsConfig | None = None
    """Serve TLS (and with ``client_ca_file`` require client certificates)."""
    auth: AuthConfig | None = None
    """Require credentials in the ``authorization`` metadata."""
    reuse_port: bool = False
    """Bind with ``SO_REUSEPORT`` (Linux): several collector processes listen on one port and
    the kernel spreads incoming connections over them (two gateways behind one endpoint,
    ``docs/deployment.md``). Off by default: a second process on the port is then an error."""


@dataclass(slots=True, kw_only=True)
class HttpConfig:
    """OTLP/HTTP server settings."""

    endpoint: str = DEFAULT_HTTP_ENDPOINT
    """``host:port`` to listen on; port 0 picks a free port."""
    max_request_body_size: int = 20 * 1024 * 1024
    """Largest accepted body in bytes, both as sent and after decompression; larger gets 413."""
    read_timeout: float = field(default=30.0, metadata={"duration": True})
    """Seconds a request may take to arrive, headers and body together, once its first line
    has; a slower (stalled) upload gets 408 and its connection and thread are released."""
    idle_timeout: float = field(default=60.0, metadata={"duration": True})
    """Seconds a kept-alive connection may wait for its next request before it is closed."""
    tls: TlsConfig | None = None
    """Serve HTTPS (and with ``client_ca_file`` require client certificates)."""
    auth: AuthConfig | None = None
    """Require credentials in the ``Authorization`` header."""
    reuse_port: bool = False
    """Bind with ``SO_REUSEPORT`` (Linux): several collector processes listen on one port and
    the kernel spreads incoming connections over them (two gateways behind one endpoint,
    ``docs/deployment.md``). Off by default: a second process on the port is then an error."""


@dataclass(slots=True, kw_only=True)
class Protocols:
    """Which protocols are on: a present section is on, an absent one off."""

    grpc: GrpcConfig | None = None
    http: HttpConfig | None = None


@dataclass(slots=True, kw_only=True)
class OtlpReceiverConfig:
    """Configuration of the ``otlp`` receiver."""

    protocols: Protocols | None = None
    """``None`` (no ``protocols`` section) means both protocols with their defaults."""
    retry_after: float = field(default=1.0, metadata={"duration": True})
    """Seconds a client is asked to wait (HTTP ``Retry-After``, gRPC ``RetryInfo``) when the
    pipeline refuses data (for example the memory limiter is over its limit)."""

    def effective_protocols(self) -> Protocols:
        """The protocols to serve, with the no-section default applied."""
        if self.protocols is None:
            return Protocols(grpc=GrpcConfig(), http=HttpConfig())
        return self.protocols

    def validate(self) -> list[str]:
        """Problems as ``"key.path: message"``, relative to the receiver."""
        problems: list[str] = []
        protocols = self.effective_protocols()
        if protocols.grpc is None and protocols.http is None:
            problems.append(
                "protocols: must enable at least one of grpc, http "
                "(an empty section such as `grpc:` turns it on with defaults)"
            )
        if protocols.grpc is not None:
            problems += _endpoint_problems(protocols.grpc.endpoint, "protocols.grpc.endpoint")
            if protocols.grpc.max_recv_msg_size_mib <= 0:
                problems.append("protocols.grpc.max_recv_msg_size_mib: must be positive")
            elif protocols.grpc.max_recv_msg_size_mib > 2047:
                problems.append("protocols.grpc.max_recv_msg_size_mib: must be at most 2047")
            problems += _security_problems(protocols.grpc, "protocols.grpc")
        if protocols.http is not None:
            problems += _endpoint_problems(protocols.http.endpoint, "protocols.http.endpoint")
            if protocols.http.max_request_body_size <= 0:
                problems.append("protocols.http.max_request_body_size: must be positive")
            for name in ("read_timeout", "idle_timeout"):
                if not getattr(protocols.http, name) > 0:
                    problems.append(f"protocols.http.{name}: must be positive")
            problems += _security_problems(protocols.http, "protocols.http")
        if self.retry_after < 0:
            problems.append("retry_after: must not be negative")
        return problems


def default_config() -> OtlpReceiverConfig:
    """A fresh default configuration (both protocols on, loopback, default ports)."""
    return OtlpReceiverConfig()
