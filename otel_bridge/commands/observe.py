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

The endpoint CMD gets is a protocol mux (:mod:`otel_bridge.otlp.mux`) in front of the receiver's
gRPC and HTTP servers, so either SDK exporter works; a destination the user had already set in
``OTEL_EXPORTER_OTLP_*`` is forwarded to (``_observe_forward``); after CMD exits the run drains
on events (its process group gone, the mux idle), and ends with ``summary.json``, ``report.md``
and the manifest (``_observe_report``). ``docs/observe.md`` is the contract.
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
from typing import TYPE_CHECKING, Any

from otel_bridge import rundir, strings
from otel_bridge.commands._observe_forward import (
    Forward,
    forward_from_env,
    forward_overlay,
    forward_summary,
)
from otel_bridge.commands._observe_report import (
    otlp_summary,
    print_summary,
    write_report,
)
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
from otel_bridge.otlp.mux import ProtocolMux, Upstream
from otel_bridge.pipeline import Collector
from otel_bridge.redaction import redact_argv

if TYPE_CHECKING:
    from otel_bridge.review.hook import ReviewInputs
    from otel_bridge.viewer.live import LiveView

_OTLP_VARS = "OTEL_EXPORTER_OTLP_"
"""Every variable of the user's own OTLP destination is taken from CMD's environment (its
destination is forwarded to instead, see ``_observe_forward``); the gate sets the two CMD needs."""
_PROTOCOLS = ("grpc", "http/protobuf", "http/json")
_GATE = (
    "{ IFS= read -r OTEL_EXPORTER_OTLP_ENDPOINT && IFS= read -r OTEL_EXPORTER_OTLP_PROTOCOL; } "
    '< "$1" || exit 126; shift; '
    'export OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_PROTOCOL; exec "$@"'
)
_LAST_SPANS_WAIT = 0.2
"""Without the mux: after CMD exits, wait until no span arrived for this long (at most 3 s)."""
_DRAIN_BOUND = 3.0
"""After CMD exits, wait at most this long for its process group and its OTLP connections."""
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
        "--replace",
        action="store_true",
        help="replace the previous run in -o DIR (default: refuse a non-empty directory)",
    )
    parser.add_argument(
        "--no-forward",
        action="store_true",
        help="do not forward CMD's telemetry to the OTEL_EXPORTER_OTLP_* destination already set",
    )
    parser.add_argument(
        "--keep-runtime-reads",
        action="store_true",
        help="keep interpreter and shared-library reads as file nodes in graph.json",
    )
    parser.add_argument(
        "--view", action="store_true", help="serve the live viewer on 127.0.0.1 during the run"
    )
    parser.add_argument(
        "--no-review", action="store_true", help="do not review the run (docs/review.md)"
    )
    parser.add_argument(
        "--hash-files",
        action="store_true",
        help="record the size and sha256 of each file CMD wrote (never the content; "
        "off by default: docs/host.md)",
    )
    parser.add_argument(
        "--review-transcript",
        metavar="FILE",
        action="append",
        default=[],
        help="the review also reads this Codex session transcript (rollout JSONL); repeatable",
    )
    parser.add_argument(
        "--review-model",
        metavar="URL",
        help="the review asks this OpenAI-compatible base URL for proposals (off by default)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    # the run directory is complete and closed when run() returns: the process may end at once
    parser.set_defaults(func=run, exit_when_done=True)


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
    forward: Forward | None = None,
    keep_runtime_reads: bool = False,
    hash_files: bool = False,
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
    if hash_files:  # the file's other capture settings (max_bytes) stay
        stated = ((user or {}).get("receivers") or {}).get(host) or {}
        host_settings["capture"] = {**(stated.get("capture") or {}), "file_hashes": True}
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
    adds += _run_exporters(run, keep_runtime_reads)
    adds += durable_state_in_run(user, run)
    forwarding: tuple[PipelineAddition, ...] = ()
    if forward is not None:
        exporter, forwarding = forward_overlay(forward, otlp)
        adds.append(exporter)
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
        *forwarding,
    )
    return ConfigOverlay(components=tuple(adds), pipelines=pipelines), Wiring(otlp, host)


