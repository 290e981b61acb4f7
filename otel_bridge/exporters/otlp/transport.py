"""Transports of the OTLP exporters: bytes in, a :class:`SendResult` out.

Encoding (records to bytes) is a pure function in :mod:`otel_bridge.exporters.otlp.encoding`;
a transport only moves bytes and classifies the answer per the OTLP specification:

* gRPC: ``CANCELLED``, ``DEADLINE_EXCEEDED``, ``ABORTED``, ``OUT_OF_RANGE``, ``UNAVAILABLE``,
  ``DATA_LOSS`` are retryable; ``RESOURCE_EXHAUSTED`` only when the server sent ``RetryInfo``,
  whose delay is honoured;
* HTTP: 429, 502, 503, 504 are retryable, honouring ``Retry-After``; connection failures are
  retryable; every other status is permanent.

A backend that does not take a signal at all (HTTP 404, 405 or 415; gRPC ``UNIMPLEMENTED``) gives
a result marked ``unsupported``: the exporter then stops sending that signal to it.

A 200 answer may carry *partial success*: the rejected count is reported, never retried.
"""

from __future__ import annotations

import email.utils
import gzip
import http.client
import json
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Protocol
from urllib.parse import urlsplit

import grpc
from google.protobuf.message import DecodeError as PbDecodeError
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from otel_bridge.exporters.otlp.config import GrpcExporterConfig, HttpExporterConfig
from otel_bridge.exporters.otlp.sender import OK, SendResult, Signal

_GRPC_METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "metrics": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
}
_GRPC_RETRYABLE = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_JSON_REJECTED = {
    "traces": "rejectedSpans",
    "logs": "rejectedLogRecords",
    "metrics": "rejectedDataPoints",
}
_HTTP_RETRYABLE = frozenset({429, 502, 503, 504})
_HTTP_UNSUPPORTED = frozenset({404, 405, 415})
_RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"


class Transport(Protocol):
    """Moves one encoded request to the server."""

    def send(self, signal: Signal, payload: bytes) -> SendResult:
        """Send ``payload`` (an encoded export request of ``signal``) once."""

    def target(self, signal: Signal) -> str:
        """Where requests of ``signal`` go (a URL, or ``host:port`` and the gRPC method)."""

    def close(self) -> None:
        """Release connections."""


def _partial(signal: Signal, body: bytes, content_type: str) -> SendResult:
    """The result of a 200 answer: OK, or OK with a partial-success rejection."""
    if not body:
        return OK
    try:
        if content_type.startswith("application/json"):
            partial = json.loads(body).get("partialSuccess") or {}
            key = _JSON_REJECTED[signal]
            rejected = int(partial.get(key) or 0)
            message = str(partial.get("errorMessage") or "")
        elif signal == "traces":
            trace_response = ExportTraceServiceResponse.FromString(body)
            rejected = trace_response.partial_success.rejected_spans
            message = trace_response.partial_success.error_message
        elif signal == "metrics":
            metrics_response = ExportMetricsServiceResponse.FromString(body)
            rejected = metrics_response.partial_success.rejected_data_points
            message = metrics_response.partial_success.error_message
        else:
            logs_response = ExportLogsServiceResponse.FromString(body)
            rejected = logs_response.partial_success.rejected_log_records
            message = logs_response.partial_success.error_message
    except (ValueError, AttributeError, PbDecodeError):
        return OK  # the data was accepted; an unreadable success body changes nothing
    if rejected or message:
        return SendResult(ok=True, rejected=rejected, message=message)
    return OK


# --------------------------------------------------------------------------------------------
# gRPC
# --------------------------------------------------------------------------------------------


