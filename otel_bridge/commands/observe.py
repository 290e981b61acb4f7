"""``otel-bridge observe [-c FILE] [-o DIR] [--backend B] -- CMD ...``: observe one command.

Builds its collector with the same loader and pipeline builder as ``run``: ``-c FILE`` is read
like ``validate`` reads it, and the run's wiring is a typed overlay the loader applies
(:func:`build_overlay`; without ``-c`` the overlay alone is the bundled configuration). It reads
the components only through the protocols of :mod:`otel_bridge.component` (the OTLP receiver's
bound endpoints, the host receiver's root pid, backend and collections, the correlator's
outcomes) and the typed counter reads. It launches CMD with the OTLP variables pointing at the
collector, follows its process lineage with the host receiver, hands its own root span to the
pipelines directly, and writes the run directory (:mod:`otel_bridge.rundir`).

Start-up without a blind window: CMD is launched behind a gate (``sh`` blocked reading a pipe)
so its pid is known before anything runs; the collector starts with the host receiver rooted at
that pid; only then is the gate opened (passing the OTLP endpoint, whose port is chosen by the
kernel), and the gate ``exec``s CMD. If the collector fails at any point, the workload's process
group is terminated, never orphaned. The exit code is CMD's (128+N when killed by signal N).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from otel_bridge import rundir
from otel_bridge.component import RECEIVER, Endpoint, RootSettable, Telemetry
from otel_bridge.config import (
    ComponentAddition,
    ConfigOverlay,
    PipelineAddition,
    component_ids,
    parse_config,
    read_config,
)
from otel_bridge.errors import OtelBridgeError
from otel_bridge.identity import host_id
from otel_bridge.model import Batch, Resource, Scope, Span, SpanKind, Status, StatusCode
from otel_bridge.pipeline import Collector
from otel_bridge.redaction import redact_argv
from otel_bridge.review.hook import review_at_end

_UNSET = (
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
)
_GATE = (
    "{ IFS= read -r OTEL_EXPORTER_OTLP_ENDPOINT && IFS= read -r OTEL_EXPORTER_OTLP_PROTOCOL; } "
    '< "$1" || exit 126; shift; '
    'export OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_PROTOCOL; exec "$@"'
)
_LAST_SPANS_WAIT = 0.2
"""After CMD exits, wait until no span arrived for this long (bounded by 3 s)."""
_RUN_PIPELINE = "evidence/run"
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``observe`` command."""
    parser = subparsers.add_parser(
        "observe",
        help="launch and observe one command, write its run directory",
        description=(
            "Run CMD under observation: its OpenTelemetry spans (OTEL_EXPORTER_OTLP_ENDPOINT is "
            "set for it) and what the machine saw it do (processes, files, connections) are "
            "joined into an evidence graph in the run directory. Exits with CMD's exit code."
        ),
    )
    parser.add_argument("-c", "--config", metavar="FILE", help="collector config to extend")
    parser.add_argument(
        "-o", "--output", metavar="DIR", help="run directory (default ./otel-bridge-runs/<run id>)"
    )
    parser.add_argument(
        "--backend",
        choices=("auto", "linux", "ebpf", "strace", "portable"),
        help="host observation backend (default: the config's, else auto)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no live progress line")
    parser.add_argument(
        "--no-review", action="store_true", help="do not review the run (docs/review.md)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    parser.set_defaults(func=run)


def new_run_id() -> str:
    """A sortable, unique run id: ``20260101T120000Z-1a2b3c``."""
    return datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@dataclass(frozen=True, slots=True)
class Wiring:
    """Which receivers of the configuration the run uses."""

    otlp: str
    """The OTLP receiver CMD exports to (the file's first ``otlp`` one, else ``otlp``)."""
    host: str
    """The host receiver rooted at CMD (the file's first ``host`` one, else ``host``)."""


def build_overlay(
    run: rundir.RunDir,
    run_id: str,
    *,
    backend: str | None = None,
    user: Mapping[str, Any] | None = None,
) -> tuple[ConfigOverlay, Wiring]:
    """The run's additions to the configuration ``user`` (None: none), and its wiring.

    Without ``user`` the result is the bundled configuration; with it, the user's components
    and pipelines stay and the run's own processors, exporters and pipelines are added under
    ``*/run*`` names. The loader applies the overlay (:func:`otel_bridge.config.parse_config`).
    """

    adds: list[ComponentAddition] = []
    otlp = next(iter(component_ids(user, "receivers", "otlp")), None)
    if otlp is None:
        otlp = "otlp"
        loopback = {"endpoint": "127.0.0.1:0"}
        adds.append(
            ComponentAddition(
                section="receivers",
                id=otlp,
                settings={"protocols": {"grpc": loopback, "http": loopback}},
            )
        )
    host = next(iter(component_ids(user, "receivers", "host")), "host")
    host_settings: dict[str, Any] = {"run_id": run_id}
    if backend:
        host_settings["backend"] = backend
    # file watching (portable backend) defaults to the workload's working directory
    adds.append(
        ComponentAddition(
            section="receivers",
            id=host,
            settings=host_settings,
            defaults={"watch_paths": [os.getcwd()]},
        )
    )
    adds += [
        ComponentAddition(section="processors", id=f"{name}/run")
        for name in ("redact", "normalize", "correlate", "grade")
    ]
    for eid, settings in (
        ("file/run_os", {"path": run.file(rundir.OS_STREAM), "signals": ["logs"]}),
        ("file/run_sem", {"path": run.file(rundir.SEM_STREAM), "signals": ["spans", "logs"]}),
        (
            "file/run_correlated",
            {"path": run.file(rundir.CORRELATED_STREAM), "signals": ["observations", "coverage"]},
        ),
        ("graph/run", {"output": run.file(rundir.GRAPH)}),
    ):
        adds.append(ComponentAddition(section="exporters", id=eid, settings=settings))
    pipelines = (
        PipelineAddition(id="logs/run_os", receivers=(host,), exporters=("file/run_os",)),
        PipelineAddition(
            id="traces/run_sem",
            receivers=(otlp,),
            processors=("redact/run",),
            exporters=("file/run_sem",),
        ),
        PipelineAddition(
            id="logs/run_sem",
            receivers=(otlp,),
            processors=("redact/run",),
            exporters=("file/run_sem",),
        ),
        PipelineAddition(
            id=_RUN_PIPELINE,
            receivers=(otlp, host),
            processors=("redact/run", "normalize/run", "correlate/run", "grade/run"),
            exporters=("graph/run", "file/run_correlated"),
        ),
    )
    return ConfigOverlay(components=tuple(adds), pipelines=pipelines), Wiring(otlp, host)


class Workload:
    """CMD launched behind a gate in its own process group (see the module docstring).

    The gate is ``sh`` reading one line from a FIFO in a private temporary directory (a FIFO,
    not an inherited descriptor: ``dash`` cannot redirect descriptors above 9).
    """

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self._dir = tempfile.mkdtemp(prefix="otel-bridge-gate-")
        self._fifo = os.path.join(self._dir, "gate")
        os.mkfifo(self._fifo, 0o600)
        self.proc = subprocess.Popen(
            ["sh", "-c", _GATE, "otel-bridge-gate", self._fifo, *command],
            env=env,
            process_group=0,
        )
        self.pid = self.proc.pid

    def release(self, endpoint: str, protocol: str) -> None:
        """Open the gate: CMD runs with the OTLP endpoint and protocol variables set."""
        with open(self._fifo, "w", encoding="utf-8") as f:
            f.write(f"{endpoint}\n{protocol}\n")
        shutil.rmtree(self._dir, ignore_errors=True)

    def terminate(self) -> None:
        """Terminate the whole process group (SIGTERM, then SIGKILL after 3 s)."""
        shutil.rmtree(self._dir, ignore_errors=True)
        for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                # the leader is gone; stragglers of the group still get the signal next round
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait()

    def exit_code(self) -> int:
        """CMD's exit code, 128+N when killed by signal N."""
        code = self.proc.wait()
        return 128 - code if code < 0 else code


def _root_span(
    *, run_id: str, trace_id: bytes, span_id: bytes, command: list[str], start: int, code: int
) -> Span:

    return Span(
        resource=Resource(
            attributes={
                "service.name": "otel-bridge",
                "otel_bridge.run.id": run_id,
                "host.id": host_id(),
                "process.pid": os.getpid(),
            }
        ),
        scope=Scope(name="otel_bridge.observe"),
        trace_id=trace_id,
        span_id=span_id,
        name="otel-bridge observe",
        kind=SpanKind.INTERNAL,
        start_time_unix_nano=start,
        end_time_unix_nano=time.time_ns(),
        attributes={
            "otel_bridge.run.id": run_id,
            "process.command_args": tuple(redact_argv(command)),
            "process.exit.code": code,
        },
        status=Status(code=StatusCode.ERROR if code else StatusCode.UNSET),
    )


def _record_root_span(collector: Collector, receiver_id: str, span: Span) -> None:
    """Hand the run's root span to the pipelines of the OTLP receiver, as if CMD sent it."""

    try:
        collector.inject(receiver_id, Batch(spans=(span,)))
    except Exception as exc:
        collector.host.telemetry.report_once(
            "observe.root_span", f"observe: root span not recorded: {exc}"
        )


def recorded_spans(telemetry: Telemetry) -> int:
    """Spans the OTLP receivers handed to the pipelines (CMD's, and the run's root span)."""

    return telemetry.total("routed", kind=RECEIVER, type="otlp", label="spans")


def accepted_spans(telemetry: Telemetry) -> int:
    """Spans the OTLP receivers accepted from clients."""

    return telemetry.total("spans_accepted", kind=RECEIVER, type="otlp")


class Progress:
    """A live stderr line (spans, processes, files, connections) while CMD runs, on a TTY."""

    def __init__(self, telemetry: Telemetry, enabled: bool) -> None:
        self._telemetry = telemetry
        self._enabled = enabled and sys.stderr.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="observe-progress", daemon=True)

    def start(self) -> None:
        """Begin updating (no-op when not a TTY)."""
        if self._enabled:
            self._thread.start()

    def line(self) -> str:
        """The current progress text."""

        events = self._telemetry.by_label("events", kind=RECEIVER, type="host")

        def family(namespace: str) -> int:
            return sum(n for name, n in events.items() if name.partition(".")[0] == namespace)

        return (
            f"spans {accepted_spans(self._telemetry)}  "
            f"processes {events.get('process.start', 0)}  "
            f"files {family('file')}  "
            f"connections {events.get('network.connect', 0)}"
        )

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            sys.stderr.write(f"\r\x1b[2Kotel-bridge: {self.line()}")
            sys.stderr.flush()

    def stop(self) -> None:
        """Stop and clear the line."""
        if self._enabled and self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


