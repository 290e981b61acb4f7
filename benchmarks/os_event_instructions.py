"""Machine instructions per OS event on the collector's per-event path (cachegrind).

The ``medium`` workload of ``overhead.py`` makes the host receiver write one ``file.open`` /
``file.write`` record per kernel event (about 6,000 to 12,000 per run). This benchmark runs the
per-event steps ``observe`` takes for each such record, in one process under valgrind's
``cachegrind`` (no cache simulation), so the figure does not move with the load of a shared
machine. Every component is built from the configuration ``observe`` runs with (its overlay,
``build_overlay``, through the loader, ``parse_config``), a fresh instance per measured stage:

* ``record``: the host receiver's record for one event (``identity_attrs`` of the pid, the
  ``file.path``, ``EventFactory.record``: record id, attribution, the invalid-text rule);
* ``redact``, ``normalize``, ``correlate``, ``grade``: the evidence pipeline's processors, each
  on what the processors before it made of the records (prepared outside the measured part);
* ``graph``: the graph exporter on the graded batches;
* ``write``: the ``file/run_os`` exporter (``os.jsonl``) on the host receiver's batches;
* ``correlated``: the ``file/run_correlated`` exporter on the graded batches;
* ``pipeline``: the whole collector from the host receiver's router, both of its pipelines.

The records are the medium workload's: one process opening, writing and reopening 16 files in
turn, plus a ``true`` child's ``process.exec`` every 96 records, in batches of 256 (the host
receiver's ``batch_size``). Each stage runs twice, with 0 and with ``--events`` events (a
multiple of 256) after a warm-up of 2,048: the difference divided by the events leaves out
start-up, imports and the preparation. Run it against another tree by putting that tree first on
``PYTHONPATH`` (the stages use only names both trees have)::

    python benchmarks/os_event_instructions.py
    PYTHONPATH=/path/to/other/tree python benchmarks/os_event_instructions.py --events 4096

Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from pipeline_instructions import cachegrind

STAGES = (
    "record",
    "redact",
    "normalize",
    "correlate",
    "grade",
    "graph",
    "write",
    "correlated",
    "pipeline",
)
"""The measured steps, in the order a record meets them (``pipeline``: all of them but
``record``, as the collector runs them)."""
_BATCH = 256
"""Records per batch: the host receiver's ``batch_size`` default."""
_WARM = 2_048
_EVIDENCE = "evidence/run"
_CHAIN = ("redact/run", "normalize/run", "correlate/run", "grade/run")
"""The evidence pipeline's processors, in order (``observe``'s overlay)."""
_INPUT = {
    "redact": 0,
    "normalize": 1,
    "correlate": 2,
    "grade": 3,
    "graph": 4,
    "write": 0,
    "correlated": 4,
    "pipeline": 0,
}
"""Which batches each stage consumes: 0 the host receiver's (``logs/run_os`` writes them as
they come), 1 redacted, 2 normalized, 3 correlated, 4 graded."""


def _factory() -> Any:
    from otel_bridge.component import Telemetry
    from otel_bridge.receivers.host.events import Emitter, EventFactory
    from otel_bridge.receivers.host.procfs import ProcessInfo
    from otel_bridge.testing import RecordingConsumer

    emitter = Emitter(RecordingConsumer(), Telemetry(), batch_size=_BATCH, interval=1.0)
    factory = EventFactory("linux", "bench-run", emitter)
    factory.remember(ProcessInfo(pid=4242, start_ms=1_767_225_600_000, ppid=1))
    return factory


def _records(factory: Any, n: int) -> list[Any]:
    """``n`` records of the medium workload, built by the host receiver's own factory."""
    from otel_bridge.receivers.host.procfs import ProcessInfo

    out: list[Any] = []
    kinds = ("file.open", "file.write", "file.open")
    for i in range(n):
        if i % 96 == 95:
            child = ProcessInfo(
                pid=5000 + i,
                start_ms=1_767_225_600_000 + i,
                ppid=4242,
                exe="/usr/bin/true",
                argv=["true"],
                cwd="/work",
            )
            factory.remember(child)
            out.append(factory.process_event("process.exec", child, i, attribution="syscall"))
            continue
        attrs = factory.identity_attrs(4242)
        attrs["file.path"] = f"/tmp/medium/root/f{(i // 3) % 16}.bin"
        out.append(
            factory.record(kinds[i % 3], 1_767_225_600_000_000_000 + i, attrs,
                           attribution="syscall", causal=True)
        )  # fmt: skip
    return out


class _Sink:
    """The next consumer of a processor measured alone: keeps the last batch it was given."""

    def __init__(self) -> None:
        self.last: Any = None

    def consume(self, batch: Any) -> None:
        self.last = batch


