"""An idle standing collector decides the last calls it received (``processors/correlate``).

Met as a new user with ``otel-bridge run -c configs/phoenix.yaml``: the watermark moved only with
the observations' own times, so the tool calls of the last agent before the collector went quiet
were never decided while it ran; ``enrich`` released their spans to Phoenix as unlinked
(``no_match``) although the process that ran the command was observed, and the links appeared in
graph.json only at shutdown. Once nothing has arrived for ``allowed_lateness``, a standing
collector's watermark now follows its clock.
"""

from __future__ import annotations

import threading
import time

from correlate_builders import MS, Proc, declaration, exit_obs
from waiting import wait_until

from otel_bridge.component import Host, Telemetry
from otel_bridge.model import Batch, Observation, RelationKind
from otel_bridge.processors.correlate import Config, CorrelateProcessor
from otel_bridge.testing import RecordingConsumer

SPAN = "c3" * 8


def _bridges(sink: RecordingConsumer) -> list[Observation]:
    return [o for o in sink.observations if o.relation == RelationKind.CORRELATED_WITH_PROCESS]


def _call_and_process(now: int) -> list[Observation]:
    """A call declaring ``ls -la`` that ended 100 ms ago, and the ``ls`` it ran."""
    start = now - 300 * MS
    ls = Proc(pid=100, exe="/usr/bin/ls", argv=("ls", "-la"), time=start + 50 * MS)
    obs = declaration(SPAN, "ls -la", start, start + 200 * MS) + ls.observations()
    return [*obs, exit_obs(ls, start + 80 * MS, 0)]


def test_an_idle_standing_collector_decides_with_its_clock() -> None:
    sink = RecordingConsumer()
    config = Config(allowed_lateness=0.5, max_window=1.0)
    processor = CorrelateProcessor(config, sink, Telemetry())
    processor.start(Host())  # no run directory: a standing collector
    try:
        processor.consume(Batch(observations=tuple(_call_and_process(time.time_ns()))))
        assert _bridges(sink) == []  # the observations' own times decide nothing yet
        (bridge,) = wait_until(lambda: _bridges(sink), 10, "the bridge, decided by the clock")
    finally:
        processor.shutdown()
    assert bridge.source.span_id == SPAN
    assert _bridges(sink) == [bridge]  # shutdown adds no second one


def test_under_observe_the_end_of_the_run_decides() -> None:
    """``observe`` decides everything at its end (its host plane may run behind): no clock."""
    sink = RecordingConsumer()
    processor = CorrelateProcessor(Config(allowed_lateness=0.5), sink, Telemetry())
    processor.start(Host(run_dir="/nonexistent-run-dir"))
    processor.consume(Batch(observations=tuple(_call_and_process(time.time_ns()))))
    assert "correlate-clock" not in {t.name for t in threading.enumerate()}
    assert _bridges(sink) == []
    processor.shutdown()
    assert len(_bridges(sink)) == 1
