"""The ``otlp`` receiver: OTLP/gRPC and OTLP/HTTP servers feeding one pipeline consumer.

Both transports decode into typed spans and log records (:mod:`otel_bridge.otlp`) and hand them
to :meth:`OtlpReceiver.deliver`, which implements the OTLP response rules in one place:

* invalid records are rejected one by one and the client gets *partial success*
  (``rejected_spans``/``rejected_log_records`` with an ``error_message``), the valid rest is
  passed on;
* when the next consumer refuses a batch for now (it raises
  :class:`~otel_bridge.errors.RefusedError`, e.g. the memory limiter is over its limit), nothing
  is acknowledged: the client gets the OTLP throttling status (gRPC ``RESOURCE_EXHAUSTED`` with
  ``RetryInfo``, HTTP 429 with ``Retry-After``), which OTLP clients retry after that delay, so
  nothing acknowledged is ever lost;
* when the next consumer raises anything else (a permanent error, or a processor's
  ``ValueError``), the batch will never be accepted: the client gets a permanent status (gRPC
  ``INVALID_ARGUMENT``, HTTP 400) with a message saying what was wrong, the records are counted
  as rejected, and the server keeps serving.

Counters (:data:`COUNTERS`, ``receiver.<id>.<name>``): ``spans_accepted``, ``spans_rejected``,
``spans_refused``, ``log_records_accepted``, ``log_records_rejected``, ``log_records_refused``,
``requests_malformed``, ``requests_too_large``, ``requests_refused``, ``requests_timed_out``,
``requests_unauthenticated``, ``tls_handshake_failures``.

Binding beyond loopback without ``auth`` is allowed but warned about at start (anyone who can
reach the port can write evidence); see ``docs/security.md``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from otel_bridge.component import (
    ComponentStatus,
    Consumer,
    CounterSpec,
    CreateSettings,
    Endpoint,
    ForwardTap,
    Host,
    Telemetry,
)
from otel_bridge.errors import StartupError, is_retryable
from otel_bridge.model import Batch, LogRecord, Span
from otel_bridge.receivers.otlp.config import (
    GrpcConfig,
    OtlpReceiverConfig,
    Protocols,
    bind_problem,
    check_grpc_port,
    exposed_only_locally,
    split_endpoint,
)
from otel_bridge.receivers.otlp.http_server import HttpServer

if TYPE_CHECKING:
    from otel_bridge.otlp.proto_codec import Decoded
    from otel_bridge.receivers.otlp.grpc_server import GrpcServer

DRAIN_TIMEOUT = 120.0
"""Seconds :meth:`OtlpReceiver.shutdown` waits for calls still in the pipeline."""

COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("spans_accepted", "spans passed on to the pipelines", "{spans}"),
    CounterSpec(
        "spans_rejected",
        "spans not accepted for good: invalid records, or the pipeline rejected them",
        "{spans}",
    ),
    CounterSpec("spans_refused", "spans the pipeline refused for now (client retries)", "{spans}"),
    CounterSpec("log_records_accepted", "log records passed on to the pipelines", "{records}"),
    CounterSpec(
        "log_records_rejected",
        "log records not accepted for good: invalid, or the pipeline rejected them",
        "{records}",
    ),
    CounterSpec("log_records_refused", "log records refused for now (client retries)", "{records}"),
    CounterSpec("requests_malformed", "requests whose body could not be decoded", "{requests}"),
    CounterSpec("requests_too_large", "requests over the size limit", "{requests}"),
    CounterSpec(
        "requests_refused",
        "requests refused for now before they were decoded (admission, client retries)",
        "{requests}",
    ),
    CounterSpec(
        "requests_timed_out", "HTTP requests that did not arrive within read_timeout", "{requests}"
    ),
    CounterSpec(
        "requests_unauthenticated", "requests refused for missing or bad credentials", "{requests}"
    ),
    CounterSpec("tls_handshake_failures", "HTTPS connections whose handshake failed", "{conns}"),
    CounterSpec(
        "metrics_requests_unsupported",
        "metrics export requests answered 404 / UNIMPLEMENTED (metrics are not recorded)",
        "{requests}",
    ),
    CounterSpec(
        "metrics_requests_forwarded",
        "metrics export requests passed on to a forward destination, not recorded",
        "{requests}",
    ),
)
"""The counters of the ``otlp`` receiver."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to answer a client after delivering one request."""

    rejected: int = 0
    error_message: str = ""
    refused: str = ""
    """Non-empty when the pipeline refused the data: answer with a retryable status."""
    failed: str = ""
    """Non-empty when the pipeline rejected the data for good: answer with a permanent status."""
    records: int = 0
    """Records in the request, accepted or rejected."""


