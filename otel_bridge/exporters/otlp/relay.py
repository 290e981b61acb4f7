"""The OTLP exporters' relay: the user's own ``OTEL_EXPORTER_OTLP_*`` destination keeps working
under ``observe``.

``observe`` points the workload's ``OTEL_EXPORTER_OTLP_ENDPOINT`` at its own receiver. A user who
already sent the agent's telemetry somewhere (a Collector, Jaeger, Phoenix) would silently lose
it; instead the run's OTLP receiver hands every request it takes to a :class:`ForwardRelay`
(:meth:`~otel_bridge.receivers.otlp.receiver.OtlpReceiver.set_forward`), which sends the body,
as the agent sent it, to the destination the same variables name (endpoints, per-signal
endpoints, protocols, headers, compression): traces, logs and metrics. Metrics are not recorded
(otel-bridge records traces and logs); with a destination for them the receiver answers them
with success and they are only passed on. ``--no-forward`` opts out.

The protocol of each signal: ``OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL``, else
``OTEL_EXPORTER_OTLP_PROTOCOL``, else the protocol of the incoming request (the agent's SDK was
talking to that destination with the protocol it now uses with us). gRPC and HTTP/protobuf carry
the same bytes; between protobuf and OTLP/JSON the body is converted (the message is the same,
only the encoding changes). The summary says where telemetry was forwarded, over what, and how
much of it arrived.

``observe`` reaches this module through the ``otlp`` exporter factory's ``relay``
(:class:`otel_bridge.component.Factory`), so no command imports the exporter.
"""

from __future__ import annotations

import base64
import binascii
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote, urlsplit

from otel_bridge.component import Telemetry
from otel_bridge.launch import PROTOCOLS

if TYPE_CHECKING:
    from otel_bridge.exporters.otlp.sender import Item, Sender, SendResult, Signal
    from otel_bridge.exporters.otlp.transport import Transport
    from otel_bridge.model import Span

SIGNALS = ("traces", "metrics", "logs")
FOLLOWED = "the protocol of the agent's requests"
"""``protocol_source`` when no protocol variable is set."""
_NOUNS = {"traces": "spans", "logs": "log_records", "metrics": "metrics_requests"}
_TIMEOUT = 3.0
"""Seconds one send may take, and the end of the run waits at most for what is still queued."""


@dataclass(frozen=True, slots=True)
class Destination:
    """Where one signal goes, read from the environment."""

    signal: str
    endpoint: str
    """As the variable gave it: a per-signal URL (used as-is), or the base endpoint."""
    per_signal: bool
    """From ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT``: no ``/v1/<signal>`` is appended."""
    protocol: str
    """``grpc``, ``http/protobuf``, ``http/json``; empty: that of the incoming request."""
    protocol_source: str
    headers: dict[str, str]
    compression: str
    """``gzip`` or ``none``."""

    def target(self, protocol: str) -> str:
        """The URL (HTTP: ``/v1/<signal>`` appended to a base endpoint) or gRPC endpoint."""
        if protocol == "grpc" or self.per_signal:
            return self.endpoint
        return self.endpoint.rstrip("/") + f"/v1/{self.signal}"


@dataclass(frozen=True, slots=True)
class Forward:
    """The user's destinations, one per signal that has an endpoint."""

    destinations: dict[str, Destination]

    @property
    def signals(self) -> list[str]:
        """The signals with a destination."""
        return list(self.destinations)

    def destination(self) -> str:
        """A readable destination (no headers, no credentials: they may be secret)."""
        first = next(iter(self.destinations.values()))
        return _without_credentials(first.endpoint)


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def parse_headers(text: str) -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS``: ``k=v,k2=v2`` with URL-encoded values."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[unquote(key.strip()).lower()] = unquote(value.strip())
    return out


def forward_from_env(env: Mapping[str, str]) -> Forward | None:
    """The user's destinations from ``env``; None when no OTLP endpoint variable is set.

    Per the OTLP exporter specification: a signal's own variable
    (``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT``, ``_PROTOCOL``, ``_HEADERS``, ``_COMPRESSION``)
    wins over the general one; a per-signal endpoint is used as-is, the general one gets
    ``/v1/<signal>`` appended for OTLP/HTTP.
    """

    def var(name: str, signal: str = "") -> tuple[str, str]:
        key = (
            f"OTEL_EXPORTER_OTLP_{signal.upper()}_{name}"
            if signal
            else f"OTEL_EXPORTER_OTLP_{name}"
        )
        return env.get(key, "").strip(), key

    destinations: dict[str, Destination] = {}
    for signal in SIGNALS:
        own, _ = var("ENDPOINT", signal)
        endpoint = own or var("ENDPOINT")[0]
        if not endpoint:
            continue
        protocol, source = var("PROTOCOL", signal)
        if protocol not in PROTOCOLS:
            protocol, source = var("PROTOCOL")
        if protocol not in PROTOCOLS:
            protocol, source = "", FOLLOWED
        headers = parse_headers(var("HEADERS")[0])
        headers.update(parse_headers(var("HEADERS", signal)[0]))
        compression = var("COMPRESSION", signal)[0] or var("COMPRESSION")[0]
        destinations[signal] = Destination(
            signal=signal,
            endpoint=endpoint,
            per_signal=bool(own),
            protocol=protocol,
            protocol_source=source,
            headers=headers,
            compression="gzip" if compression == "gzip" else "none",
        )
    return Forward(destinations) if destinations else None


