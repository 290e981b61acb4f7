"""The ``graph`` exporter: materializes observations into ``graph.json``.

It applies every observation (and counts every coverage record) of the batches it consumes to a
:class:`~otel_bridge.graph.GraphAccumulator`, and writes the deterministic ``graph.json``
atomically (temporary file + rename, mode 0600, directory created 0700) every
``flush_interval`` seconds when something changed, and once more at shutdown.

``output`` is the file path; a relative path is resolved against the run directory when the
collector runs under ``observe`` (``host.run_dir``), else against the working directory.
The accumulator is exposed as :attr:`GraphExporter.accumulator` for ``observe`` and tests.

With ``journal.path`` set, every batch is also appended to a journal before it is applied, and
the journal is replayed at start, so the graph survives kill -9 (:mod:`.journal`;
``docs/exporters.md``)::

    exporters:
      graph:
        output: graph.json
        journal: {path: graph.journal, max_bytes: 268435456, fsync: false}

Every observation is applied once: a copy of one already applied (the same id: an SDK's
retry, an agent's resend after a gateway was killed, a journaled batch delivered again) is
dropped before the journal and counted (``redelivered``; :mod:`.redelivery`), so
``evidence_count`` counts distinct observations.

With ``bounds.max_nodes``/``bounds.max_edges`` set, the graph stops growing there and the
observations that would grow it are spilled to a file, counted and said in ``graph.json``'s
``summary.bounded`` (:mod:`.bounds`), so the graph cannot outgrow the memory limiter's limit.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_bridge.component import (
    EXPORTER,
    STANDARD_COUNTERS,
    Component,
    Consumer,
    CounterScope,
    CounterSpec,
    CreateSettings,
    Factory,
    Host,
)
from otel_bridge.errors import StartupError
from otel_bridge.exporters import count, warn
from otel_bridge.gcpause import gc_paused
from otel_bridge.graph import GraphAccumulator, encode
from otel_bridge.graph.document import write_atomic
from otel_bridge.model import Batch, CoverageRecord, Observation

from .bounds import Bounds, BoundsConfig
from .journal import Journal, JournalError
from .redelivery import Delivered

__all__ = ["BoundsConfig", "GraphExporter", "GraphExporterConfig", "JournalConfig", "factory"]

_log = logging.getLogger("otel_bridge.exporters.graph")

COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("observations", "observations applied to the graph", "{observations}"),
    CounterSpec("write_errors", "graph.json writes that failed", "{errors}"),
    CounterSpec("journal_replayed", "observations replayed from the journal at start"),
    CounterSpec(
        "journal_dropped", "observations applied but not journaled (journal full or failing)"
    ),
    CounterSpec("journal_torn_bytes", "bytes of a torn journal tail cut off at start", "By"),
    CounterSpec("journal_skipped", "journaled observations the graph refused at replay"),
    CounterSpec("journal_skipped_frames", "intact journal frames that could not be decoded"),
    CounterSpec("spilled", "observations over the graph's bounds written to the spill file"),
    CounterSpec("bound_dropped", "observations over the graph's bounds not spilled"),
    CounterSpec("redelivered", "copies of observations already applied, not counted again"),
)
"""The counters of the ``graph`` exporter."""
_ALL = (*COUNTERS, *STANDARD_COUNTERS[EXPORTER])


@dataclass(slots=True)
class JournalConfig:
    """The graph journal (off unless ``path`` is set); see :mod:`.journal`."""

    path: str = ""
    """Journal file; relative paths resolve like ``output``. Empty: no journal."""
    max_bytes: int = 256 * 1024 * 1024
    """The journal never grows past this; later batches are applied but not journaled."""
    fsync: bool = False
    """``fdatasync`` every append (survives power loss, not only kill -9)."""


@dataclass(slots=True)
class GraphExporterConfig:
    """Configuration of the ``graph`` exporter."""

    output: str = "graph.json"
    """Path of the graph.json written at every flush and at shutdown."""
    flush_interval: float = 5.0
    """Seconds between periodic writes (``"500ms"``, ``"5s"``); 0 writes only at shutdown."""
    retain_support: bool = True
    """Keep, per edge, the ids of the observations that support it."""
    support_limit: int = 1000
    """At most this many support ids per edge (``evidence_count`` keeps the total)."""
    occurrence_window: int = 200_000
    """Distinct occurrences remembered for exact logical counts (see the accumulator)."""
    redelivery_window: int = 200_000
    """Distinct observations remembered so that a copy delivered again is not counted again
    (at least the last ``redelivery_window // 2``; :mod:`.redelivery`)."""
    run: dict[str, str] = field(default_factory=dict)
    """Run metadata copied into graph.json's ``run`` object."""
    journal: JournalConfig = field(default_factory=JournalConfig)
    """The append-only journal that lets the graph survive kill -9."""
    bounds: BoundsConfig = field(default_factory=BoundsConfig)
    """Most nodes and edges the graph holds; what would grow it further is spilled."""

    def validate(self) -> list[str]:
        """Problems with this configuration, relative to the component."""
        problems: list[str] = []
        if not self.output:
            problems.append("output: must name a file")
        if self.flush_interval < 0:
            problems.append("flush_interval: must not be negative")
        if self.support_limit < 0:
            problems.append("support_limit: must not be negative")
        if self.occurrence_window < 2:
            problems.append("occurrence_window: must be at least 2")
        if self.redelivery_window < 2:
            problems.append("redelivery_window: must be at least 2")
        if self.journal.max_bytes < 1024:
            problems.append("journal.max_bytes: must be at least 1024")
        problems.extend(self.bounds.validate())
        return problems


class GraphExporter:
    """Consumes batches into an accumulator and writes graph.json (see the module docstring)."""

    def __init__(self, config: GraphExporterConfig, settings: CreateSettings | None = None) -> None:
        self.config = config
        self._id = settings.id if settings is not None else "graph"
        self._telemetry = settings.telemetry if settings is not None else None
        self.accumulator = GraphAccumulator(
            retain_support=config.retain_support,
            support_limit=config.support_limit,
            occurrence_window=config.occurrence_window,
            run=dict(config.run),
        )
        self.delivered = Delivered(config.redelivery_window)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._host: Host | None = None
        self._dirty = True
        self._stopped = False
        self._writable = False
        """The output's directory was usable at start (else shutdown has nothing to write)."""
        self.path = Path(config.output)
        self.journal: Journal | None = None
        self.bounds: Bounds | None = (
            Bounds(config.bounds, self.accumulator) if config.bounds.enabled else None
        )

    def start(self, host: Host) -> None:
        """Resolve the output path and start the periodic flush thread."""
        self._host = host
        self._telemetry = host.telemetry.scoped(
            self._telemetry.scope if self._telemetry else CounterScope.of(EXPORTER, self._id, _ALL)
        )
        self.path = _resolve(self.config.output, host)
        folder = Path(self.path).absolute().parent
        why = ""
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            why = f"cannot be created ({exc.strerror or exc})"
        if not why:
            try:  # a file made and dropped (access(2) would ignore this user's capabilities)
                with tempfile.TemporaryFile(dir=folder):
                    pass
            except OSError as exc:
                why = f"is not writable ({exc.strerror or exc})"
        if why:
            raise StartupError(
                f"{self._id}: output {self.path}: its directory {folder} {why} (the graph is "
                "written there while the collector runs and at its end)"
            )
        self._writable = True
        if self.bounds is not None:
            spill = self.config.bounds.spill
            try:
                self.bounds.open(_resolve(spill, host) if spill else None)
            except JournalError as exc:
                raise StartupError(f"{self._id}: bounds.spill: {exc}") from exc
        if self.config.journal.path:
            self._open_journal(host)
        elif os.path.isfile(self.path) and os.path.getsize(self.path):
            _log.warning(
                "%s: %s holds an earlier graph, which this run replaces (journal.path keeps "
                "the graph across restarts)",
                self._id,
                self.path,
            )
        if self.config.flush_interval > 0:
            self._thread = threading.Thread(
                target=self._loop, name=f"otel-bridge-{self._id}-flush", daemon=True
            )
            self._thread.start()

    def _open_journal(self, host: Host) -> None:
        cfg = self.config.journal
        journal = Journal(str(_resolve(cfg.path, host)), max_bytes=cfg.max_bytes, fsync=cfg.fsync)
        try:
            replay = journal.open(self._apply)
        except JournalError as exc:
            raise StartupError(f"{self._id}: journal.path: {exc}") from exc
        self.journal = journal
        if replay.torn_bytes:
            self._count("journal_torn_bytes", replay.torn_bytes)
            self._warn(
                "journal_torn",
                f"the graph journal {journal.path} ended in a torn frame "
                f"({replay.torn_bytes} bytes, written when the process was killed): cut off",
            )
        if replay.skipped:
            self._count("journal_skipped_frames", replay.skipped)
            self._warn(
                "journal_skipped_frames",
                f"skipped {replay.skipped} intact but unreadable frames of {journal.path}",
            )
        if replay.batches:  # a restart continues the graph: normal, not a warning
            self._count("journal_replayed", replay.observations)
            _log.info(
                "%s: rebuilt the graph from %d batches (%d observations) in the journal %s",
                self._id,
                replay.batches,
                replay.observations,
                journal.path,
            )
            try:
                self.flush()
            except OSError as exc:
                self._report(exc)

    def _apply(
        self, observations: tuple[Observation, ...], coverage: tuple[CoverageRecord, ...]
    ) -> None:
        """Replay one journaled batch; one the graph cannot take is skipped, never a crash loop.
        Copies are dropped as in :meth:`consume` (a journal written before they were: the graph
        counts each observation once all the same), and the ids are remembered for the resend
        that may follow (the last batch journaled before a kill -9 may come again)."""
        observations = self._fresh(observations)
        try:
            self._apply_bounded(observations)
            self.accumulator.apply_coverage(coverage)
        except Exception as exc:  # the same batch failed when it first arrived
            self._count("journal_skipped", len(observations))
            self._warn("journal_skipped", f"skipped a journaled batch the graph refused: {exc!r}")

    def _count(self, name: str, n: int = 1) -> None:
        count(self._telemetry, name, n)

    def _warn(self, key: str, message: str) -> None:
        warn(self._telemetry, _log, self._id, key, message)

    def _fresh(self, observations: tuple[Observation, ...]) -> tuple[Observation, ...]:
        """``observations`` less copies of ones already applied (caller holds ``_lock``, or is the
        journal's replay at start); count the copies."""
        fresh = self.delivered.fresh(observations)
        if fresh is not observations:
            self._count("redelivered", len(observations) - len(fresh))
        return fresh

    def _journal(
        self, observations: tuple[Observation, ...], coverage: tuple[CoverageRecord, ...]
    ) -> None:
        """Append a batch to the journal (caller holds ``_lock``); count what is not."""
        journal = self.journal
        if journal is None:
            return
        try:
            if journal.append(observations, coverage):
                return
            problem = f"the journal {journal.path} reached journal.max_bytes; "
        except (OSError, JournalError, TypeError, ValueError) as exc:
            problem = f"cannot append to the journal {journal.path} ({exc}); "
        self._count("journal_dropped", len(observations))
        self._warn(
            "journal_dropped",
            problem + "later observations are in the graph but would not survive a kill -9",
        )

    def consume(self, batch: Batch) -> None:
        """Drop copies of observations already applied, journal (when configured), then apply
        the batch's observations and coverage."""
        if not batch.observations and not batch.coverage:
            return
        coverage = batch.coverage
        with self._lock:
            observations = self._fresh(batch.observations)
            if not observations and not coverage:
                return
            self._journal(observations, coverage)
            try:
                over = self._apply_bounded(observations)
            except BaseException:
                self.delivered.forget(observations)  # not applied: a resend must count
                raise
            self.accumulator.apply_coverage(coverage)
            self._dirty = True
        if self._telemetry is not None:
            self._telemetry.count("observations", len(observations) - over)

    def _apply_bounded(self, observations: tuple[Observation, ...]) -> int:
        """Apply within the bounds (caller holds ``_lock``); count and say what went over."""
        bounds = self.bounds
        if bounds is None:
            self.accumulator.apply_many(observations)
            return 0
        spilled, dropped = bounds.spilled, bounds.dropped
        over = bounds.apply(observations)
        if not over:
            return 0
        self._count("spilled", bounds.spilled - spilled)
        self._count("bound_dropped", bounds.dropped - dropped)
        cfg = self.config.bounds
        self._warn(
            "bounded",
            f"the graph reached its bounds (max_nodes {cfg.max_nodes}, max_edges "
            f"{cfg.max_edges}): observations that would grow it go to the spill file "
            f"{bounds.spill_path} (counted in graph.json's summary.bounded)",
        )
        if bounds.dropped > dropped:
            self._warn(
                "bound_dropped",
                f"{bounds.problem}: observations over the bounds are counted in graph.json's "
                "summary.bounded.dropped but kept nowhere by this exporter",
            )
        return over

    def snapshot(self) -> dict[str, Any]:
        """The current graph document."""
        with self._lock:
            return self._document()

    def _document(self) -> dict[str, Any]:
        """The graph document, with ``summary.bounded`` when bounded (caller holds ``_lock``)."""
        doc = self.accumulator.to_dict()
        if self.bounds is not None:
            doc["summary"]["bounded"] = self.bounds.summary()
        return doc

    def flush(self) -> None:
        """Write graph.json now (atomically, mode 0600). The snapshot and its encoding run with
        the cyclic garbage collector paused (:func:`otel_bridge.gcpause.gc_paused`)."""
        with self._write_lock:
            with gc_paused():
                with self._lock:
                    doc = self._document()
                    self._dirty = False
                data = encode(doc)
                del doc
            write_atomic(self.path, data)

    def _loop(self) -> None:
        while not self._stop.wait(self.config.flush_interval):
            if not self._dirty:
                continue
            try:
                self.flush()
            except OSError as exc:
                self._report(exc)

    def _report(self, exc: OSError) -> None:
        message = f"graph exporter: cannot write {self.path}: {exc}"
        if self._telemetry is not None:
            self._telemetry.count("write_errors")
            self._telemetry.report_once(f"exporter.{self._id}.write", message)
        else:
            _log.warning("%s", message)

    def shutdown(self) -> None:
        """Stop the flush thread and write the final graph.json. Safe before start and twice."""
        if self._stopped or self._host is None:
            self._stopped = True
            return
        self._stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self._writable:
                self.flush()
        except OSError as exc:
            self._report(exc)
        if self.journal is not None:
            self.journal.close()
        if self.bounds is not None:
            self.bounds.close()


def _resolve(name: str, host: Host) -> Path:
    """``name`` with ``~`` expanded; relative to the run directory under ``observe``."""
    path = Path(name).expanduser()
    if not path.is_absolute() and host.run_dir:
        path = Path(host.run_dir) / path
    return path


def _create(
    settings: CreateSettings, config: GraphExporterConfig, next_consumer: Consumer | None
) -> Component:
    return GraphExporter(config, settings)


def durable_state(
    settings: Mapping[str, Any], place: Callable[[str], str], name: str
) -> dict[str, Any]:
    """The journal (``journal.path``) and spill file (``bounds.spill``) set in ``settings``,
    placed as ``graph[-NAME].journal`` and ``graph[-NAME].spill`` (``Factory.durable_state``)."""
    moved: dict[str, Any] = {}
    stem = f"graph-{name}" if name else "graph"
    journal, bounds = settings.get("journal"), settings.get("bounds")
    if isinstance(journal, Mapping) and journal.get("path"):
        moved["journal"] = {**journal, "path": place(f"{stem}.journal")}
    if isinstance(bounds, Mapping) and bounds.get("spill"):
        moved["bounds"] = {**bounds, "spill": place(f"{stem}.spill")}
    return moved


factory: Factory[GraphExporterConfig] = Factory(
    type_name="graph",
    kind=EXPORTER,
    default_config=GraphExporterConfig,
    create=_create,
    signals=frozenset({"evidence", "traces", "logs"}),
    counters=COUNTERS,
    durable_state=durable_state,
)