def _observe_config(workdir: str) -> tuple[Any, Any]:
    """The collector configuration ``observe`` runs with (no ``-c``), writing into ``workdir``,
    and its wiring (which receiver is the host receiver)."""
    from otel_bridge import rundir
    from otel_bridge.commands.observe_run import build_overlay
    from otel_bridge.config import parse_config

    run = rundir.RunDir.create(os.path.join(workdir, "run"))
    overlay, wiring = build_overlay(run, "bench-run", backend="linux")
    return parse_config(None, overlay=overlay, origin="<bench>"), wiring


def _processor(config: Any, proc_id: str, sink: Any) -> Any:
    """A fresh instance of processor ``proc_id`` of ``config`` in front of ``sink``."""
    from otel_bridge.component import CreateSettings, Telemetry

    component = config.processors[proc_id]
    settings = CreateSettings(id=proc_id, pipeline=_EVIDENCE, telemetry=Telemetry())
    return component.factory.create(settings, component.config, sink)


def _stages_of(config: Any, batches: list[Any], upto: int) -> list[list[Any]]:
    """``batches`` and what the first ``upto`` processors of the evidence pipeline make of them
    in turn (``[host, redacted, normalized, correlated, graded]``), by fresh instances."""
    out = [batches]
    for proc_id in _CHAIN[:upto]:
        sink = _Sink()
        processor = _processor(config, proc_id, sink)
        step: list[Any] = []
        for batch in out[-1]:
            sink.last = None
            processor.consume(batch)
            step.append(sink.last)
        out.append(step)
    return out


def _measured(stage: str, config: Any, wiring: Any, host: Any) -> Any:
    """The consume function of ``stage``: a fresh component built from ``config``."""
    from otel_bridge.pipeline import Collector

    if stage in ("graph", "write", "correlated"):
        name = {"graph": "graph/run", "write": "file/run_os", "correlated": "file/run_correlated"}
        component = config.exporters[name[stage]]
        from otel_bridge.component import CreateSettings, Telemetry

        settings = CreateSettings(id=name[stage], telemetry=Telemetry())
        exporter = component.factory.create(settings, component.config, None)
        exporter.start(host)
        return exporter.consume
    if stage == "pipeline":
        collector = Collector(config, host=host)
        for component in (*collector.exporters.values(), *collector.processors(_EVIDENCE)):
            component.start(collector.host)
        return lambda batch: collector.inject(wiring.host, batch)
    return _processor(config, f"{stage}/run", _Sink()).consume


def work(stage: str, events: int, prepared: int) -> None:
    """Warm up, then run ``events`` of ``prepared`` events through ``stage`` (the measured
    child's job; everything else is the same in both runs)."""
    import tempfile

    from otel_bridge.component import Host
    from otel_bridge.model import Batch

    factory = _factory()
    if stage == "record":
        _records(factory, _WARM)
        _records(factory, events)
    else:
        workdir = tempfile.mkdtemp(prefix="os-event-bench-")
        config, wiring = _observe_config(workdir)
        records = _records(factory, _WARM + prepared)
        batches = [
            Batch(logs=tuple(records[i : i + _BATCH])) for i in range(0, len(records), _BATCH)
        ]
        inputs = _stages_of(config, batches, _INPUT[stage])[-1]
        step = _measured(stage, config, wiring, Host(run_dir=os.path.join(workdir, "run")))
        for batch in inputs[: (_WARM + events) // _BATCH]:
            step(batch)
    sys.stdout.flush()
    os._exit(0)


def instructions(stage: str, events: int, prepared: int) -> int:
    """Instructions executed by a child process running ``events`` events through ``stage``
    (a fixed hash seed: the same dictionary and set layouts, so repeatable counts)."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    return cachegrind(__file__, ["--child", stage, str(events), str(prepared)], env=env)["I"]


def main(argv: list[str] | None = None) -> int:
    """Print instructions per OS event for each requested stage."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=8_192)
    parser.add_argument("--stage", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument(
        "--child", nargs=3, metavar=("STAGE", "EVENTS", "PREPARED"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        work(args.child[0], int(args.child[1]), int(args.child[2]))
        return 0
    if shutil.which("valgrind") is None:
        print("needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    import otel_bridge

    print(f"instructions per OS event (cachegrind, {args.events:,} events after warm-up)")
    print(f"code: {Path(otel_bridge.__file__).parent}")
    for stage in args.stage:
        events = args.events // _BATCH * _BATCH
        loaded = instructions(stage, events, events)
        value = (loaded - instructions(stage, 0, events)) / events
        print(f"{stage:>8}: {value:>9,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