# --------------------------------------------------------------------------------------------
# Between protobuf and OTLP/JSON
# --------------------------------------------------------------------------------------------

_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"})


def _request_class(signal: str) -> Any:
    """The export request message of ``signal`` (imported only when a body is converted)."""
    if signal == "traces":
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # noqa: PLC0415

        return trace_service_pb2.ExportTraceServiceRequest
    if signal == "logs":
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2  # noqa: PLC0415

        return logs_service_pb2.ExportLogsServiceRequest
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2  # noqa: PLC0415

    return metrics_service_pb2.ExportMetricsServiceRequest


def _ids(value: Any, convert: Callable[[str], str]) -> Any:
    """``value`` with every trace and span id converted (OTLP/JSON writes them in hex, the
    protobuf JSON mapping in base64); every other field as it is."""
    if isinstance(value, dict):
        return {
            k: convert(v) if k in _ID_KEYS and isinstance(v, str) else _ids(v, convert)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_ids(v, convert) for v in value]
    return value


def _hex_to_b64(text: str) -> str:
    return base64.b64encode(bytes.fromhex(text)).decode()


def _b64_to_hex(text: str) -> str:
    return base64.b64decode(text).hex()


def convert(signal: str, body: bytes, incoming: str, outgoing: str) -> bytes:
    """``body`` (an export request of ``signal`` over ``incoming``) for ``outgoing``; the same
    bytes unless one side is OTLP/JSON and the other protobuf. ValueError when it cannot be read.
    """
    json_in, json_out = incoming == "http/json", outgoing == "http/json"
    if json_in == json_out:
        return body
    import json  # noqa: PLC0415

    from google.protobuf import json_format  # noqa: PLC0415
    from google.protobuf.message import DecodeError  # noqa: PLC0415

    cls = _request_class(signal)
    try:
        if json_in:
            doc = _ids(json.loads(body), _hex_to_b64)
            message = json_format.ParseDict(doc, cls(), ignore_unknown_fields=True)
            return bytes(message.SerializeToString())
        as_dict = json_format.MessageToDict(cls.FromString(body), use_integers_for_enums=True)
        return json.dumps(_ids(as_dict, _b64_to_hex), separators=(",", ":")).encode()
    except (ValueError, DecodeError, json_format.ParseError, binascii.Error) as exc:
        raise ValueError(f"cannot convert the {signal} request to {outgoing}: {exc}") from None


# --------------------------------------------------------------------------------------------
# The relay
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Tally:
    """What happened to one signal's records."""

    sent: int = 0
    not_sent: int = 0
    protocols: list[str] = field(default_factory=list)
    """The protocols it was sent over, in the order first used."""