def _run_exporters(run: rundir.RunDir, keep_runtime_reads: bool) -> list[ComponentAddition]:
    """The exporters writing the run directory's streams and graph."""
    return [
        ComponentAddition(section="exporters", id=eid, settings=settings)
        for eid, settings in (
            ("file/run_os", {"path": run.file(rundir.OS_STREAM), "signals": ["logs"]}),
            ("file/run_sem", {"path": run.file(rundir.SEM_STREAM), "signals": ["spans", "logs"]}),
            (
                "file/run_correlated",
                {
                    "path": run.file(rundir.CORRELATED_STREAM),
                    "signals": ["observations", "coverage"],
                },
            ),
            (
                "graph/run",
                {"output": run.file(rundir.GRAPH), "run": _graph_run(keep_runtime_reads)},
            ),
        )
    ]


_QUEUED_EXPORTERS = ("otlp", "otlphttp", "otlp_grpc", "otlp_http")
RUN_QUEUE_DIR = "queue"
"""The run directory's subdirectory holding the persistent queues of a ``-c`` file's exporters."""


def durable_state_in_run(
    user: Mapping[str, Any] | None, run: rundir.RunDir
) -> list[ComponentAddition]:
    """The ``-c`` file's graph and enrich journals and persistent queues, moved into the run
    directory.

    A configuration written for a standing collector (the bundled ones) keeps a graph journal
    and its OTLP exporters' persistent queues at that collector's paths. Under ``observe`` they
    would replay the standing collector's state into this run, or be locked by it; so each
    journal ``path`` and ``sending_queue.storage`` set in the file is replaced by
    ``graph[-NAME].journal`` or ``queue/`` in the run directory (the journal and the queue
    create them owner-only and open them with ``O_NOFOLLOW``), keeping the other settings.
    """
    out = _enrich_journals_in_run(user, run)
    exporters = (user or {}).get("exporters")
    if not isinstance(exporters, Mapping):
        return out
    for key, settings in exporters.items():
        if not isinstance(settings, Mapping):
            continue
        type_name, _, name = str(key).partition("/")
        journal, queue = settings.get("journal"), settings.get("sending_queue")
        moved: dict[str, Any] = {}
        if type_name == "graph" and isinstance(journal, Mapping) and journal.get("path"):
            path = run.file(f"graph-{name}.journal" if name else "graph.journal")
            moved["journal"] = {**journal, "path": path}
        if type_name in _QUEUED_EXPORTERS and isinstance(queue, Mapping) and queue.get("storage"):
            moved["sending_queue"] = {**queue, "storage": run.file(RUN_QUEUE_DIR)}
        if moved:
            out.append(ComponentAddition(section="exporters", id=str(key), settings=moved))
    return out


def _enrich_journals_in_run(
    user: Mapping[str, Any] | None, run: rundir.RunDir
) -> list[ComponentAddition]:
    """The ``enrich`` processors' journals (``journal.path``), moved into the run directory's
    ``queue/`` beside the exporters' queues (each in its own subdirectory)."""
    processors = (user or {}).get("processors")
    if not isinstance(processors, Mapping):
        return []
    out: list[ComponentAddition] = []
    for key, settings in processors.items():
        journal = settings.get("journal") if isinstance(settings, Mapping) else None
        enrich = str(key).partition("/")[0] == "enrich"
        if enrich and isinstance(journal, Mapping) and journal.get("path"):
            moved = {"journal": {**journal, "path": run.file(RUN_QUEUE_DIR)}}
            out.append(ComponentAddition(section="processors", id=str(key), settings=moved))
    return out


def _graph_run(keep_runtime_reads: bool) -> dict[str, str]:
    """The graph's ``run`` metadata: whether runtime reads are folded (``graph/fold.py``)."""
    return {"runtime_reads": "keep" if keep_runtime_reads else "folded"}


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
        attributes=strings.clean(
            {
                "otel_bridge.run.id": run_id,
                "process.command_args": tuple(redact_argv(command)),
                "process.exit.code": code,
            }
        ),
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


def _upstream(endpoint: Endpoint | None) -> Upstream | None:
    if endpoint is None:
        return None
    host = "127.0.0.1" if endpoint.host in _WILDCARD_HOSTS else endpoint.host
    return Upstream(host=host, port=endpoint.port)


def start_mux(collector: Collector, receiver_id: str) -> ProtocolMux | None:
    """One loopback port in front of the receiver's gRPC and HTTP servers (None: neither)."""
    status = collector.status(receiver_id)
    grpc, http = _upstream(status.endpoint("grpc")), _upstream(status.endpoint("http"))
    if grpc is None and http is None:
        return None
    return ProtocolMux(grpc=grpc, http=http)


