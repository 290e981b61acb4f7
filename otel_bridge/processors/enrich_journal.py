"""The ``enrich`` processor's durable hold: its inputs journaled until what they became is sent.

``enrich`` holds each span for ``hold_delay`` and builds the OS plane from observations it keeps
until a process exits; the receiver acknowledged those records when ``consume`` returned, so
without a journal a kill -9 in that window loses them. With ``journal.path`` set, every batch
holding spans or observations is appended to a journal **before** ``consume`` touches it, and
is marked done once everything it contributed to has been handed to the next consumer (the
exporter, whose own persistent ``sending_queue`` takes over from there):

* a span: once it was released (enriched) and the next consumer took it;
* a ``correlated_with_process`` observation naming a held span: once that span was released;
* an OS observation learnt into a process: once the process span (or, for an observation that
  arrived after it, the late-events span) was released.

A batch with nothing held is marked done as soon as ``consume`` forwarded it. At start, the
batches not marked done are replayed into the processor in their original order: their spans
are held and enriched again, their processes rebuilt, and their records forwarded again. The
guarantee is **at-least-once**, the one the OTLP exporter's persistent queue gives: a batch whose
output was sent but whose mark had not been written when the process was killed is sent twice
(the backend sees the same span id again). Replayed batches, spans and observations are counted
(``journal.replayed_*``).

Format: the OTLP exporter's write-ahead log (:mod:`otel_bridge.exporters.otlp.wal`: CRC-framed
records, an acknowledgement file, compaction, a torn tail cut off at start), in the directory
``<path>/processor_<id>``. A record's payload is a msgpack array ``[spans, observations]``: the
spans as one encoded OTLP ``ExportTraceServiceRequest`` (lossless for every attribute value)
and the observations in the lossless dict form of :mod:`otel_bridge.jsonl`.

Bounds and safety: at most ``max_bytes`` (and ``max_batches``) not yet done. A batch that would
pass them is **refused** (:class:`~otel_bridge.errors.RefusedError`, so the receiver answers
"retry later" and the sender keeps it) rather than accepted and lost, counted
(``journal.refused``) and warned about once. Directories ``0700``, files ``0600``, every open
``O_NOFOLLOW``, the directory locked with ``flock``; ``fsync: false`` (the default, as the
bundled exporters' queues) survives a killed collector, ``fsync: true`` a power loss as well.

Limits: a process that never exits keeps its observations in the journal until shutdown. A
late OS event replayed after its process span was already marked done rebuilds a process with
no observed start, sent at shutdown marked ``otel_bridge.process.start_observed=false``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from otel_bridge import jsonl
from otel_bridge.component import Telemetry
from otel_bridge.errors import DecodeError, RefusedError, StartupError
from otel_bridge.exporters.otlp.wal import StorageError, WriteAheadLog, queue_dir_name
from otel_bridge.model import Batch, Observation, Span
from otel_bridge.otlp.proto_codec import decode_traces, encode_traces
from otel_bridge.rundir import PROCESSOR_QUEUE_PREFIX

DEFAULT_MAX_BYTES = 256 << 20


@dataclass(slots=True)
class JournalConfig:
    """``enrich.journal``: the durable hold (see :mod:`otel_bridge.processors.enrich_journal`)."""

    path: str = ""
    """Directory of the journal; empty: no journal (held records live in memory only)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """Bytes of batches not yet done past which new batches are refused."""
    max_batches: int = 1_000_000
    """Batches not yet done past which new batches are refused."""
    fsync: bool = False
    """``fdatasync`` every append (survives power loss, not only kill -9)."""

    def validate(self) -> list[str]:
        """Problems with the settings."""
        problems = []
        if self.max_bytes <= 0:
            problems.append("journal.max_bytes: must be positive")
        if self.max_batches <= 0:
            problems.append("journal.max_batches: must be positive")
        return problems


def encode_batch(spans: tuple[Span, ...], observations: tuple[Observation, ...]) -> bytes:
    """The journal payload of one batch's spans and observations."""
    traces = encode_traces(spans).SerializeToString() if spans else b""
    return msgspec.msgpack.encode([traces, [jsonl.observation_to_dict(o) for o in observations]])


def decode_batch(payload: bytes) -> Batch:
    """The batch of one journal payload; DecodeError if it is not one."""
    try:
        data: Any = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"enrich journal record is not msgpack: {exc}") from None
    if not isinstance(data, list) or len(data) != 2 or not isinstance(data[0], bytes):
        raise DecodeError("enrich journal record: expected [spans, observations]")
    spans = decode_traces(data[0]).records if data[0] else ()
    observations = tuple(jsonl.observation_from_dict(o, "journal") for o in data[1])
    return Batch(spans=spans, observations=observations)


class HoldJournal:
    """The journal of one enrich processor: append, mark done, replay (see the module doc)."""

    def __init__(self, config: JournalConfig, component_id: str, telemetry: Telemetry) -> None:
        self._config = config
        self._id = component_id
        self.telemetry = telemetry
        name = queue_dir_name(component_id, PROCESSOR_QUEUE_PREFIX)
        self._wal = WriteAheadLog(
            config.path,
            name,
            max_batches=config.max_batches,
            max_bytes=config.max_bytes,
            fsync=config.fsync,
        )
        self._closed = False

    def open(self) -> list[tuple[int, Batch]]:
        """Open the journal; the batches not done, in order, with their sequence numbers."""
        try:
            recovery = self._wal.open()
        except StorageError as exc:
            raise StartupError(f"{self._id}: journal.path: {exc}") from exc
        if recovery.torn_records:
            self.telemetry.count("journal.torn_records", recovery.torn_records)
        out: list[tuple[int, Batch]] = []
        for entry in recovery.pending:
            try:
                batch = decode_batch(entry.payload)
            except DecodeError:
                self.telemetry.count("journal.undecodable")
                self._wal.ack(entry.seq)
                continue
            out.append((entry.seq, batch))
        if out:
            self.telemetry.count("journal.replayed_batches", len(out))
            self.telemetry.count("journal.replayed_spans", sum(len(b.spans) for _, b in out))
            self.telemetry.count(
                "journal.replayed_observations", sum(len(b.observations) for _, b in out)
            )
        return out

    def append(self, batch: Batch) -> int:
        """Journal ``batch``'s spans and observations; its sequence number, or -1 once the
        journal is closed (the processor is shut down and holds nothing any more).

        Raises :class:`RefusedError` (nothing kept) when the journal is full or failing.
        """
        if self._closed:
            return -1
        payload = encode_batch(batch.spans, batch.observations)
        records = len(batch.spans) + len(batch.observations)
        try:
            seq = self._wal.append("traces", records, payload)
        except (OSError, StorageError) as exc:
            self.telemetry.count("journal.refused", records)
            raise RefusedError(f"{self._id}: journal: {exc}") from exc
        if seq is None:
            self.telemetry.count("journal.refused", records)
            self.telemetry.report_once(
                f"processor.{self._id}.journal_full",
                f"{self._id}: the journal in {self._config.path} is full (max_bytes "
                f"{self._config.max_bytes}, max_batches {self._config.max_batches}): new "
                "batches are refused (retry later) until held spans are released",
            )
            raise RefusedError(f"{self._id}: the enrich journal is full")
        return seq

    def done(self, seqs: list[int]) -> None:
        """Mark batches done (everything they contributed to was handed on)."""
        for seq in seqs:
            self._wal.ack(seq)

    def close(self) -> None:
        """Close the journal (its lock released). Safe twice."""
        self._closed = True
        self._wal.close()