class ForwardRelay:
    """Sends each request the receiver took to the user's destination (see the module)."""

    def __init__(self, forward: Forward, telemetry: Telemetry) -> None:
        self._forward = forward
        self._telemetry = telemetry
        self._lock = threading.Lock()
        self._senders: dict[tuple[str, str], tuple[Sender, Transport]] = {}
        self._tally = {signal: _Tally() for signal in forward.destinations}
        self._incoming: dict[str, str] = {}
        """The first protocol each signal arrived over."""
        self._closed = False
        self.root_span = "not sent"

    def forwards(self, signal: str) -> bool:
        """Whether ``signal`` has a destination."""
        return signal in self._forward.destinations

    def request(self, signal: str, protocol: str, body: bytes, records: int) -> None:
        """Queue one request's body for the destination (called in the receiver's threads)."""
        destination = self._forward.destinations.get(signal)
        if destination is None:
            return
        with self._lock:
            self._incoming.setdefault(signal, protocol)
        self._submit(destination, destination.protocol or protocol, body, protocol, records)

    def send_root_span(self, span: Span) -> None:
        """Forward the run's root span (the parent of the agent's trace), over the traces
        protocol (set, or the agent's); not when neither is known (said in the summary)."""
        destination = self._forward.destinations.get("traces")
        if destination is None:
            self.root_span = "no traces destination"
            return
        protocol = destination.protocol or self._incoming.get("traces", "")
        if not protocol:
            self.root_span = (
                "not sent: the agent sent no traces and no OTEL_EXPORTER_OTLP_*PROTOCOL is set, "
                "so the destination's protocol is unknown"
            )
            return
        from otel_bridge.exporters.otlp.encoding import encode_spans  # noqa: PLC0415

        body = encode_spans((span,), "json" if protocol == "http/json" else "proto")
        self._submit(destination, protocol, body, protocol, 1)
        self.root_span = "forwarded with the traces"

    def _submit(
        self, destination: Destination, protocol: str, body: bytes, incoming: str, records: int
    ) -> None:
        from otel_bridge.exporters.otlp.sender import Item  # noqa: PLC0415

        signal = destination.signal
        try:
            payload = convert(signal, body, incoming, protocol)
            sender = self._sender(destination, protocol)
        except (ValueError, OSError) as exc:
            self._not_sent(signal, records, str(exc))
            return
        item = Item(cast("Signal", signal), (), payload, records)
        if sender is None or not sender.submit(item):
            self._not_sent(signal, records, "the forwarding queue is full or closed")

    def _sender(self, destination: Destination, protocol: str) -> Sender | None:
        """The sender (one thread) for ``destination`` over ``protocol``, started on first use."""
        key = (destination.signal, protocol)
        with self._lock:
            if self._closed:
                return None
            if key in self._senders:
                return self._senders[key][0]
            transport = _transport(destination, protocol)
            sender = _new_sender(transport, self._done, f"forward-{destination.signal}")
            self._senders[key] = (sender, transport)
            self._tally[destination.signal].protocols.append(protocol)
        sender.start()
        return sender

    def _done(self, item: Item, result: SendResult) -> None:
        signal = item.signal
        if result.ok:
            with self._lock:
                self._tally[signal].sent += item.size - result.rejected
                self._tally[signal].not_sent += result.rejected
            if result.rejected:
                self._report(
                    f"{signal}.rejected", f"the destination rejected some: {result.message}"
                )
        else:
            self._not_sent(signal, item.size, result.message)

    def _not_sent(self, signal: str, n: int, why: str) -> None:
        with self._lock:
            self._tally[signal].not_sent += n
        destination = self._forward.destinations[signal]
        self._report(
            f"{signal}.failed",
            f"could not forward {signal} to {_without_credentials(destination.endpoint)}: {why}",
        )

    def _report(self, key: str, message: str) -> None:
        self._telemetry.report_once(f"observe.forward.{key}", f"observe: {message}")

    def shutdown(self, timeout: float = _TIMEOUT) -> None:
        """Send what is queued within ``timeout`` seconds in all, count the rest as not sent.
        Safe twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            senders = list(self._senders.values())
        per_sender = timeout / max(1, len(senders))
        for sender, transport in senders:
            for item in sender.shutdown(per_sender):
                self._not_sent(item.signal, item.size, "the end of the run came first")
            transport.close()

    def summary(self) -> dict[str, Any]:
        """What was forwarded where, for ``summary.json``: per signal, then totals."""
        out: dict[str, Any] = {"destination": self._forward.destination(), "signals": {}}
        with self._lock:
            for signal, tally in self._tally.items():
                destination = self._forward.destinations[signal]
                used = tally.protocols[0] if tally.protocols else destination.protocol
                target = destination.target(used) if used else destination.endpoint
                out["signals"][signal] = {
                    "destination": _without_credentials(target),
                    "protocols": list(tally.protocols),
                    "protocol_source": destination.protocol_source,
                    "sent": tally.sent,
                    "not_sent": tally.not_sent,
                }
        for signal in SIGNALS:
            entry = out["signals"].get(signal, {})
            out[f"{_NOUNS[signal]}_sent"] = entry.get("sent", 0)
            out[f"{_NOUNS[signal]}_not_sent"] = entry.get("not_sent", 0)
        out["root_span"] = self.root_span
        return out


def relay_from_env(env: Mapping[str, str], telemetry: Telemetry) -> ForwardRelay | None:
    """A relay to the destinations ``env``'s OTLP variables name; None when they name none."""
    forward = forward_from_env(env)
    return None if forward is None else ForwardRelay(forward, telemetry)


def _transport(destination: Destination, protocol: str) -> Transport:
    """The transport of the OTLP exporters, pointed at ``destination`` (imports gRPC for it)."""
    from otel_bridge.exporters.otlp.config import (  # noqa: PLC0415
        GrpcExporterConfig,
        HttpExporterConfig,
    )

    common: dict[str, Any] = {
        "headers": dict(destination.headers),
        "timeout": _TIMEOUT,
        "compression": destination.compression,
    }
    if protocol == "grpc":
        from otel_bridge.exporters.otlp.transport import GrpcTransport  # noqa: PLC0415

        return GrpcTransport(GrpcExporterConfig(endpoint=destination.target(protocol), **common))
    from otel_bridge.exporters.otlp.transport import HttpTransport  # noqa: PLC0415

    config = HttpExporterConfig(encoding="json" if protocol == "http/json" else "proto", **common)
    signal = cast("Signal", destination.signal)
    return HttpTransport(config, {signal: destination.target(protocol)})


def _new_sender(
    transport: Transport, done: Callable[[Item, SendResult], None], name: str
) -> Sender:
    """One sender thread with short retries (2 s in all), so the end of the run is not held up."""
    from otel_bridge.exporters.otlp.config import QueueConfig, RetryConfig  # noqa: PLC0415
    from otel_bridge.exporters.otlp.sender import Sender  # noqa: PLC0415

    return Sender(
        lambda item: transport.send(item.signal, item.payload),
        RetryConfig(initial_interval=0.2, max_interval=1.0, max_elapsed_time=2.0),
        QueueConfig(queue_size=1000, num_consumers=1),
        done,
        name=name,
    )
