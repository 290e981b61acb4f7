"""The OTLP exporter component shared by ``otlp_grpc`` and ``otlp_http``.

``consume`` takes the spans and log records of a batch (observations and coverage are not OTLP
telemetry and are ignored here) and queues them; sender threads encode and send them, retrying
retryable failures. Exported records keep their original ids and attributes exactly.

Counters (:data:`COUNTERS`, ``exporter.<id>.<name>``): ``sent_spans``, ``sent_log_records``,
``dropped_spans``/``dropped_log_records`` (queue full, or shut down), ``failed_spans``/
``failed_log_records`` (permanent error or retries exhausted) and ``rejected_spans``/
``rejected_log_records`` (refused by the server in a partial success).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from otel_bridge.component import CounterSpec, CreateSettings, Host, Telemetry
from otel_bridge.errors import ComponentError
from otel_bridge.exporters.otlp.config import OtlpExporterConfig
from otel_bridge.exporters.otlp.encoding import Encoding, encode_log_records, encode_spans
from otel_bridge.exporters.otlp.sender import Item, Sender, SendResult
from otel_bridge.exporters.otlp.transport import Transport
from otel_bridge.model import Batch, LogRecord, Span

_NOUNS = {"traces": "spans", "logs": "log_records"}


COUNTERS: tuple[CounterSpec, ...] = tuple(
    CounterSpec(f"{verb}_{noun}", f"{noun.replace('_', ' ')} {what}", unit)
    for noun, unit in (("spans", "{spans}"), ("log_records", "{records}"))
    for verb, what in (
        ("sent", "the server accepted"),
        ("rejected", "the server rejected in a partial success"),
        ("failed", "not sent: permanent error or retries exhausted"),
        ("dropped", "dropped: queue full, or shut down"),
    )
)
"""The counters of the ``otlp_grpc`` and ``otlp_http`` exporters."""


class OtlpExporter:
    """Sends spans and log records to an OTLP endpoint; see the module docstring."""

    def __init__(
        self,
        settings: CreateSettings,
        config: OtlpExporterConfig,
        make_transport: Callable[[], Transport],
        encoding: Encoding = "proto",
    ) -> None:
        self._settings = settings
        self._config = config
        self._make_transport = make_transport
        self._encoding = encoding
        self._telemetry: Telemetry = settings.telemetry
        self._prefix = f"exporter.{settings.id}."
        self._transport: Transport | None = None
        self._sender: Sender | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def start(self, host: Host) -> None:
        """Open the transport and start the sender threads."""
        with self._lock:
            if self._sender is not None or self._stopped:
                return
            self._telemetry = host.telemetry.in_scope_of(self._telemetry)
            self._transport = self._make_transport()
            self._sender = Sender(
                self._attempt,
                self._config.retry_on_failure,
                self._config.sending_queue,
                self._done,
                name=f"exporter-{self._settings.id}",
            )
            self._sender.start()

    def consume(self, batch: Batch) -> None:
        """Queue the batch's spans and log records (or send them now without a queue).

        Without a queue a batch that cannot be delivered raises :class:`ComponentError`.
        """
        for item in self._items(batch):
            sender = self._sender
            if sender is None or self._stopped:
                self._drop(item, "the exporter is not running")
            elif not self._config.sending_queue.enabled:
                result = sender.send(item)
                if not result.ok:
                    raise ComponentError(f"{self._settings.id}: {result.message}")
            elif not sender.submit(item):
                self._drop(item, "the sending queue is full")

    def shutdown(self) -> None:
        """Drain the queue within ``shutdown_timeout``, count what is left, close the transport."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            sender, transport = self._sender, self._transport
        if sender is not None:
            for item in sender.shutdown(self._config.shutdown_timeout):
                self._drop(item, "shutdown deadline passed before it was sent")
        if transport is not None:
            transport.close()

    @staticmethod
    def _items(batch: Batch) -> list[Item]:
        items = []
        if batch.spans:
            items.append(Item("traces", batch.spans))
        if batch.logs:
            items.append(Item("logs", batch.logs))
        return items

    def _encode(self, item: Item) -> bytes:
        if item.signal == "traces":
            return encode_spans(_spans(item), self._encoding)
        return encode_log_records(_logs(item), self._encoding)

    def _attempt(self, item: Item) -> SendResult:
        transport = self._transport
        if transport is None:
            return SendResult(ok=False, message="the exporter is not started")
        return transport.send(item.signal, self._encode(item))

    def _done(self, item: Item, result: SendResult) -> None:
        noun = _NOUNS[item.signal]
        n = len(item.records)
        if result.ok:
            self._count(f"sent_{noun}", n - result.rejected)
            if result.rejected or result.message:
                self._count(f"rejected_{noun}", result.rejected)
                self._report(
                    f"rejected_{noun}",
                    f"the server rejected {result.rejected} {noun.replace('_', ' ')}: "
                    f"{result.message}",
                )
        else:
            self._count(f"failed_{noun}", n)
            self._report(f"failed_{noun}", f"could not send {n} {noun}: {result.message}")

    def _drop(self, item: Item, why: str) -> None:
        noun = _NOUNS[item.signal]
        self._count(f"dropped_{noun}", len(item.records))
        self._report(f"dropped_{noun}", f"dropping {noun.replace('_', ' ')}: {why}")

    def _count(self, name: str, n: int) -> None:
        if n:
            self._telemetry.count(name, n)

    def _report(self, key: str, message: str) -> None:
        self._telemetry.report_once(self._prefix + key, f"{self._settings.id}: {message}")


def _spans(item: Item) -> tuple[Span, ...]:
    return item.records  # type: ignore[return-value]


def _logs(item: Item) -> tuple[LogRecord, ...]:
    return item.records  # type: ignore[return-value]
