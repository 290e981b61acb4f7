"""The ``otlp`` receiver: OTLP/gRPC and OTLP/HTTP servers feeding one pipeline consumer.

Both transports decode into typed spans and log records (:mod:`otel_bridge.otlp`) and hand them
to :meth:`OtlpReceiver.deliver`, which implements the OTLP response rules in one place:

* invalid records are rejected one by one and the client gets *partial success*
  (``rejected_spans``/``rejected_log_records`` with an ``error_message``), the valid rest is
  passed on;
* when the next consumer refuses a batch (it raises, e.g. the memory limiter is over its limit),
  nothing is acknowledged: the client gets a retryable status (gRPC ``UNAVAILABLE`` with
  ``RetryInfo``, HTTP 503 with ``Retry-After``), so nothing acknowledged is ever lost.

Counters in ``host.telemetry`` (``receiver.<id>.``): ``spans_accepted``, ``spans_rejected``,
``spans_refused``, ``log_records_accepted``, ``log_records_rejected``, ``log_records_refused``,
``requests_malformed``, ``requests_too_large``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from otel_bridge.component import Consumer, CreateSettings, Host, Telemetry
from otel_bridge.errors import StartupError
from otel_bridge.model import Batch, LogRecord, Span
from otel_bridge.otlp.proto_codec import Decoded
from otel_bridge.receivers.otlp.config import OtlpReceiverConfig
from otel_bridge.receivers.otlp.grpc_server import GrpcServer
from otel_bridge.receivers.otlp.http_server import HttpServer


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to answer a client after delivering one request."""

    rejected: int = 0
    error_message: str = ""
    refused: str = ""
    """Non-empty when the pipeline refused the data: answer with a retryable status."""


class OtlpReceiver:
    """Receives OTLP over gRPC and HTTP; see the module docstring."""

    def __init__(
        self, settings: CreateSettings, config: OtlpReceiverConfig, next_consumer: Consumer
    ) -> None:
        self._settings = settings
        self._config = config
        self._next = next_consumer
        self._telemetry: Telemetry = settings.telemetry
        self._prefix = f"receiver.{settings.id}."
        self._lock = threading.Lock()
        self._grpc: GrpcServer | None = None
        self._http: HttpServer | None = None
        self._started = False
        self._stopped = False

    @property
    def config(self) -> OtlpReceiverConfig:
        """The receiver's configuration."""
        return self._config

    @property
    def retry_after(self) -> float:
        """Seconds a refused client is asked to wait."""
        return self._config.retry_after

    @property
    def grpc_port(self) -> int | None:
        """The bound gRPC port once started; None when gRPC is off or not started."""
        return self._grpc.port if self._grpc is not None else None

    @property
    def http_port(self) -> int | None:
        """The bound HTTP port once started; None when HTTP is off or not started."""
        return self._http.port if self._http is not None else None

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to this receiver's counter ``name``."""
        if n:
            self._telemetry.count(self._prefix + name, n)

    def report_once(self, key: str, message: str) -> None:
        """Log ``message`` once per ``key`` for this receiver."""
        self._telemetry.report_once(self._prefix + key, f"{self._settings.id}: {message}")

    def start(self, host: Host) -> None:
        """Bind and start the configured servers; StartupError if a port cannot be bound."""
        with self._lock:
            if self._started:
                return
            self._started = True
            self._telemetry = host.telemetry
            protocols = self._config.effective_protocols()
            try:
                if protocols.grpc is not None:
                    self._grpc = GrpcServer(self, protocols.grpc)
                if protocols.http is not None:
                    self._http = HttpServer(self, protocols.http)
            except StartupError:
                self._stop_servers()
                raise

    def shutdown(self) -> None:
        """Stop accepting requests and wait for those in flight. Safe before start and twice."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._stop_servers()

    def _stop_servers(self) -> None:

        if self._http is not None:
            self._http.stop()
        if self._grpc is not None:
            self._grpc.stop()

    def deliver_spans(self, decoded: Decoded[Span]) -> Outcome:
        """Pass decoded spans on; the outcome says what to answer the client."""
        batch = Batch(spans=decoded.records) if decoded.records else None
        return self._deliver(batch, len(decoded.records), decoded, "spans")

    def deliver_logs(self, decoded: Decoded[LogRecord]) -> Outcome:
        """Pass decoded log records on; the outcome says what to answer the client."""
        batch = Batch(logs=decoded.records) if decoded.records else None
        return self._deliver(batch, len(decoded.records), decoded, "log_records")

    def _deliver(
        self,
        batch: Batch | None,
        n: int,
        decoded: Decoded[Span] | Decoded[LogRecord],
        noun: str,
    ) -> Outcome:
        if decoded.rejected:
            self.count(f"{noun}_rejected", decoded.rejected)
            self.report_once(f"{noun}_rejected", decoded.error_message)
        if batch is not None:
            try:
                self._next.consume(batch)
            except Exception as exc:  # any refusal downstream reaches the client as retryable
                self.count(f"{noun}_refused", n)
                self.report_once(
                    f"{noun}_refused", f"the pipeline refused data, clients asked to retry: {exc}"
                )
                return Outcome(refused=f"the pipeline cannot accept data now: {exc}")
            self.count(f"{noun}_accepted", n)
        return Outcome(decoded.rejected, decoded.error_message)
