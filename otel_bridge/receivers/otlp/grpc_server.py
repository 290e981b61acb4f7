"""OTLP/gRPC server of the ``otlp`` receiver (``TraceService/Export`` and ``LogsService/Export``).

Requests arrive as raw bytes and are parsed here, so a malformed message is answered with
``INVALID_ARGUMENT`` and a message saying what is wrong (grpcio would answer its own deserializer
failure with ``INTERNAL``). Oversized messages are refused by grpcio itself with
``RESOURCE_EXHAUSTED`` (no ``RetryInfo``: permanent for an OTLP client); a refusal by the pipeline
(e.g. the memory limiter) is ``RESOURCE_EXHAUSTED`` *with* ``RetryInfo``, which the OTLP
specification makes retryable after that delay (the OpenTelemetry SDK exporters retry it), as is
a request admission refuses before it is decoded (:mod:`otel_bridge.admission`); any other
failure of the pipeline is ``INVALID_ARGUMENT`` (permanent: the client does not retry).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import grpc
from google.protobuf import duration_pb2
from google.protobuf.any_pb2 import Any as PbAny
from google.protobuf.message import DecodeError as PbDecodeError
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]

from otel_bridge.admission import Ticket, admission
from otel_bridge.errors import StartupError
from otel_bridge.otlp.proto_codec import decode_logs, decode_traces, encode_export_response
from otel_bridge.receivers.otlp.config import (
    METRICS_REFUSED,
    GrpcConfig,
    check_grpc_port,
    grpc_address,
    split_endpoint,
)
from otel_bridge.receivers.otlp.peer import grpc_peer
from otel_bridge.receivers.otlp.security import TlsConfig

if TYPE_CHECKING:
    from otel_bridge.receivers.otlp.receiver import OtlpReceiver, Outcome

TRACE_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"
METRICS_SERVICE = "opentelemetry.proto.collector.metrics.v1.MetricsService"
RETRY_INFO_METADATA = "google.rpc.retryinfo-bin"
"""Trailing metadata key the OpenTelemetry Python SDK reads ``RetryInfo`` from."""
STATUS_DETAILS_METADATA = "grpc-status-details-bin"
"""The standard rich-status trailer: a serialized ``google.rpc.Status``."""
_WORKERS = 8


class _RefusedError(Exception):
    """The pipeline refused a request; answered with a retryable status."""


class _FailedError(Exception):
    """The pipeline rejected a request for good; answered with ``INVALID_ARGUMENT``."""


class _RichStatus(grpc.Status):
    """A ``grpc.Status`` for ``abort_with_status`` (grpcio ships no concrete class)."""

    def __init__(
        self, code: grpc.StatusCode, details: str, trailing_metadata: tuple[tuple[str, bytes], ...]
    ) -> None:
        self.code = code
        self.details = details
        self.trailing_metadata = trailing_metadata


def throttled_status(message: str, retry_after: float) -> grpc.Status:
    """``RESOURCE_EXHAUSTED`` carrying ``RetryInfo(retry_after)`` in both trailer conventions."""
    delay = duration_pb2.Duration()
    delay.FromNanoseconds(int(retry_after * 1e9))
    retry_info = error_details_pb2.RetryInfo(retry_delay=delay)
    packed = PbAny()
    packed.Pack(retry_info)
    rich = status_pb2.Status(
        code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message=message, details=[packed]
    )
    return _RichStatus(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        message,
        (
            (RETRY_INFO_METADATA, retry_info.SerializeToString()),
            (STATUS_DETAILS_METADATA, rich.SerializeToString()),
        ),
    )


class GrpcServer:
    """A started grpcio server bound to the configured endpoint."""

    def __init__(self, receiver: OtlpReceiver, config: GrpcConfig) -> None:
        self._receiver = receiver
        host, port = split_endpoint(config.endpoint)
        max_bytes = config.max_recv_msg_size_mib * 1024 * 1024
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="otlp-grpc"),
            options=[
                ("grpc.max_receive_message_length", max_bytes),
                # Without this a second server could silently share the port; sharing is
                # asked for with reuse_port.
                ("grpc.so_reuseport", 1 if config.reuse_port else 0),
            ],
        )
        self._server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    TRACE_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self._traces)}
                ),
                grpc.method_handlers_generic_handler(
                    LOGS_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self._logs)}
                ),
                grpc.method_handlers_generic_handler(
                    METRICS_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self._metrics)}
                ),
            )
        )
        address = grpc_address(host, port)
        check_grpc_port(host, port, reuse_port=config.reuse_port)
        try:
            self._auth = config.auth.authenticator() if config.auth else None
            credentials = _credentials(config.tls) if config.tls else None
        except OSError as exc:
            raise StartupError(f"otlp receiver: gRPC tls/auth: {exc}") from exc
        try:
            if credentials is not None:
                bound = self._server.add_secure_port(address, credentials)
            else:
                bound = self._server.add_insecure_port(address)
        except RuntimeError as exc:
            raise StartupError(f"cannot listen for gRPC on {address}: {exc}") from exc
        if bound == 0:
            raise StartupError(f"cannot listen for gRPC on {address}")
        self.port: int = bound
        self._server.start()

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting calls and wait up to ``grace`` seconds for those in flight."""
        self._server.stop(grace).wait(grace + 1.0)

    def _handle(
        self,
        raw: bytes,
        context: grpc.ServicerContext,
        parse: Callable[[bytes], bytes],
        what: str,
    ) -> bytes:
        if self._auth is not None:
            metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
            if not self._auth.check(metadata.get("authorization")):
                self._receiver.count("requests_unauthenticated")
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid credentials")
        ticket = admission.admit(len(raw))
        if not isinstance(ticket, Ticket):
            self._receiver.count("requests_refused")
            context.abort_with_status(
                throttled_status(f"not decoded: {ticket}", self._receiver.retry_after)
            )
            raise AssertionError("unreachable: abort raises")  # pragma: no cover
        try:
            return parse(raw)
        except PbDecodeError as exc:
            self._receiver.malformed(f"cannot decode {what}: {exc}")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"cannot decode {what}: {exc}")
        except _RefusedError as refused:
            context.abort_with_status(throttled_status(str(refused), self._receiver.retry_after))
        except _FailedError as failed:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(failed))
        except Exception as exc:  # a bug must not kill the server; the client sees INTERNAL
            self._receiver.report_once("grpc_internal", f"gRPC export failed: {exc!r}")
            context.abort(grpc.StatusCode.INTERNAL, f"internal error: {exc}")
        finally:
            ticket.release()
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    def _traces(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        def parse(data: bytes) -> bytes:
            peer = grpc_peer(context.peer(), self.port)
            outcome = self._receiver.deliver_spans(decode_traces(data, peer))
            self._receiver.forward("traces", "grpc", data, outcome)
            outcome = _accepted(outcome)
            return encode_export_response("traces", outcome.rejected, outcome.error_message)

        return self._handle(raw, context, parse, "ExportTraceServiceRequest")

    def _metrics(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        """Metrics are not recorded: UNIMPLEMENTED, as without this handler, but counted and
        said (``metrics_requests_unsupported``); passed on unrecorded when forwarded."""
        if self._receiver.forwards("metrics"):
            return self._handle(raw, context, self._forward_metrics, "ExportMetricsServiceRequest")
        self._receiver.count("metrics_requests_unsupported")
        context.abort(grpc.StatusCode.UNIMPLEMENTED, METRICS_REFUSED)
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    def _forward_metrics(self, data: bytes) -> bytes:
        self._receiver.forward_metrics("grpc", data)
        return b""  # an empty ExportMetricsServiceResponse: full success

    def _logs(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        def parse(data: bytes) -> bytes:
            peer = grpc_peer(context.peer(), self.port)
            outcome = self._receiver.deliver_logs(decode_logs(data, peer))
            self._receiver.forward("logs", "grpc", data, outcome)
            outcome = _accepted(outcome)
            return encode_export_response("logs", outcome.rejected, outcome.error_message)

        return self._handle(raw, context, parse, "ExportLogsServiceRequest")


def _credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    key, chain, client_ca = tls.pem()
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def _accepted(outcome: Outcome) -> Outcome:
    """``outcome`` when the pipeline took the request; a refusal or failure raises, for
    :meth:`GrpcServer._handle` to answer with its status."""
    if outcome.refused:
        raise _RefusedError(outcome.refused)
    if outcome.failed:
        raise _FailedError(outcome.failed)
    return outcome
