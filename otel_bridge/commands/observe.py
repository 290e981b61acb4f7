"""``otel-bridge observe [-c FILE] [-o DIR] [--backend B] -- CMD ...``: observe one command.

Builds the bundled collector in code (or takes the components of ``-c FILE`` and adds the run
wiring), launches CMD with the OTLP variables pointing at the collector, follows its process
lineage with the host receiver, and writes the run directory (:mod:`otel_bridge.rundir`).

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
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import yaml

from otel_bridge import rundir
from otel_bridge.component import Telemetry
from otel_bridge.config import parse_config
from otel_bridge.errors import ConfigError, OtelBridgeError
from otel_bridge.exporters.otlp.encoding import encode_spans
from otel_bridge.identity import host_id
from otel_bridge.model import Resource, Scope, Span, SpanKind, Status, StatusCode
from otel_bridge.pipeline import Collector
from otel_bridge.processors.correlate import CorrelateProcessor
from otel_bridge.redaction import redact_argv

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
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    parser.set_defaults(func=run)


def new_run_id() -> str:
    """A sortable, unique run id: ``20260101T120000Z-1a2b3c``."""
    return datetime.now(tz=UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def build_config(
    run: rundir.RunDir,
    run_id: str,
    *,
    backend: str | None = None,
    user: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], str]:
    """The collector config mapping for one run, and the id of its host receiver.

    Without ``user`` it is the bundled config; with it, the user's components and pipelines
    stay and the run's own exporters and pipelines are added under ``*/run*`` names.
    """
    cfg: dict[str, Any] = {
        k: dict(v) if isinstance(v, Mapping) else v for k, v in (user or {}).items()
    }
    receivers = cfg.setdefault("receivers", {})
    processors = cfg.setdefault("processors", {})
    exporters = cfg.setdefault("exporters", {})
    service = cfg.setdefault("service", {})
    pipelines = service.setdefault("pipelines", {})
    otlp_id = next((r for r in receivers if r.split("/")[0] == "otlp"), None)
    if otlp_id is None:
        otlp_id = "otlp"
        receivers[otlp_id] = {
            "protocols": {"grpc": {"endpoint": "127.0.0.1:0"}, "http": {"endpoint": "127.0.0.1:0"}}
        }
    host_id_ = next((r for r in receivers if r.split("/")[0] == "host"), None)
    if host_id_ is None:
        host_id_ = "host"
        receivers[host_id_] = {}
    host_cfg = dict(receivers[host_id_] or {})
    host_cfg["run_id"] = run_id
    # file watching (portable backend) defaults to the workload's working directory
    host_cfg.setdefault("watch_paths", [os.getcwd()])
    if backend:
        host_cfg["backend"] = backend
    receivers[host_id_] = host_cfg
    for name in ("redact", "normalize", "correlate", "grade"):
        processors.setdefault(f"{name}/run", {})
    exporters["file/run_os"] = {"path": run.file(rundir.OS_STREAM), "signals": ["logs"]}
    exporters["file/run_sem"] = {"path": run.file(rundir.SEM_STREAM), "signals": ["spans", "logs"]}
    exporters["file/run_correlated"] = {
        "path": run.file(rundir.CORRELATED_STREAM),
        "signals": ["observations", "coverage"],
    }
    exporters["graph/run"] = {"output": run.file(rundir.GRAPH)}
    pipelines["logs/run_os"] = {"receivers": [host_id_], "exporters": ["file/run_os"]}
    pipelines["traces/run_sem"] = {
        "receivers": [otlp_id],
        "processors": ["redact/run"],
        "exporters": ["file/run_sem"],
    }
    pipelines["logs/run_sem"] = {
        "receivers": [otlp_id],
        "processors": ["redact/run"],
        "exporters": ["file/run_sem"],
    }
    pipelines["evidence/run"] = {
        "receivers": [otlp_id, host_id_],
        "processors": ["redact/run", "normalize/run", "correlate/run", "grade/run"],
        "exporters": ["graph/run", "file/run_correlated"],
    }
    cfg.setdefault("extensions", {})
    return cfg, host_id_


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


def _send_span(port: int, span: Span, telemetry: Telemetry) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces",
        data=encode_spans([span], "proto"),
        headers={"Content-Type": "application/x-protobuf"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()
    except OSError as exc:
        telemetry.report_once("observe.root_span", f"observe: root span not recorded: {exc}")


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
        c = self._telemetry.counters()

        def total(*prefixes: str) -> int:
            return sum(v for k, v in c.items() if k.startswith(prefixes))

        return (
            f"spans {total('receiver.otlp.spans_accepted')}  "
            f"processes {total('receiver.host.events.process.start')}  "
            f"files {total('receiver.host.events.file.')}  "
            f"connections {total('receiver.host.events.network.connect')}"
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


def _wait_quiet(telemetry: Telemetry) -> None:
    deadline = time.monotonic() + 3.0
    last = -1
    while time.monotonic() < deadline:
        now = telemetry.counters().get("receiver.otlp.spans_accepted", 0)
        if now == last:
            return
        last = now
        time.sleep(_LAST_SPANS_WAIT)


def run(args: argparse.Namespace) -> int:
    """Observe ``args.command``; returns its exit code."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise OtelBridgeError("observe: no command given (usage: otel-bridge observe -- CMD ...)")
    run_id = new_run_id()
    user = None
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                user = yaml.safe_load(f)
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError([f"{args.config}: {exc}"]) from exc
        if not isinstance(user, Mapping):
            raise ConfigError([f"{args.config}: expected a mapping at the top level"])
    run = rundir.RunDir.create(args.output or os.path.join("otel-bridge-runs", run_id))
    mapping, host_rid = build_config(run, run_id, backend=args.backend, user=user)
    config = parse_config(mapping, origin=args.config or "<observe>")
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
        host = collector.component(host_rid)
        set_root = getattr(host, "set_root_pid", None)
        if set_root is not None:
            set_root(workload.pid)
        collector.start()
        otlp = next(c for rid, c in collector.receivers.items() if rid.split("/")[0] == "otlp")
        http_port = getattr(otlp, "http_port", None)
        grpc_port = getattr(otlp, "grpc_port", None)
        if http_port:
            endpoint, protocol = f"http://127.0.0.1:{http_port}", "http/protobuf"
        elif grpc_port:
            endpoint, protocol = f"http://127.0.0.1:{grpc_port}", "grpc"
        else:
            endpoint, protocol = "", "http/protobuf"
        for s in previous:
            signal.signal(s, forward)
        workload.release(endpoint, protocol)
        progress.start()
        code = workload.exit_code()
        progress.stop()
        if http_port:
            _send_span(
                http_port,
                _root_span(
                    run_id=run_id,
                    trace_id=trace_id,
                    span_id=span_id,
                    command=command,
                    start=started_ns,
                    code=code,
                ),
                telemetry,
            )
        _wait_quiet(telemetry)
    except BaseException:
        progress.stop()
        workload.terminate()
        collector.shutdown()
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    collector.shutdown()
    summary = _summary(run_id, command, code, collector, host_rid=host_rid, started_ns=started_ns)
    summary["signals_forwarded"] = [signal.Signals(s).name for s in interrupted]
    run.write_json(rundir.SUMMARY, summary)
    run.write_manifest({"id": run_id})
    _print_summary(run, summary)
    return code


