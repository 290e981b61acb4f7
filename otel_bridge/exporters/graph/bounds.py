"""The graph exporter's bounds: a graph that cannot outgrow its memory.

The graph is a function of every observation, so left alone it grows with the run; a graph
larger than the memory limiter's hard limit would make the collector refuse all data for good.
With ``bounds.max_nodes`` and/or ``bounds.max_edges`` set, the graph stops growing there:

* an observation that would add no node or edge (another sighting of a known entity, another
  event on a known edge) is always applied: counts, times and support stay exact;
* an observation that would add some (at most two nodes and one edge) is applied while the
  graph has room for them, and **spilled** otherwise: appended, in order, to the spill file
  (the journal's framed format, :mod:`.journal`), never applied to the graph;
* what is spilled is counted (``exporter.<id>.spilled``), said once in the log and in
  ``graph.json``'s ``summary.bounded``; an observation that could not be spilled (no spill
  file, the file at ``spill_max_bytes``, a failing write) is counted as ``dropped`` there and in
  ``exporter.<id>.bound_dropped``. Nothing acknowledged disappears without a count: with a
  journal every observation is in the journal as well.

The spill file holds exactly what the current graph does not: it is emptied at every start
(a journal replay passes through the bounds again and spills the same observations).
Coverage records are always counted. Memory is then bounded by ``max_nodes``, ``max_edges``,
``support_limit`` ids per edge and ``occurrence_window`` entries (``docs/exporters.md`` gives
measured bytes per element to size them against the memory limiter).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_bridge.graph import GraphAccumulator
from otel_bridge.model import CoverageRecord, Observation

from .journal import Journal, JournalError

__all__ = ["Bounds", "BoundsConfig"]

_NO_COVERAGE: tuple[CoverageRecord, ...] = ()


@dataclass(slots=True)
class BoundsConfig:
    """Bounds of the graph (off while both maxima are 0); see :mod:`.bounds`."""

    max_nodes: int = 0
    """The graph holds at most this many nodes; 0: no bound."""
    max_edges: int = 0
    """The graph holds at most this many edges; 0: no bound."""
    spill: str = "graph.spill"
    """File the observations over the bounds are appended to (relative paths resolve like
    ``output``); empty: they are counted as dropped from the graph, not written."""
    spill_max_bytes: int = 1024 * 1024 * 1024
    """The spill file never grows past this; later observations over the bounds are dropped
    from the graph and counted."""

    @property
    def enabled(self) -> bool:
        """True when a maximum is set."""
        return self.max_nodes > 0 or self.max_edges > 0

    def validate(self) -> list[str]:
        """Problems with this configuration, relative to the exporter."""
        problems = []
        for name in ("max_nodes", "max_edges"):
            if getattr(self, name) < 0:
                problems.append(f"bounds.{name}: must not be negative")
        if self.spill_max_bytes < 1024:
            problems.append("bounds.spill_max_bytes: must be at least 1024")
        return problems


class Bounds:
    """Applies observations to an accumulator within the bounds, spilling the rest."""

    def __init__(self, config: BoundsConfig, accumulator: GraphAccumulator) -> None:
        self.config = config
        self._acc = accumulator
        self._spill: Journal | None = None
        self.spill_path: Path | None = None
        self.spilled = 0
        """Observations over the bounds written to the spill file."""
        self.dropped = 0
        """Observations over the bounds not written (no spill file, full or failing)."""
        self.problem = ""
        """Why the last observations over the bounds were dropped ("" while none were)."""

    def open(self, path: Path | None) -> None:
        """Start a new spill file at ``path`` (None: spill nothing); JournalError if unusable."""
        if path is None:
            return
        spill = Journal(str(path), max_bytes=self.config.spill_max_bytes)
        spill.open_empty()
        self._spill, self.spill_path = spill, path

    def close(self) -> None:
        """Close the spill file. Safe twice."""
        if self._spill is not None:
            self._spill.close()

    def apply(self, observations: tuple[Observation, ...]) -> int:
        """Apply ``observations`` in order within the bounds; returns how many went over them
        (spilled or dropped). The caller holds the exporter's lock."""
        acc, cfg = self._acc, self.config
        n = len(observations)
        max_nodes, max_edges = cfg.max_nodes, cfg.max_edges
        if (not max_nodes or acc.node_count + 2 * n <= max_nodes) and (
            not max_edges or acc.edge_count + n <= max_edges
        ):
            acc.apply_many(observations)  # room for all of them, whatever they add
            return 0
        over: list[Observation] = []
        pending: list[Observation] = []  # add nothing: applied together, in order
        for o in observations:
            nodes, edges = acc.growth(o)
            if not nodes and not edges:
                pending.append(o)
            elif (not max_nodes or acc.node_count + nodes <= max_nodes) and (
                not max_edges or acc.edge_count + edges <= max_edges
            ):
                if pending:
                    acc.apply_many(pending)
                    pending = []
                acc.apply_many((o,))
            else:
                over.append(o)
        if pending:
            acc.apply_many(pending)
        if over:
            self._spill_out(tuple(over))
        return len(over)

    def _spill_out(self, over: tuple[Observation, ...]) -> None:
        spill = self._spill
        if spill is None:
            self.dropped += len(over)
            self.problem = "no spill file is configured (bounds.spill)"
            return
        try:
            if spill.append(over, _NO_COVERAGE):
                self.spilled += len(over)
                return
            self.problem = f"the spill file {spill.path} reached bounds.spill_max_bytes"
        except (OSError, JournalError, TypeError, ValueError) as exc:
            self.problem = f"cannot append to the spill file {spill.path} ({exc})"
        self.dropped += len(over)

    def summary(self) -> dict[str, Any]:
        """``graph.json``'s ``summary.bounded`` object (``docs/graph.md``)."""
        return {
            "max_nodes": self.config.max_nodes,
            "max_edges": self.config.max_edges,
            "over_bounds": self.spilled + self.dropped,
            "spilled": self.spilled,
            "dropped": self.dropped,
            "spill": str(self.spill_path) if self.spill_path is not None else None,
        }