def retry_delay_from_trailers(metadata: object) -> float | None:
    """The ``RetryInfo`` delay in a failed call's trailing metadata, in seconds, if any."""
    if not metadata:
        return None
    for key, value in metadata:  # type: ignore[attr-defined]
        if key == "google.rpc.retryinfo-bin" and isinstance(value, bytes):
            info = error_details_pb2.RetryInfo.FromString(value)
            return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            rich = status_pb2.Status.FromString(value)
            for detail in rich.details:
                if detail.type_url == _RETRY_INFO_TYPE:
                    info = error_details_pb2.RetryInfo()
                    detail.Unpack(info)
                    return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
    return None


class GrpcTransport:
    """OTLP/gRPC over one shared channel (thread-safe)."""

    def __init__(self, config: GrpcExporterConfig) -> None:
        target = config.endpoint.rstrip("/")
        secure = target.startswith("https://")
        for scheme in ("http://", "https://"):
            if target.startswith(scheme):
                target = target[len(scheme) :]
        if secure or config.tls.enabled:
            ca, key, cert = config.tls.read()
            creds = grpc.ssl_channel_credentials(ca, key, cert)
            name = config.tls.server_name_override
            options = [("grpc.ssl_target_name_override", name)] if name else None
            self._channel = grpc.secure_channel(target, creds, options)
        else:
            self._channel = grpc.insecure_channel(target)
        self._calls = {
            signal: self._channel.unary_unary(method, None, None)
            for signal, method in _GRPC_METHODS.items()
        }
        self._target = target
        self._metadata = tuple((k.lower(), v) for k, v in config.headers.items())
        self._timeout = config.timeout
        self._compression = (
            grpc.Compression.Gzip
            if config.compression == "gzip"
            else grpc.Compression.NoCompression
        )

    def send(self, signal: Signal, payload: bytes) -> SendResult:
        """One ``Export`` call."""
        try:
            body = self._calls[signal](
                payload,
                timeout=self._timeout,
                metadata=self._metadata,
                compression=self._compression,
            )
        except grpc.RpcError as err:
            code = err.code()
            delay = retry_delay_from_trailers(err.trailing_metadata())
            retryable = code in _GRPC_RETRYABLE or (
                code == grpc.StatusCode.RESOURCE_EXHAUSTED and delay is not None
            )
            return SendResult(
                ok=False,
                retryable=retryable,
                retry_after=delay,
                message=f"gRPC {code.name}: {err.details()}",
                unsupported=code == grpc.StatusCode.UNIMPLEMENTED,
            )
        return _partial(signal, body if isinstance(body, bytes) else b"", "application/x-protobuf")

    def target(self, signal: Signal) -> str:
        """``host:port`` and the gRPC method of ``signal``."""
        return f"{self._target}{_GRPC_METHODS[signal]}"

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()