class OtlpReceiver:
    """Receives OTLP over gRPC and HTTP; see the module docstring."""

    def __init__(
        self, settings: CreateSettings, config: OtlpReceiverConfig, next_consumer: Consumer
    ) -> None:
        self._settings = settings
        self._config = config
        self._next = next_consumer
        self._telemetry: Telemetry = settings.telemetry
        self._lock = threading.Lock()
        self._grpc: GrpcServer | None = None
        self._http: HttpServer | None = None
        self._started = False
        self._stopped = False
        self._defer_grpc = False
        self._forward: ForwardTap | None = None
        self._refusals: dict[str, list[str]] = {}
        """Why records were refused for now, per noun (:meth:`_refused`)."""
        self._closing = False
        self._inflight = 0
        self._drained = threading.Condition()

    def defer_grpc(self) -> None:
        """Start the gRPC server (and import gRPC) only when :meth:`start_grpc` asks for it, not
        in :meth:`start`: ``observe``'s protocol mux does so at the first HTTP/2 connection, so
        a command that exports over HTTP costs no gRPC runtime. Before :meth:`start`."""
        self._defer_grpc = True

    def start_grpc(self) -> tuple[str, int] | None:
        """Start the configured gRPC server now if it is not running; its ``(host, port)``,
        None when gRPC is off, the receiver is not running, or the server cannot start."""
        with self._lock:
            cfg = self._config.effective_protocols().grpc
            if cfg is None or not self._started or self._stopped or self._closing:
                return None
            if self._grpc is None:
                try:
                    self._grpc = _grpc_server(self, cfg)
                except StartupError as exc:
                    self.report_once("grpc_start", f"gRPC server not started: {exc}")
                    return None
            host = cfg.endpoint.rpartition(":")[0].strip("[]") or "127.0.0.1"
            return host, self._grpc.port

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

    def set_forward(self, tap: ForwardTap | None) -> None:
        """Hand every request this receiver takes to ``tap`` too, unchanged (``observe``
        forwarding to the user's own destination). A metrics request is then answered with
        success and only passed on (counted in ``metrics_requests_forwarded``), never recorded.
        Before :meth:`start`."""
        self._forward = tap

    def forwards(self, signal: str) -> bool:
        """Whether requests of ``signal`` are passed on (:meth:`set_forward`)."""
        tap = self._forward
        return tap is not None and tap.forwards(signal)

    def forward(self, signal: str, protocol: str, body: bytes, outcome: Outcome) -> None:
        """Pass a request the client will not send again (not refused) to the tap, if any."""
        tap = self._forward
        if tap is not None and not outcome.refused and tap.forwards(signal):
            tap.request(signal, protocol, body, outcome.records)

    def forward_metrics(self, protocol: str, body: bytes) -> None:
        """Pass a metrics request on (only when :meth:`forwards` said so)."""
        tap = self._forward
        if tap is not None:
            self.count("metrics_requests_forwarded")
            tap.request("metrics", protocol, body, 1)

    def count(self, name: str, n: int = 1) -> None:
        """Add ``n`` to this receiver's counter ``name``."""
        if n:
            self._telemetry.count(name, n)

    def _refused(self, noun: str, n: int, reason: str) -> None:
        """Count ``n`` records refused for now and keep why (the first three distinct reasons,
        as the note ``receiver.<id>.<noun>_refused``: ``observe``'s summary says them; rejected
        records keep theirs the same way, as ``<noun>_rejected``)."""
        self.count(f"{noun}_refused", n)
        self._keep_reason(f"{noun}_refused", reason)

    def malformed(self, reason: str) -> None:
        """Count a request whose body could not be decoded (answered 400 / INVALID_ARGUMENT:
        nothing of it is kept) and keep why, as :meth:`_refused` does (the note
        ``receiver.<id>.requests_malformed``)."""
        self.count("requests_malformed")
        self._keep_reason("requests_malformed", reason)

    def _keep_reason(self, counter: str, reason: str) -> None:
        """Keep ``reason`` among the first three distinct ones of ``counter``, as its note."""
        with self._lock:
            reasons = self._refusals.setdefault(counter, [])
            if reason in reasons or len(reasons) >= 3:
                return
            reasons.append(reason)
            text = "; ".join(reasons)
        self._telemetry.note(f"receiver.{self._settings.id}.{counter}", text)

    def report_once(self, key: str, message: str) -> None:
        """Log ``message`` once per ``key`` for this receiver."""
        self._telemetry.report_once(
            f"receiver.{self._settings.id}.{key}", f"{self._settings.id}: {message}"
        )

    def status(self) -> ComponentStatus:
        """The bound endpoints (``grpc``, ``http``) once started."""
        protocols = self._config.effective_protocols()
        endpoints = []
        for name, cfg, port in (
            ("grpc", protocols.grpc, self.grpc_port),
            ("http", protocols.http, self.http_port),
        ):
            if cfg is not None and port is not None:
                host = cfg.endpoint.rpartition(":")[0].strip("[]") or "127.0.0.1"
                endpoints.append(Endpoint(protocol=name, host=host, port=port))
        return ComponentStatus(endpoints=tuple(endpoints))

    def preflight(self) -> None:
        """StartupError when a configured port is taken now (a probe socket, bound and closed),
        before the collector starts anything: a start that would fail here creates no file."""
        protocols = self._config.effective_protocols()
        if protocols.grpc is not None:
            check_grpc_port(
                *split_endpoint(protocols.grpc.endpoint), reuse_port=protocols.grpc.reuse_port
            )
        if protocols.http is not None:
            host, port = split_endpoint(protocols.http.endpoint)
            problem = bind_problem(host, port, reuse_port=protocols.http.reuse_port, key="http")
            if problem:
                raise StartupError(
                    f"cannot listen for HTTP on {protocols.http.endpoint}: {problem}"
                )

    def start(self, host: Host) -> None:
        """Bind and start the configured servers; StartupError if a port cannot be bound."""
        with self._lock:
            if self._started:
                return
            self._started = True
            self._telemetry = host.telemetry.in_scope_of(self._telemetry)
            protocols = self._config.effective_protocols()
            try:
                if protocols.grpc is not None and not self._defer_grpc:
                    self._grpc = _grpc_server(self, protocols.grpc)
                elif protocols.grpc is not None:  # deferred: a taken port is said now, not later
                    check_grpc_port(
                        *split_endpoint(protocols.grpc.endpoint),
                        reuse_port=protocols.grpc.reuse_port,
                    )
                if protocols.http is not None:
                    self._http = HttpServer(self, protocols.http)
            except StartupError:
                self._stop_servers()
                raise
            self._warn_exposed(protocols)

    def _warn_exposed(self, protocols: Protocols) -> None:
        """Warn once per protocol that listens beyond loopback without authentication."""
        for name, cfg in (("grpc", protocols.grpc), ("http", protocols.http)):
            if cfg is not None and cfg.auth is None and not exposed_only_locally(cfg.endpoint):
                self.report_once(
                    f"{name}_exposed",
                    f"{name} listens on {cfg.endpoint}, beyond loopback, without auth: anyone "
                    f"who can reach it can send data; set protocols.{name}.auth (and tls)",
                )

    def shutdown(self) -> None:
        """Stop accepting requests and wait for those in flight. Safe before start and twice.

        A call still in the pipeline when the servers' grace ends (the gRPC server cancels it,
        its handler thread goes on) is waited for too, up to ``DRAIN_TIMEOUT``: the exporters
        shut down after the receivers, and must not while a batch is still on its way to them.
        Calls arriving meanwhile are refused (retryable)."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._stop_servers()
        with self._drained:
            self._closing = True
            if not self._drained.wait_for(lambda: self._inflight == 0, DRAIN_TIMEOUT):
                self.report_once(
                    "drain", f"{self._inflight} calls still in the pipeline at shutdown"
                )

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
            self._keep_reason(f"{noun}_rejected", decoded.error_message)
        if batch is not None:
            with self._drained:
                closing = self._closing
                if not closing:
                    self._inflight += 1
            if closing:
                self._refused(noun, n, "they arrived while the collector was shutting down")
                return Outcome(refused="the receiver is shutting down")
            try:
                self._next.consume(batch)
            except Exception as exc:
                return self._failed(exc, n, noun)
            finally:
                with self._drained:
                    self._inflight -= 1
                    self._drained.notify_all()
            self.count(f"{noun}_accepted", n)
        return Outcome(decoded.rejected, decoded.error_message, records=n + decoded.rejected)

    def _failed(self, exc: Exception, n: int, noun: str) -> Outcome:
        """The answer to a batch the pipeline raised on: retryable only for a refusal."""
        if is_retryable(exc):
            self._refused(noun, n, f"the pipeline could not take them: {exc}")
            self.report_once(
                f"{noun}_refused", f"the pipeline refused data, clients asked to retry: {exc}"
            )
            return Outcome(refused=f"the pipeline cannot accept data now: {exc}")
        self.count(f"{noun}_rejected", n)
        self._keep_reason(f"{noun}_rejected", f"the pipeline rejected them: {exc}")
        self.report_once(
            f"{noun}_failed",
            f"the pipeline rejected a batch ({type(exc).__name__}: {exc}); clients told not "
            "to retry",
        )
        return Outcome(
            rejected=n,
            failed=f"the pipeline rejected the data ({type(exc).__name__}): {exc}",
            records=n,
        )


def _grpc_server(receiver: OtlpReceiver, config: GrpcConfig) -> GrpcServer:
    """The gRPC server (imports gRPC and the protobuf codecs: only when one is started)."""
    from otel_bridge.receivers.otlp.grpc_server import GrpcServer  # noqa: PLC0415

    return GrpcServer(receiver, config)