def _otlp_target(
    collector: Collector, receiver_id: str, mux: ProtocolMux | None, wanted: str
) -> tuple[str, str]:
    """The OTLP endpoint and protocol CMD is told.

    With the mux, CMD's exporter may speak either transport to the one endpoint; the protocol
    variable is the user's own choice when the receiver serves it, else ``http/protobuf``
    (``grpc`` when only gRPC is served).
    """
    status = collector.status(receiver_id)
    http, grpc = status.endpoint("http"), status.endpoint("grpc")
    served = ({"http/protobuf", "http/json"} if http else set()) | ({"grpc"} if grpc else set())
    protocol = wanted if wanted in served else "http/protobuf" if http else "grpc"
    if mux is not None:
        return mux.url, protocol
    if http is not None:
        return _client_url(http), "http/protobuf"
    if grpc is not None:
        return _client_url(grpc), "grpc"
    return "", "http/protobuf"


def workload_env(
    environ: Mapping[str, str], *, run_id: str, trace_id: bytes, span_id: bytes
) -> tuple[dict[str, str], str]:
    """CMD's environment without the user's OTLP destination, and the protocol they chose."""
    wanted = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", ""
    )
    env = {k: v for k, v in environ.items() if not k.startswith(_OTLP_VARS)}
    env.update(
        {
            "TRACEPARENT": f"00-{trace_id.hex()}-{span_id.hex()}-01",
            "OTEL_BRIDGE_RUN_ID": run_id,
        }
    )
    return env, wanted.strip() if wanted.strip() in _PROTOCOLS else ""


