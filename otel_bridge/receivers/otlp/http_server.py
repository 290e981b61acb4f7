"""OTLP/HTTP server of the ``otlp`` receiver (``POST /v1/traces`` and ``POST /v1/logs``).

Follows the OTLP/HTTP specification: binary protobuf (``application/x-protobuf``) and JSON
(``application/json``) bodies, ``Content-Encoding`` gzip, deflate or none, and responses in the
content type of the request. Errors carry a ``google.rpc.Status`` whose message says what is
wrong: 400 malformed body, 404 unknown path, 405 wrong method, 411 no length, 413 body too large
(checked against ``Content-Length`` before reading and again while decompressing, so a gzip bomb
never grows past the limit), 408 when the request does not arrive within ``read_timeout`` (the
connection is closed and its thread released), 415 unsupported content type or encoding, 429
with ``Retry-After`` when the pipeline refuses data (throttling, which OTLP clients retry after
that delay) or admission does (:mod:`otel_bridge.admission`: checked before the body is read,
against its declared and then its decompressed size). The listen backlog is
:data:`LISTEN_BACKLOG`; a kept-alive connection idle for ``idle_timeout`` is closed.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import socket
import socketserver
import ssl
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from otel_bridge.admission import Ticket, admission
from otel_bridge.errors import DecodeError, PayloadTooLargeError, RefusedError, StartupError
from otel_bridge.receivers.otlp.config import (
    METRICS_REFUSED,
    HttpConfig,
    port_problem,
    split_endpoint,
)
from otel_bridge.receivers.otlp.peer import transport_peer

if TYPE_CHECKING:
    from otel_bridge.model import TransportPeer
    from otel_bridge.receivers.otlp.receiver import OtlpReceiver, Outcome

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TRACES_PATH = "/v1/traces"
LOGS_PATH = "/v1/logs"
METRICS_PATH = "/v1/metrics"
_CHUNK = 64 * 1024
LISTEN_BACKLOG = 1024
"""Connections the kernel queues before they are accepted (capped by ``net.core.somaxconn``)."""
# google.rpc.Code values used in Status bodies.
_INVALID_ARGUMENT = 3
_NOT_FOUND = 5
_RESOURCE_EXHAUSTED = 8
_UNIMPLEMENTED = 12
_INTERNAL = 13
_UNAUTHENTICATED = 16


class _HttpError(Exception):
    """An error answered with ``status`` and a ``google.rpc.Status`` carrying ``message``."""

    def __init__(self, status: int, code: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = headers or {}


def read_limited(
    read: Callable[[int], bytes],
    length: int,
    encoding: str,
    limit: int,
    grow: Callable[[int], str] | None = None,
) -> bytes:
    """The decoded body: ``length`` bytes from ``read``, decompressed, at most ``limit`` bytes.

    Raises :class:`PayloadTooLargeError` as soon as the decompressed size passes ``limit``, and
    :class:`DecodeError` when the compressed data is corrupt. ``grow`` is told the decompressed
    size as it grows (the request's admission ticket, :mod:`otel_bridge.admission`); a non-empty
    answer stops decompressing with :class:`RefusedError` carrying it.
    """
    raw = read(length)
    if len(raw) < length:
        raise DecodeError(f"body ended after {len(raw)} of {length} bytes")
    if encoding in ("", "identity", "none"):
        reason = grow(len(raw)) if grow is not None else ""
        if reason:
            raise RefusedError(reason)
        return raw
    wbits = {"gzip": 31, "x-gzip": 31, "deflate": 15, "raw-deflate": -15}[encoding]
    out = bytearray()
    data = raw
    while data:
        inflater = zlib.decompressobj(wbits)
        try:
            while data:
                out += inflater.decompress(data, limit + 1 - len(out))
                if len(out) > limit:
                    raise PayloadTooLargeError(
                        f"decompressed body exceeds the limit of {limit} bytes"
                    )
                reason = grow(len(out)) if grow is not None else ""
                if reason:
                    raise RefusedError(reason)
                data = inflater.unconsumed_tail
            out += inflater.flush()
        except zlib.error as exc:
            if encoding == "deflate" and not out:
                # Some clients send raw deflate without the zlib header.
                return read_limited(lambda _n: raw, length, "raw-deflate", limit, grow)
            raise DecodeError(f"body is not valid {encoding} data: {exc}") from None
        if len(out) > limit:
            raise PayloadTooLargeError(f"decompressed body exceeds the limit of {limit} bytes")
        if not inflater.eof:
            raise DecodeError(f"{encoding} body is truncated")
        data = inflater.unused_data  # gzip allows several members one after another
    return bytes(out)


def status_body(content_type: str, code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` body in ``content_type``."""
    if content_type == JSON:
        return json.dumps({"code": code, "message": message}).encode()
    from google.rpc import status_pb2  # type: ignore[import-untyped]  # noqa: PLC0415

    body: bytes = status_pb2.Status(code=code, message=message).SerializeToString()
    return body


def _response_body(content_type: str, signal: str, outcome: Outcome) -> bytes:
    if content_type != JSON:
        # protobuf: imported at the first request that needs it (a run whose command sends
        # nothing, or only JSON, never pays for protobuf and the OTLP message classes)
        from otel_bridge.otlp.proto_codec import encode_export_response  # noqa: PLC0415

        return encode_export_response(signal, outcome.rejected, outcome.error_message)
    if not outcome.rejected:
        return b"{}"
    field = "rejectedSpans" if signal == "traces" else "rejectedLogRecords"
    return json.dumps(
        {"partialSuccess": {field: str(outcome.rejected), "errorMessage": outcome.error_message}}
    ).encode()


class _Handler(BaseHTTPRequestHandler):
    """One request; the server attribute ``otlp`` links back to the :class:`HttpServer`."""

    protocol_version = "HTTP/1.1"
    server_version = "otel-bridge"
    sys_version = ""

    _deadline = 0.0

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: failures are counted in telemetry instead of printed per request."""

    def handle(self) -> None:
        """Complete a TLS handshake (within ``read_timeout``) before serving requests."""
        server: HttpServer = self.server.otlp  # type: ignore[attr-defined]
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.settimeout(server.read_timeout)
            try:
                self.connection.do_handshake()
            except (ssl.SSLError, OSError):
                server.receiver.count("tls_handshake_failures")
                return
        super().handle()

    def handle_one_request(self) -> None:
        """Wait at most ``idle_timeout`` for the request line, then serve the request."""
        server: HttpServer = self.server.otlp  # type: ignore[attr-defined]
        self.connection.settimeout(server.idle_timeout)
        super().handle_one_request()

    def parse_request(self) -> bool:
        """Start the ``read_timeout`` clock once the request line is in, then read headers."""
        server: HttpServer = self.server.otlp  # type: ignore[attr-defined]
        self._deadline = time.monotonic() + server.read_timeout
        self.connection.settimeout(server.read_timeout)
        return super().parse_request()

    def _read(self, n: int) -> bytes:
        """Up to ``n`` body bytes, failing with TimeoutError past the request's deadline."""
        out = bytearray()
        while len(out) < n:
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("read_timeout passed")
            self.connection.settimeout(remaining)
            chunk = self.rfile.read1(min(n - len(out), _CHUNK))
            if not chunk:
                break
            out += chunk
        return bytes(out)

    def _drain(self, n: int) -> None:
        """Read and discard ``n`` body bytes, a chunk at a time (nothing is kept)."""
        left = n
        while left > 0:
            chunk = self._read(min(left, _CHUNK))
            if not chunk:
                return
            left -= len(chunk)

    def _content_type(self) -> str:
        return self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()

    def _send(self, status: int, content_type: str, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _error(self, err: _HttpError) -> None:
        content_type = JSON if self._content_type() == JSON else PROTOBUF
        self._send(
            err.status, content_type, status_body(content_type, err.code, str(err)), err.headers
        )

    def _not_post(self) -> None:
        path = self.path.split("?", 1)[0]
        self.close_connection = True
        if path in (TRACES_PATH, LOGS_PATH):
            self._error(
                _HttpError(
                    405,
                    _UNIMPLEMENTED,
                    f"{self.command} is not allowed; use POST",
                    {"Allow": "POST"},
                )
            )
        else:
            self._error(_HttpError(404, _NOT_FOUND, f"unknown path {path}"))

    do_GET = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _not_post  # noqa: N815

    def do_POST(self) -> None:
        """Handle one export request."""
        server: HttpServer = self.server.otlp  # type: ignore[attr-defined]
        try:
            self._error_or_reply(server)
        except _HttpError as err:
            self._error(err)
        except TimeoutError:
            server.receiver.count("requests_timed_out")
            self.close_connection = True
            self.connection.settimeout(1.0)
            self._error(
                _HttpError(
                    408,
                    _INVALID_ARGUMENT,
                    f"the request did not arrive within {server.read_timeout:g} s",
                )
            )

    def _error_or_reply(self, server: HttpServer) -> None:
        receiver = server.receiver
        auth = server.authenticator
        if auth is not None and not auth.check(self.headers.get("Authorization")):
            receiver.count("requests_unauthenticated")
            self.close_connection = True  # the body is left unread
            raise _HttpError(
                401,
                _UNAUTHENTICATED,
                "missing or invalid credentials",
                {"WWW-Authenticate": auth.challenge},
            )
        path = self.path.split("?", 1)[0]
        if path == METRICS_PATH and not receiver.forwards("metrics"):
            receiver.count("metrics_requests_unsupported")
            self.close_connection = True
            raise _HttpError(404, _NOT_FOUND, METRICS_REFUSED)
        if path not in (TRACES_PATH, LOGS_PATH, METRICS_PATH):
            self.close_connection = True
            raise _HttpError(
                404, _NOT_FOUND, f"unknown path {path}; use {TRACES_PATH} or {LOGS_PATH}"
            )
        content_type = self._content_type()
        if content_type not in (PROTOBUF, JSON):
            self.close_connection = True
            raise _HttpError(
                415,
                _INVALID_ARGUMENT,
                f"unsupported Content-Type {content_type or '(none)'!r}; use {PROTOBUF} or {JSON}",
            )
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in ("", "identity", "none", "gzip", "x-gzip", "deflate"):
            self.close_connection = True
            raise _HttpError(
                415,
                _INVALID_ARGUMENT,
                f"unsupported Content-Encoding {encoding!r}; use gzip or none",
            )
        ticket = self._admit(server)
        try:
            self._reply(server, path, content_type, ticket)
        finally:
            ticket.release()

    def _admit(self, server: HttpServer) -> Ticket:
        """The request's admission ticket; a refusal answers 429 once the body is drained."""
        length_text = self.headers.get("Content-Length", "").strip()
        declared = int(length_text) if length_text.isdigit() else 0
        # an oversized body is answered 413 unread, so it is not charged
        ticket = admission.admit(declared if declared <= server.max_body else 0)
        if isinstance(ticket, Ticket):
            return ticket
        server.receiver.count("requests_refused")
        if 0 < declared <= server.max_body:
            self._drain(declared)  # the connection stays usable
        elif declared or "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
        seconds = max(0, math.ceil(server.receiver.retry_after))
        raise _HttpError(
            429, _RESOURCE_EXHAUSTED, f"not read: {ticket}", {"Retry-After": str(seconds)}
        )

    def _reply(self, server: HttpServer, path: str, content_type: str, ticket: Ticket) -> None:
        receiver = server.receiver
        body = self._read_body(server, ticket)
        protocol = "http/json" if content_type == JSON else "http/protobuf"
        if path == METRICS_PATH:  # forwarded, not recorded (``forwards("metrics")``)
            receiver.forward_metrics(protocol, body)
            self._send(200, content_type, b"{}" if content_type == JSON else b"", {})
            return
        signal = "traces" if path == TRACES_PATH else "logs"
        try:
            peer = transport_peer(
                protocol, str(self.client_address[0]), int(self.client_address[1]), server.port
            )
            outcome = self._decode_and_deliver(receiver, signal, content_type, body, peer)
        except DecodeError as exc:
            receiver.malformed(str(exc))
            raise _HttpError(400, _INVALID_ARGUMENT, str(exc)) from None
        except Exception as exc:  # a bug must not kill the server; the client sees 500
            receiver.report_once("http_internal", f"HTTP export failed: {exc!r}")
            raise _HttpError(500, _INTERNAL, f"internal error: {exc}") from None
        receiver.forward(signal, protocol, body, outcome)
        if outcome.refused:
            seconds = max(0, math.ceil(receiver.retry_after))
            raise _HttpError(
                429, _RESOURCE_EXHAUSTED, outcome.refused, {"Retry-After": str(seconds)}
            )
        if outcome.failed:
            raise _HttpError(400, _INVALID_ARGUMENT, outcome.failed)
        self._send(200, content_type, _response_body(content_type, signal, outcome), {})

    def _read_body(self, server: HttpServer, ticket: Ticket) -> bytes:
        limit = server.max_body
        receiver = server.receiver
        encoding = self.headers.get("Content-Encoding", "").strip().lower()
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                raw = self._read_chunked(limit, receiver)
                length_text = str(len(raw))
                reader: Callable[[int], bytes] = lambda _n: raw  # noqa: E731
            else:
                self.close_connection = True
                raise _HttpError(411, _INVALID_ARGUMENT, "Content-Length is required")
        else:
            reader = self._read
        if not length_text.strip().isdigit():
            self.close_connection = True
            raise _HttpError(400, _INVALID_ARGUMENT, f"invalid Content-Length {length_text!r}")
        length = int(length_text)
        if length > limit:
            receiver.count("requests_too_large")
            self.close_connection = True  # the body is left unread
            raise _HttpError(
                413,
                _RESOURCE_EXHAUSTED,
                f"body of {length} bytes exceeds the limit of {limit} bytes",
            )
        try:
            return read_limited(reader, length, encoding, limit, ticket.grow)
        except RefusedError as exc:
            receiver.count("requests_refused")
            seconds = max(0, math.ceil(receiver.retry_after))
            raise _HttpError(
                429, _RESOURCE_EXHAUSTED, f"not decoded: {exc}", {"Retry-After": str(seconds)}
            ) from None
        except PayloadTooLargeError as exc:
            receiver.count("requests_too_large")
            raise _HttpError(413, _RESOURCE_EXHAUSTED, str(exc)) from None
        except DecodeError as exc:
            receiver.malformed(str(exc))
            self.close_connection = True
            raise _HttpError(400, _INVALID_ARGUMENT, str(exc)) from None

    def _read_chunked(self, limit: int, receiver: OtlpReceiver) -> bytes:
        out = bytearray()
        while True:
            size_line = self.rfile.readline(1024).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                self.close_connection = True
                raise _HttpError(400, _INVALID_ARGUMENT, "malformed chunked body") from None
            if size == 0:
                while self.rfile.readline(1024).strip():
                    pass
                return bytes(out)
            if len(out) + size > limit:
                receiver.count("requests_too_large")
                self.close_connection = True
                raise _HttpError(
                    413, _RESOURCE_EXHAUSTED, f"body exceeds the limit of {limit} bytes"
                )
            out += self._read(size)
            self.rfile.readline(1024)

    @staticmethod
    def _decode_and_deliver(
        receiver: OtlpReceiver,
        signal: str,
        content_type: str,
        body: bytes,
        peer: TransportPeer | None,
    ) -> Outcome:
        if content_type == JSON:
            from otel_bridge.otlp import json_codec  # noqa: PLC0415 (at the first JSON request)

            if signal == "traces":
                return receiver.deliver_spans(json_codec.decode_traces(body, peer))
            return receiver.deliver_logs(json_codec.decode_logs(body, peer))
        from google.protobuf.message import DecodeError as PbDecodeError  # noqa: PLC0415

        from otel_bridge.otlp.proto_codec import decode_logs, decode_traces  # noqa: PLC0415

        if signal == "traces":
            try:
                spans = decode_traces(body, peer)
            except PbDecodeError as exc:
                raise DecodeError(f"cannot decode ExportTraceServiceRequest: {exc}") from None
            return receiver.deliver_spans(spans)
        try:
            logs = decode_logs(body, peer)
        except PbDecodeError as exc:
            raise DecodeError(f"cannot decode ExportLogsServiceRequest: {exc}") from None
        return receiver.deliver_logs(logs)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG
    otlp: HttpServer
    wakeups = 0
    """How often the serving loop woke (each accepted connection, and the stop)."""

    def server_bind(self) -> None:
        """Bind, without ``HTTPServer``'s reverse lookup of the host's name (``socket.getfqdn``:
        a resolver query at every start, about a millisecond on the start of an ``observe``),
        whose only reader is CGI's ``SERVER_NAME``: this server has no CGI handler."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def serve_until(self, stop_fd: int) -> None:
        """Accept connections until ``stop_fd`` is readable. The loop sleeps in the selector
        until a connection or the stop arrives: an idle server never wakes, and a stop is seen
        at once (``serve_forever`` instead polls a flag every ``poll_interval``)."""
        selector_class = getattr(selectors, "PollSelector", selectors.SelectSelector)
        with selector_class() as selector:
            selector.register(self.socket, selectors.EVENT_READ)
            selector.register(stop_fd, selectors.EVENT_READ)
            while True:
                ready = selector.select()
                self.wakeups += 1
                if any(key.fd == stop_fd for key, _ in ready):
                    return
                if ready:
                    self._accept()

    def _accept(self) -> None:
        """Accept one connection and hand it to a thread (``socketserver``'s steps)."""
        try:
            request, client_address = self.get_request()
        except OSError:
            return  # gone before it was accepted, or a failed TLS accept
        if not self.verify_request(request, client_address):
            self.shutdown_request(request)
            return
        try:
            self.process_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
            self.shutdown_request(request)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _SharedServer(_Server):
    allow_reuse_port = True  # SO_REUSEPORT (reuse_port: true)


class _SharedServer6(_Server6):
    allow_reuse_port = True


class HttpServer:
    """A started ``ThreadingHTTPServer`` bound to the configured endpoint."""

    def __init__(self, receiver: OtlpReceiver, config: HttpConfig) -> None:
        self.receiver = receiver
        self.max_body = config.max_request_body_size
        self.read_timeout = config.read_timeout
        self.idle_timeout = config.idle_timeout
        host, port = split_endpoint(config.endpoint)
        if config.reuse_port:
            server_class: type[_Server] = _SharedServer6 if ":" in host else _SharedServer
        else:
            server_class = _Server6 if ":" in host else _Server
        try:
            self._httpd = server_class((host, port), _Handler)
        except OSError as exc:
            raise StartupError(
                f"cannot listen for HTTP on {config.endpoint}: {port_problem(port, exc, 'http')}"
            ) from exc
        self._httpd.otlp = self
        try:
            self.authenticator = config.auth.authenticator() if config.auth else None
            if config.tls is not None:
                context = config.tls.server_context()
                self._httpd.socket = context.wrap_socket(
                    self._httpd.socket, server_side=True, do_handshake_on_connect=False
                )
        except (OSError, ValueError) as exc:
            self._httpd.server_close()
            raise StartupError(f"otlp receiver: HTTP tls/auth: {exc}") from exc
        self.port: int = self._httpd.server_address[1]
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(
            target=self._httpd.serve_until,
            args=(self._stop_r,),
            name="otlp-http",
            daemon=True,
        )
        self._thread.start()

    @property
    def wakeups(self) -> int:
        """How often the accepting loop woke (connections and the stop; never while idle)."""
        return self._httpd.wakeups

    def stop(self) -> None:
        """Stop accepting requests (the loop wakes at once), then close the socket. Requests
        already accepted go on in their threads (the receiver waits for those in the pipeline).
        Safe twice."""
        if self._stop_w < 0:
            return
        os.write(self._stop_w, b"x")
        self._thread.join(timeout=5.0)
        self._httpd.server_close()
        for fd in (self._stop_r, self._stop_w):
            os.close(fd)
        self._stop_r = self._stop_w = -1