def wait_quiet(telemetry: Telemetry, *, quiet: float = _LAST_SPANS_WAIT, bound: float = 3.0) -> int:
    """Wait until no span was accepted for ``quiet`` seconds (at most ``bound``); the polls."""
    deadline = time.monotonic() + bound
    last = -1
    polls = 0
    while time.monotonic() < deadline:
        now = accepted_spans(telemetry)
        if now == last:
            return polls
        last = now
        polls += 1
        time.sleep(quiet)
    return polls


def _client_url(endpoint: Endpoint) -> str:
    """Where CMD reaches ``endpoint``: loopback for a wildcard bind."""
    if endpoint.host in _WILDCARD_HOSTS:
        return f"http://127.0.0.1:{endpoint.port}"
    return endpoint.url


def _otlp_target(collector: Collector, receiver_id: str) -> tuple[str, str]:
    """The OTLP endpoint and protocol CMD is told, from the receiver's status."""
    status = collector.status(receiver_id)
    http, grpc = status.endpoint("http"), status.endpoint("grpc")
    if http is not None:
        return _client_url(http), "http/protobuf"
    if grpc is not None:
        return _client_url(grpc), "grpc"
    return "", "http/protobuf"


def _command_of(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise OtelBridgeError("observe: no command given (usage: otel-bridge observe -- CMD ...)")
    return command


def run(args: argparse.Namespace) -> int:
    """Observe ``args.command``; returns its exit code."""

    command = _command_of(args)
    run_id = new_run_id()
    user = read_config(args.config) if args.config else None
    run = rundir.RunDir.create(args.output or os.path.join("otel-bridge-runs", run_id))
    overlay, wiring = build_overlay(
        run, run_id, backend=args.backend, user=user if isinstance(user, Mapping) else None
    )
    config = parse_config(user, overlay=overlay, origin=args.config or "<observe>")
    trace_id, span_id = secrets.token_bytes(16), secrets.token_bytes(8)
    env = {k: v for k, v in os.environ.items() if k not in _UNSET}
    env.update(
        {
            "TRACEPARENT": f"00-{trace_id.hex()}-{span_id.hex()}-01",
            "OTEL_BRIDGE_RUN_ID": run_id,
        }
    )
    collector = Collector(config)
    telemetry = collector.host.telemetry
    collector.host.run_dir = run.path
    started_ns = time.time_ns()
    workload = Workload(command, env)
    progress = Progress(telemetry, not args.no_progress)
    code: int | None = None
    interrupted: list[int] = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def forward(signum: int, frame: object) -> None:
        del frame
        interrupted.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(workload.pid, signum)

    try:
        host = collector.component(wiring.host)
        if isinstance(host, RootSettable):
            host.set_root_pid(workload.pid)
        collector.start()
        endpoint, protocol = _otlp_target(collector, wiring.otlp)
        for s in previous:
            signal.signal(s, forward)
        workload.release(endpoint, protocol)
        progress.start()
        code = workload.exit_code()
        progress.stop()
        root = _root_span(
            run_id=run_id,
            trace_id=trace_id,
            span_id=span_id,
            command=command,
            start=started_ns,
            code=code,
        )
        wait_quiet(telemetry)
        _record_root_span(collector, wiring.otlp, root)
    except BaseException:
        progress.stop()
        workload.terminate()
        collector.shutdown()
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    collector.shutdown()
    summary = _summary(run_id, command, code, collector, wiring=wiring, started_ns=started_ns)
    summary["signals_forwarded"] = [signal.Signals(s).name for s in interrupted]
    run.write_json(rundir.SUMMARY, summary)
    if not getattr(args, "no_review", False):
        review_at_end(run.path)
    run.write_manifest({"id": run_id})
    _print_summary(run, summary, collector)
    return code


def _summary(
    run_id: str,
    command: list[str],
    code: int,
    collector: Collector,
    *,
    wiring: Wiring,
    started_ns: int,
) -> dict[str, Any]:

    telemetry = collector.host.telemetry
    host = collector.status(wiring.host)
    return {
        "run": {"id": run_id, "host.id": host_id(), "started": started_ns, "ended": time.time_ns()},
        "command": redact_argv(command),
        "command_line": shlex.join(redact_argv(command)),
        "exit_code": code,
        "host_backend": host.detail,
        "host_backend_name": host.backend,
        "collection": dict(host.collections),
        # The run's own correlator only: with -c the user's pipelines may run another one.
        "correlation": run_correlation(collector),
        "counters": telemetry.counters(),
        "notes": telemetry.notes(),
    }


def run_correlation(collector: Collector) -> dict[str, int]:
    """Outcome counts of the processors of the run's own evidence pipeline (its correlator)."""
    out: dict[str, int] = {}
    for status in collector.pipeline_statuses(_RUN_PIPELINE):
        for k, v in status.outcomes.items():
            if v:
                out[k] = out.get(k, 0) + v
    return out


def _print_summary(run: rundir.RunDir, summary: Mapping[str, Any], collector: Collector) -> None:

    telemetry = collector.host.telemetry
    out = sys.stderr
    print(f"otel-bridge: run {summary['run']['id']} exit code {summary['exit_code']}", file=out)
    print(f"  graph:    {run.file(rundir.GRAPH)}", file=out)
    print(f"  run dir:  {run.path}", file=out)
    print(f"  backend:  {summary['host_backend']}", file=out)
    for name, state in sorted(summary["collection"].items()):
        print(f"  {name + ':':9} {state}", file=out)
    spans = recorded_spans(telemetry)
    events = telemetry.total("events_emitted", kind=RECEIVER, type="host")
    print(f"  recorded: {spans} spans, {events} OS events", file=out)
    if summary["correlation"]:
        skips = ", ".join(f"{k} {v}" for k, v in sorted(summary["correlation"].items()))
        print(f"  correlation: {skips}", file=out)