def group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` still exists."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def drain(workload: Workload, mux: ProtocolMux | None, telemetry: Telemetry) -> dict[str, Any]:
    """After CMD exits: wait for the rest of its process group, then for its OTLP connections.

    Event-driven where it can be: once no process of CMD's group is left, every connection it
    opened is closed by the kernel, and the mux reports idle as soon as the receiver has answered
    the last request. Without the mux (no OTLP endpoint), it waits for a quiet period instead.
    Bounded by ``_DRAIN_BOUND`` in all.
    """
    t0 = time.monotonic()
    deadline = t0 + _DRAIN_BOUND
    pause = 0.001
    while group_alive(workload.pid) and time.monotonic() < deadline:
        time.sleep(pause)  # no event for "the group is empty": back off from 1 ms to 20 ms
        pause = min(pause * 2, 0.02)
    group_left = group_alive(workload.pid)
    if mux is not None:
        idle = mux.wait_idle(max(0.0, deadline - time.monotonic()))
    else:
        wait_quiet(telemetry, bound=max(0.0, deadline - time.monotonic()))
        idle = True
    return {
        "seconds": round(time.monotonic() - t0, 4),
        "processes_left_running": group_left,
        "connections_left_open": not idle,
    }


def _command_of(args: argparse.Namespace) -> list[str]:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise OtelBridgeError("observe: no command given (usage: otel-bridge observe -- CMD ...)")
    return command


@dataclass(slots=True)
class _Run:
    """What one ``observe`` holds while CMD runs."""

    run_id: str
    run: rundir.RunDir
    command: list[str]
    wiring: Wiring
    collector: Collector
    forward: Forward | None
    mux: ProtocolMux | None = None
    drained: dict[str, Any] | None = None


def _prepare(args: argparse.Namespace) -> tuple[_Run, dict[str, str], str, bytes, bytes]:
    """The run directory, the collector (not started), CMD's environment and trace context."""
    command = _command_of(args)
    run_id = new_run_id()
    user = read_config(args.config) if args.config else None
    run = rundir.RunDir.create(
        args.output or os.path.join("otel-bridge-runs", run_id), replace=args.replace
    )
    forward = None if args.no_forward else forward_from_env(os.environ)
    overlay, wiring = build_overlay(
        run,
        run_id,
        backend=args.backend,
        user=user if isinstance(user, Mapping) else None,
        forward=forward,
        keep_runtime_reads=args.keep_runtime_reads,
        hash_files=getattr(args, "hash_files", False),
    )
    config = parse_config(user, overlay=overlay, origin=args.config or "<observe>")
    run.begin({"id": run_id})
    trace_id, span_id = secrets.token_bytes(16), secrets.token_bytes(8)
    env, wanted = workload_env(os.environ, run_id=run_id, trace_id=trace_id, span_id=span_id)
    collector = Collector(config)
    collector.host.run_dir = run.path
    state = _Run(run_id, run, command, wiring, collector, forward)
    return state, env, wanted, trace_id, span_id


def run(args: argparse.Namespace) -> int:
    """Observe ``args.command``; returns its exit code."""

    state, env, wanted, trace_id, span_id = _prepare(args)
    collector = state.collector
    telemetry = collector.host.telemetry
    started_ns = time.time_ns()
    workload = Workload(state.command, env)
    guard = rundir.WorkloadGuard(workload.pid)
    progress = Progress(telemetry, not args.no_progress)
    interrupted: list[int] = []
    live: LiveView | None = None
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def forward(signum: int, frame: object) -> None:
        del frame
        interrupted.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(workload.pid, signum)

    try:
        host = collector.component(state.wiring.host)
        if isinstance(host, RootSettable):
            host.set_root_pid(workload.pid)
        collector.start()
        state.mux = start_mux(collector, state.wiring.otlp)
        if getattr(args, "view", False):  # a Namespace built without the option
            from otel_bridge.viewer.live import attach as attach_view  # noqa: PLC0415 (opt-in)

            live = attach_view(
                collector, "graph/run", str(state.run.path), open=sys.stderr.isatty()
            )
        endpoint, protocol = _otlp_target(collector, state.wiring.otlp, state.mux, wanted)
        for s in previous:
            signal.signal(s, forward)
        workload.release(endpoint, protocol)
        progress.start()
        code = workload.exit_code()
        progress.stop()
        state.drained = drain(workload, state.mux, telemetry)
        root = _root_span(
            run_id=state.run_id,
            trace_id=trace_id,
            span_id=span_id,
            command=state.command,
            start=started_ns,
            code=code,
        )
        _record_root_span(collector, state.wiring.otlp, root)
    except BaseException:
        progress.stop()
        workload.terminate()
        guard.release()
        _stop(state)
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    guard.release()
    _stop(state)
    signals = [signal.Signals(s).name for s in interrupted]
    summary = _finish(state, code, started_ns, signals, review=_review_inputs(args))
    if live is not None:
        live.finish(summary)
    return code


def _stop(state: _Run) -> None:
    if state.mux is not None:
        state.mux.stop()
    state.collector.shutdown()


def _review_inputs(args: argparse.Namespace) -> ReviewInputs | None:
    """The review's inputs, or None with ``--no-review`` (a Namespace built without these
    options reviews with none)."""
    if getattr(args, "no_review", False):
        return None
    from otel_bridge.review.hook import ReviewInputs  # noqa: PLC0415 (only at the end)

    transcripts = tuple(os.path.abspath(t) for t in getattr(args, "review_transcript", None) or ())
    return ReviewInputs(transcripts=transcripts, model=getattr(args, "review_model", None))


def _finish(
    state: _Run, code: int, started_ns: int, signals: list[str], *, review: ReviewInputs | None
) -> dict[str, Any]:
    """Write summary.json, report.md, the review (unless told not to) and the manifest; print
    the summary and the report."""
    summary = _summary(state, code, started_ns=started_ns)
    summary["signals_forwarded"] = signals
    report = write_report(state.run, summary)
    state.run.write_json(rundir.SUMMARY, summary)
    if review is not None:
        from otel_bridge.review.hook import review_at_end  # noqa: PLC0415 (only at the end)

        review_at_end(state.run.path, inputs=review)
    state.run.write_manifest({"id": state.run_id}, required=rundir.REQUIRED)
    print_summary(state.run, summary, report)
    return summary


def _summary(state: _Run, code: int, *, started_ns: int) -> dict[str, Any]:
    collector = state.collector
    telemetry = collector.host.telemetry
    host = collector.status(state.wiring.host)
    return {
        "run": {
            "id": state.run_id,
            "host.id": host_id(),
            "started": started_ns,
            "ended": time.time_ns(),
        },
        "command": [strings.replaced(a) for a in redact_argv(state.command)],
        "command_line": strings.replaced(shlex.join(redact_argv(state.command))),
        "exit_code": code,
        "host_backend": host.detail,
        "host_backend_name": host.backend,
        "collection": dict(host.collections),
        # The run's own correlator only: with -c the user's pipelines may run another one.
        "correlation": run_correlation(collector),
        "otlp": otlp_summary(telemetry, state.mux, recorded=recorded_spans(telemetry)),
        "os_events": telemetry.total("events_emitted", kind=RECEIVER, type="host"),
        "drain": state.drained,
        "forward": None if state.forward is None else forward_summary(state.forward, telemetry),
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
