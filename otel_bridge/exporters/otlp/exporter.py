"""The OTLP exporter component shared by ``otlp`` (gRPC) and ``otlphttp``.

``consume`` takes the spans and log records of a batch (observations and coverage are not OTLP
telemetry and are ignored here) and queues them; sender threads encode and send them, retrying
retryable failures. Exported records keep their original ids and attributes exactly.

Counters (:data:`COUNTERS`, ``exporter.<id>.<name>``): ``sent_spans``, ``sent_log_records``,
``dropped_spans``/``dropped_log_records`` (queue full, or shut down), ``failed_spans``/
``failed_log_records`` (permanent error or retries exhausted) and ``rejected_spans``/
``rejected_log_records`` (refused by the server in a partial success).

Signals. Only the signals listed in ``signals`` are sent. When the backend answers that it does
not take a signal at all (HTTP 404/405/415, gRPC ``UNIMPLEMENTED``), one warning names the signal
and the endpoint, ``signals_disabled`` counts it, and that signal is not sent to this exporter's
endpoint again for the run: its records (the refused batch and every later one) are counted in
``unsupported_spans``/``unsupported_log_records``, never retried, never logged per batch.

Persistent queue (``sending_queue.storage``): each batch is encoded and appended to a
write-ahead log (:mod:`otel_bridge.exporters.otlp.wal`) before ``consume`` returns, and marked
done once it ended (delivered, or permanently failed and counted). A shutdown leaves what was not
sent in the log (``queue_kept_batches``) instead of dropping it; the next start replays it in
order (``queue_replayed_batches``). A record torn by a crash is cut off and counted
(``queue_torn_records``). A full queue (``queue_size`` batches or ``max_bytes``) drops the new
batch and counts it in ``dropped_spans``/``dropped_log_records``. Delivery is at-least-once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from otel_bridge.component import ComponentStatus, CounterSpec, CreateSettings, Host, Telemetry
from otel_bridge.errors import ComponentError, StartupError
from otel_bridge.exporters.otlp.config import OtlpExporterConfig
from otel_bridge.exporters.otlp.encoding import Encoding, encode_log_records, encode_spans
from otel_bridge.exporters.otlp.sender import Item, Sender, SendResult, Signal
from otel_bridge.exporters.otlp.transport import Transport
from otel_bridge.exporters.otlp.wal import Entry, StorageError, WriteAheadLog, queue_dir_name
from otel_bridge.model import Batch, LogRecord, Span

_NOUNS = {"traces": "spans", "logs": "log_records"}


_PER_SIGNAL: tuple[CounterSpec, ...] = tuple(
    CounterSpec(f"{verb}_{noun}", f"{noun.replace('_', ' ')} {what}", unit)
    for noun, unit in (("spans", "{spans}"), ("log_records", "{records}"))
    for verb, what in (
        ("sent", "the server accepted"),
        ("rejected", "the server rejected in a partial success"),
        ("failed", "not sent: permanent error or retries exhausted"),
        ("dropped", "dropped: queue full, or shut down"),
        (
            "queued",
            "kept in the persistent queue when the exporter stopped: the next start sends them",
        ),
        ("unsupported", "not sent: the backend does not accept this signal"),
    )
)
COUNTERS: tuple[CounterSpec, ...] = (
    *_PER_SIGNAL,
    CounterSpec("signals_disabled", "signals the backend refused as unsupported", "{signals}"),
    CounterSpec("queue_kept_batches", "batches written to the persistent queue", "{batches}"),
    CounterSpec("queue_replayed_batches", "batches replayed from the queue at start", "{batches}"),
    CounterSpec("queue_torn_records", "torn queue records cut off at start (kill -9)"),
)
"""The counters of the ``otlp`` and ``otlphttp`` exporters (and their aliases)."""


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
        self._disabled: set[Signal] = set()
        """Signals the backend refused as unsupported: no longer sent this run."""
        self._wal: WriteAheadLog | None = None
        self._kept = 0
        """Records left in the persistent queue for the next start (said at shutdown)."""

    def start(self, host: Host) -> None:
        """Open the persistent queue (if any) and the transport; start the sender threads."""
        with self._lock:
            if self._sender is not None or self._stopped:
                return
            self._telemetry = host.telemetry.in_scope_of(self._telemetry)
            replay = self._open_storage()
            self._transport = self._make_transport()
            self._sender = Sender(
                self._attempt,
                self._config.retry_on_failure,
                self._config.sending_queue,
                self._done,
                name=f"exporter-{self._settings.id}",
            )
            self._sender.start()
            for entry in replay:
                item = Item(entry.signal, (), entry.payload, entry.count, entry.seq)
                self._sender.submit(item, force=True)

    def _open_storage(self) -> list[Entry]:
        """Open the write-ahead log; the batches to replay. Raises :class:`StartupError`."""
        queue = self._config.sending_queue
        if not queue.storage:
            return []
        wal = WriteAheadLog(
            queue.storage,
            queue_dir_name(self._settings.id),
            max_batches=queue.queue_size,
            max_bytes=queue.max_bytes,
            fsync=queue.fsync,
        )
        try:
            recovery = wal.open()
        except StorageError as exc:
            raise StartupError(f"{self._settings.id}: sending_queue.storage: {exc}") from exc
        self._wal = wal
        if recovery.torn_records:
            self._count("queue_torn_records", recovery.torn_records)
            self._report(
                "queue_torn_records",
                f"the persistent queue in {queue.storage} ended in a torn record "
                f"({recovery.torn_bytes} bytes, written when the process was killed): cut off",
            )
        if recovery.pending:
            self._count("queue_replayed_batches", len(recovery.pending))
            self._report(
                "queue_replayed_batches",
                f"replaying {len(recovery.pending)} batches kept in {queue.storage} "
                f"by an earlier run",
            )
        return recovery.pending

    def status(self) -> ComponentStatus:
        """Where undelivered records are kept across restarts (``sending_queue.storage``)."""
        return ComponentStatus(storage=self._config.sending_queue.storage or "")

    def consume(self, batch: Batch) -> None:
        """Queue the batch's spans and log records (or send them now without a queue).

        Without a queue a batch that cannot be delivered raises :class:`ComponentError`.
        """
        for item in self._items(batch):
            sender = self._sender
            if sender is None or self._stopped:
                self._drop(item, "the exporter is not running")
            elif item.signal in self._disabled:
                self._count(f"unsupported_{_NOUNS[item.signal]}", item.size)
            elif not self._config.sending_queue.enabled:
                result = sender.send(item)
                if not result.ok and not result.unsupported:
                    raise ComponentError(f"{self._settings.id}: {result.message}")
            elif self._wal is not None:
                self._persist(sender, self._wal, item)
            elif not sender.submit(item):
                self._drop(item, "the sending queue is full")

    def _persist(self, sender: Sender, wal: WriteAheadLog, item: Item) -> None:
        """Write ``item`` to the log (durably), then queue it; drop it when the log is full."""
        payload = self._encode(item)
        signal = item.signal
        assert signal != "metrics", "the exporter sends traces and logs only"
        try:
            seq = wal.append(signal, item.size, payload)
        except (OSError, StorageError) as exc:
            raise ComponentError(f"{self._settings.id}: persistent queue: {exc}") from exc
        if seq is None:
            self._drop(item, "the persistent sending queue is full (queue_size or max_bytes)")
            return
        # Once written it is kept: if the queue closed meanwhile the next start replays it.
        if not sender.submit(Item(item.signal, (), payload, item.size, seq), force=True):
            self._keep(item)

    def _keep(self, item: Item) -> None:
        """``item`` stays in the persistent queue for the next start (counted, then said)."""
        self._count("queue_kept_batches", 1)
        self._count(f"queued_{_NOUNS[item.signal]}", item.size)
        with self._lock:
            self._kept += item.size

    def shutdown(self) -> None:
        """Drain the queue within ``shutdown_timeout``, count what is left, close the transport."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            sender, transport = self._sender, self._transport
        if sender is not None:
            for item in sender.shutdown(self._config.shutdown_timeout):
                if item.seq >= 0:
                    self._keep(item)
                else:
                    self._drop(item, "shutdown deadline passed before it was sent")
            if self._kept:  # neither delivered nor lost: say where they wait
                self._report(
                    "queue_kept_at_shutdown",
                    f"{self._kept} record(s) not delivered yet are kept in the persistent queue "
                    f"in {self._config.sending_queue.storage}: the next start with this storage "
                    "sends them",
                )
        if transport is not None:
            transport.close()
        if self._wal is not None:
            self._wal.close()

    def _items(self, batch: Batch) -> list[Item]:
        items = []
        signals = self._config.signals
        if batch.spans and "traces" in signals:
            items.append(Item("traces", batch.spans))
        if batch.logs and "logs" in signals:
            items.append(Item("logs", batch.logs))
        return items

    def _encode(self, item: Item) -> bytes:
        if item.payload:
            return item.payload
        if item.signal == "traces":
            return encode_spans(_spans(item), self._encoding)
        return encode_log_records(_logs(item), self._encoding)

    def _attempt(self, item: Item) -> SendResult:
        transport = self._transport
        if transport is None:
            return SendResult(ok=False, message="the exporter is not started")
        if item.signal in self._disabled:  # queued before the backend refused the signal
            return SendResult(ok=False, unsupported=True, message="signal disabled")
        result = transport.send(item.signal, self._encode(item))
        if not result.ok and result.retryable:  # say so once, or a retry-forever send is silent
            self._report(
                f"retrying.{item.signal}",
                f"cannot send {item.signal} to {transport.target(item.signal)} yet, retrying "
                f"({result.message})",
            )
        return result

    def _done(self, item: Item, result: SendResult) -> None:
        noun = _NOUNS[item.signal]
        n = item.size
        if item.seq >= 0 and self._wal is not None:
            if result.aborted:  # interrupted by shutdown: stays in the log for the next start
                self._keep(item)
                return
            self._wal.ack(item.seq)
        if result.ok:
            self._count(f"sent_{noun}", n - result.rejected)
            if result.rejected or result.message:
                self._count(f"rejected_{noun}", result.rejected)
                self._report(
                    f"rejected_{noun}",
                    f"the server rejected {result.rejected} {noun.replace('_', ' ')}: "
                    f"{result.message}",
                )
        elif result.unsupported:
            self._count(f"unsupported_{noun}", n)
            self._disable(item.signal, result.message)
        else:
            self._count(f"failed_{noun}", n)
            self._report(f"failed_{noun}", f"could not send {n} {noun}: {result.message}")

    def _disable(self, signal: Signal, why: str) -> None:
        """Stop sending ``signal`` for the run; warn and count the first time only."""
        with self._lock:
            if signal in self._disabled:
                return
            self._disabled.add(signal)
        transport = self._transport
        where = transport.target(signal) if transport is not None else self._config.endpoint
        self._count("signals_disabled", 1)
        self._report(
            f"signal_disabled.{signal}",
            f"the backend at {where} does not accept {signal} ({why}); {signal} are no longer "
            f"sent to it in this run (counted in {self._prefix}unsupported_{_NOUNS[signal]}); "
            f"list only the signals it takes in `signals:`",
        )

    def _drop(self, item: Item, why: str) -> None:
        noun = _NOUNS[item.signal]
        self._count(f"dropped_{noun}", item.size)
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
