"""Configuration of the ``file`` exporter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SignalName = Literal["spans", "logs", "observations", "coverage"]


def _all_signals() -> list[SignalName]:
    return ["spans", "logs", "observations", "coverage"]


@dataclass(slots=True)
class Config:
    """Configuration of the ``file`` exporter."""

    path: str = "./otel-bridge-records.jsonl"
    """The JSON-lines file to write (created 0600, missing directories 0700)."""
    signals: list[SignalName] = field(default_factory=_all_signals)
    """Which parts of each batch to write: any of spans, logs, observations, coverage."""
    flush_interval: float = 1.0
    """Seconds between flushes to the OS (``"1s"``); 0 flushes after every batch."""
    append: bool = False
    """Append to an existing file instead of replacing it (its last lines are read back at
    start, so a record resent after a kill is not written twice: ``docs/exporters.md``)."""

    def validate(self) -> list[str]:
        """Problems with this configuration, as ``"key: message"``."""
        problems = []
        if not self.path:
            problems.append("path: required")
        if not self.signals:
            problems.append("signals: choose at least one of spans, logs, observations, coverage")
        if len(set(self.signals)) != len(self.signals):
            problems.append("signals: lists a signal twice")
        if self.flush_interval < 0:
            problems.append("flush_interval: must not be negative")
        return problems