# --------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or an HTTP date), if valid."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class HttpTransport:
    """OTLP/HTTP with one keep-alive connection per sender thread."""

    def __init__(
        self, config: HttpExporterConfig, urls: Mapping[Signal, str] | None = None
    ) -> None:
        """``urls``: where each signal goes, instead of the configuration's URLs."""
        self._urls = (
            {signal: urlsplit(url) for signal, url in urls.items()}
            if urls is not None
            else {signal: urlsplit(config.url(signal)) for signal in ("traces", "logs")}
        )
        self._json = config.encoding == "json"
        self._gzip = config.compression == "gzip"
        self._headers = dict(config.headers)
        self._timeout = config.timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[http.client.HTTPConnection] = []
        self._ssl: ssl.SSLContext | None = None
        if config.tls.enabled:
            self._ssl = ssl.create_default_context(cafile=config.tls.ca_file or None)
            if config.tls.cert_file:
                self._ssl.load_cert_chain(config.tls.cert_file, config.tls.key_file)

    def _connection(self, signal: Signal) -> http.client.HTTPConnection:
        url = self._urls[signal]
        key = (url.scheme, url.netloc)
        conns: dict[tuple[str, str], http.client.HTTPConnection] = (
            getattr(self._local, "conns", None) or {}
        )
        self._local.conns = conns
        conn = conns.get(key)
        if conn is None:
            if url.scheme == "https":
                conn = http.client.HTTPSConnection(
                    url.hostname or "", url.port, timeout=self._timeout, context=self._ssl
                )
            else:
                conn = http.client.HTTPConnection(
                    url.hostname or "", url.port, timeout=self._timeout
                )
            conns[key] = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def send(self, signal: Signal, payload: bytes) -> SendResult:
        """One POST."""
        url = self._urls[signal]
        path = url.path or "/"
        if url.query:
            path += "?" + url.query
        headers = {
            **self._headers,
            "Content-Type": "application/json" if self._json else "application/x-protobuf",
        }
        body = payload
        if self._gzip:
            body = gzip.compress(payload, compresslevel=5)
            headers["Content-Encoding"] = "gzip"
        conn = self._connection(signal)
        try:
            response, data = _post(conn, path, body, headers)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()  # reconnect on the next attempt
            return SendResult(ok=False, retryable=True, message=_request_failed(exc))
        if response.status == 200:
            return _partial(signal, data, response.getheader("Content-Type", ""))
        if response.getheader("Connection", "").lower() == "close":
            conn.close()
        detail = _status_message(data, response.getheader("Content-Type", ""))
        message = f"HTTP {response.status}: {detail}"
        if response.status in _HTTP_RETRYABLE:
            return SendResult(
                ok=False,
                retryable=True,
                retry_after=parse_retry_after(response.getheader("Retry-After")),
                message=message,
            )
        return SendResult(
            ok=False, message=message, unsupported=response.status in _HTTP_UNSUPPORTED
        )

    def target(self, signal: Signal) -> str:
        """The URL of ``signal`` (without any credentials it carries)."""
        url = self._urls[signal]
        return url._replace(netloc=url.netloc.rpartition("@")[2]).geturl()

    def close(self) -> None:
        """Close every connection."""
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


_STALE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)
"""How a request fails on a kept-alive connection the server closed while it was idle
(``http.client.RemoteDisconnected`` is a ``ConnectionResetError``)."""


def _post(
    conn: http.client.HTTPConnection, path: str, body: bytes, headers: Mapping[str, str]
) -> tuple[http.client.HTTPResponse, bytes]:
    """One POST and its answer. A connection kept alive from an earlier request that the server
    has closed since (uvicorn, Phoenix's server, closes one idle for 5 s) fails with a broken
    pipe or a reset before any answer: the request is sent once more on a new connection, as
    HTTP clients do for an idle connection, so an idle backend is not reported as failing."""
    reused = conn.sock is not None
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
    except _STALE:
        if not reused:
            raise
        conn.close()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
    return response, response.read()


def _request_failed(exc: Exception) -> str:
    """Why a request got no HTTP answer, in printable words. A server that answers HTTP/1.1 with
    HTTP/2 frames (a gRPC endpoint: a SETTINGS or GOAWAY frame) is named as such, never echoed
    as raw bytes onto the user's terminal."""
    if not isinstance(exc, http.client.BadStatusLine):
        return f"HTTP request failed: {exc}"
    line = str(exc.args[0]) if exc.args else ""
    if len(line) >= 4 and line[:3] != "HTT" and ord(line[3]) in (0x04, 0x07):
        return (
            "HTTP request failed: the endpoint answered with HTTP/2 frames, not HTTP/1.1: it "
            "looks like an OTLP/gRPC endpoint (use the otlp exporter, or "
            "OTEL_EXPORTER_OTLP_PROTOCOL=grpc)"
        )
    return f"HTTP request failed: not an HTTP/1.1 answer: {line[:40]!r}"


def _status_message(body: bytes, content_type: str) -> str:
    """The message of a ``google.rpc.Status`` error body, or the body's start as text."""
    try:
        if content_type.startswith("application/json"):
            return str(json.loads(body).get("message", ""))
        if content_type.startswith("application/x-protobuf"):
            return str(status_pb2.Status.FromString(body).message)
    except (ValueError, AttributeError, PbDecodeError):
        pass
    return body[:200].decode("utf-8", "replace")
