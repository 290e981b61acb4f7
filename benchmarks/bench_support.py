"""Shared pieces of the host benchmarks: gated launches, statistics, a loopback server."""

from __future__ import annotations

import math
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
from collections.abc import Sequence

from otel_bridge.component import CreateSettings, Host
from otel_bridge.model import Batch
from otel_bridge.receivers.host import HostConfig, HostReceiver


def wilson(hits: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score 95% interval of ``hits`` successes out of ``n``."""
    if n == 0:
        return (0.0, 1.0)
    p = hits / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def bootstrap_median_ci(
    values: Sequence[float], resamples: int = 5000, seed: int = 20240601
) -> tuple[float, float]:
    """Deterministic percentile bootstrap 95% interval of the median."""
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(
        statistics.median(rng.choice(values) for _ in range(n)) for _ in range(resamples)
    )
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (inclusive method)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


class Gate:
    """A command launched behind a FIFO gate so observation can attach before it runs."""

    def __init__(
        self, argv: Sequence[str], cwd: str | None = None, *, capture: bool = False
    ) -> None:
        self._dir = tempfile.mkdtemp(prefix="bench-gate-")
        fifo = os.path.join(self._dir, "gate")
        os.mkfifo(fifo, 0o600)
        self._fifo = fifo
        self.proc = subprocess.Popen(
            ["sh", "-c", 'read _ < "$1"; shift; exec "$@"', "gate", fifo, *argv],
            cwd=cwd,
            process_group=0,
            stdout=subprocess.PIPE if capture else None,
            text=True,
        )
        self.pid = self.proc.pid

    def release(self) -> None:
        """Let the command run."""
        with open(self._fifo, "w") as f:
            f.write("go\n")
        shutil.rmtree(self._dir, ignore_errors=True)

    def wait(self) -> int:
        """The command's exit status."""
        return self.proc.wait()

    def output(self) -> str:
        """Everything the command printed (``capture=True``), after it exited."""
        stdout = self.proc.stdout
        if stdout is None:
            return ""
        with stdout:
            return stdout.read()


class Sink:
    """A consumer that keeps every log record and can append them to a JSON-lines file."""

    def __init__(self, path: str | None = None) -> None:
        self.logs: list[object] = []
        self._lock = threading.Lock()
        self._file = open(path, "w", encoding="utf-8") if path else None  # noqa: SIM115

    def consume(self, batch: Batch) -> None:
        """Keep the batch's logs (and write them, one JSON object per record)."""
        from otel_bridge.otlp.json_codec import log_to_dict

        with self._lock:
            self.logs.extend(batch.logs)
            if self._file is not None:
                import json

                for record in batch.logs:
                    self._file.write(json.dumps(log_to_dict(record), separators=(",", ":")) + "\n")

    def close(self) -> None:
        """Close the file."""
        if self._file is not None:
            self._file.close()


def start_host(config: HostConfig, root_pid: int, sink: Sink) -> HostReceiver:
    """A started host receiver rooted at ``root_pid``."""
    receiver = HostReceiver(CreateSettings(id="host"), config, sink)
    receiver.set_root_pid(root_pid)
    receiver.start(Host())
    return receiver