def _summary(
    run_id: str,
    command: list[str],
    code: int,
    collector: Collector,
    *,
    host_rid: str,
    started_ns: int,
) -> dict[str, Any]:
    telemetry = collector.host.telemetry
    notes = telemetry.notes()
    counters = telemetry.counters()
    host = collector.component(host_rid)
    return {
        "run": {"id": run_id, "host.id": host_id(), "started": started_ns, "ended": time.time_ns()},
        "command": redact_argv(command),
        "command_line": shlex.join(redact_argv(command)),
        "exit_code": code,
        "host_backend": notes.get("host.backend", ""),
        "host_backend_name": getattr(host, "backend_name", ""),
        "collection": {
            k.removeprefix("host.collection."): v
            for k, v in notes.items()
            if k.startswith("host.collection.")
        },
        # The run's own correlator only: with -c the user's pipelines may run another one,
        # and telemetry counters are shared by every instance.
        "correlation": _run_correlation(collector),
        "counters": counters,
        "notes": notes,
    }


def _run_correlation(collector: Collector) -> dict[str, int]:
    """Outcome counts of the correlator in the run's own evidence pipeline."""
    for component in collector.processors("evidence/run"):
        if isinstance(component, CorrelateProcessor):
            return {k: v for k, v in component.outcomes.items() if v}
    return {}


def _print_summary(run: rundir.RunDir, summary: Mapping[str, Any]) -> None:
    counters = summary["counters"]
    out = sys.stderr
    print(f"otel-bridge: run {summary['run']['id']} exit code {summary['exit_code']}", file=out)
    print(f"  graph:    {run.file(rundir.GRAPH)}", file=out)
    print(f"  run dir:  {run.path}", file=out)
    print(f"  backend:  {summary['host_backend']}", file=out)
    for name, state in sorted(summary["collection"].items()):
        print(f"  {name + ':':9} {state}", file=out)
    spans = counters.get("receiver.otlp.spans_accepted", 0)
    events = counters.get("receiver.host.events_emitted", 0)
    print(f"  recorded: {spans} spans, {events} OS events", file=out)
    if summary["correlation"]:
        skips = ", ".join(f"{k} {v}" for k, v in sorted(summary["correlation"].items()))
        print(f"  correlation: {skips}", file=out)
