"""The body of ``otel-bridge observe`` (the command's front is :mod:`.observe`).

Imported by the front once the command runs (armed) or right away (not armable): it builds the
collector with the same loader and pipeline builder as ``run`` (``-c FILE`` is read like
``validate`` reads it, and the run's wiring is a typed overlay the loader applies,
:func:`build_overlay`), hands the host receiver its root pid (and the armed kernel sources),
starts it, puts the protocol mux in front of the OTLP receiver's servers, waits for the command,
drains, and writes the run directory. It reads the components only through the protocols of
:mod:`otel_bridge.component` and :mod:`otel_bridge.arming` and the typed counter reads.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import io
import os
import secrets
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from otel_bridge import rundir, strings
from otel_bridge.arming import Armable
from otel_bridge.commands.observe import Early, Workload, new_run_id, workload_env
from otel_bridge.commands.observe_report import (
    delivery_summary,
    otlp_summary,
    print_summary,
    write_report,
)
from otel_bridge.component import (
    EXPORTER,
    PROCESSOR,
    RECEIVER,
    Endpoint,
    Forwarding,
    Relay,
    RootConfigured,
    RootSettable,
    Telemetry,
)
from otel_bridge.config import (
    CollectorConfig,
    ComponentAddition,
    ConfigOverlay,
    PipelineAddition,
    component_ids,
    parse_config,
    read_config,
)
from otel_bridge.errors import OtelBridgeError
from otel_bridge.identity import WILDCARD_HOSTS, host_id
from otel_bridge.launch import Guard
from otel_bridge.model import Batch, Resource, Scope, Span, SpanKind, Status, StatusCode
from otel_bridge.otlp.mux import GrpcOnDemand, GrpcUpstream, ProtocolMux, Upstream
from otel_bridge.pipeline import Collector
from otel_bridge.redaction import redact_argv

if TYPE_CHECKING:
    from otel_bridge.review.hook import ReviewInputs
    from otel_bridge.viewer.live import LiveView

_LAST_SPANS_WAIT = 0.2
"""Without the mux: after CMD exits, wait until no span arrived for this long (at most 3 s)."""
_DRAIN_BOUND = 3.0
"""After CMD exits, wait at most this long for its process group and its OTLP connections."""
_RUN_PIPELINE = "evidence/run"


RUN_COMPONENTS: tuple[tuple[str, str], ...] = (
    (RECEIVER, "otlp"),
    (RECEIVER, "host"),
    (PROCESSOR, "redact"),
    (PROCESSOR, "normalize"),
    (PROCESSOR, "correlate"),
    (PROCESSOR, "grade"),
    (EXPORTER, "graph"),
    (EXPORTER, "file"),
)
"""``(kind, type)`` of every component :func:`build_overlay` adds to any run (without ``-c``, the
whole collector): :func:`warm` imports their modules ahead of the build."""


def warm() -> None:
    """Import the modules the build will need (this module's own imports are done by now), so
    that building the collector after the gate opens is wiring, not importing. Called by the
    front in a background thread while it arms (:func:`otel_bridge.commands.observe.run`);
    a module that cannot be imported is left for the build, which reports it."""
    from otel_bridge.registry import BUILTIN_TYPES  # noqa: PLC0415

    for key in RUN_COMPONENTS:
        try:
            importlib.import_module(BUILTIN_TYPES[key])
        except ImportError:
            return


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


RUN_QUEUE_DIR = rundir.QUEUE_DIR
"""The run directory's subdirectory holding the persistent queues of a ``-c`` file's exporters."""
_SECTIONS = (("receivers", RECEIVER), ("processors", PROCESSOR), ("exporters", EXPORTER))


def durable_state_in_run(
    user: Mapping[str, Any] | None, run: rundir.RunDir
) -> list[ComponentAddition]:
    """The ``-c`` file's on-disk state (journals, persistent queues, spill files), moved into
    the run directory.

    A configuration written for a standing collector (the bundled ones) keeps a graph journal
    and its OTLP exporters' persistent queues at that collector's paths. Under ``observe`` they
    would replay the standing collector's state into this run, or be locked by it; so each
    component whose factory names its durable state (``Factory.durable_state``: the graph
    exporter's journal and spill file, the OTLP exporters' queues, enrich's journal, and any
    third-party component's) has it placed in the run directory, the other settings kept (the
    journals and queues create their files owner-only and open them with ``O_NOFOLLOW``).
    """
    if not user:
        return []
    from otel_bridge.registry import default_registry  # noqa: PLC0415 (with -c only)

    out: list[ComponentAddition] = []
    registry = default_registry()
    for section, kind in _SECTIONS:
        components = user.get(section)
        if not isinstance(components, Mapping):
            continue
        for key, settings in components.items():
            type_name, _, name = str(key).partition("/")
            factory = registry.get(kind, type_name) if isinstance(settings, Mapping) else None
            if factory is None or factory.durable_state is None:
                continue
            moved = factory.durable_state(settings, run.file, name)
            if moved:
                out.append(ComponentAddition(section=section, id=str(key), settings=moved))
    return out


def _graph_run(keep_runtime_reads: bool) -> dict[str, str]:
    """The graph's ``run`` metadata: whether runtime reads are folded (``graph/fold.py``)."""
    return {"runtime_reads": "keep" if keep_runtime_reads else "folded"}


def _root_span(
    *,
    run_id: str,
    trace_id: bytes,
    span_id: bytes,
    command: list[str],
    start: int,
    code: int,
    observer_pid: int,
) -> Span:

    return Span(
        resource=Resource(
            attributes={
                "service.name": "otel-bridge",
                "otel_bridge.run.id": run_id,
                "host.id": host_id(),
                "process.pid": observer_pid,
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
        while True:  # drawn once at least: CMD may be done by the time the collector is up
            sys.stderr.write(f"\r\x1b[2Kotel-bridge: {self.line()}")
            sys.stderr.flush()
            if self._stop.wait(0.25):
                return

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
    if endpoint.host in WILDCARD_HOSTS:
        return f"http://127.0.0.1:{endpoint.port}"
    return endpoint.url


def _upstream(endpoint: Endpoint | None) -> Upstream | None:
    if endpoint is None:
        return None
    host = "127.0.0.1" if endpoint.host in WILDCARD_HOSTS else endpoint.host
    return Upstream(host=host, port=endpoint.port)


def start_mux(
    collector: Collector,
    receiver_id: str,
    listener: socket.socket | None = None,
    on_demand: GrpcOnDemand | None = None,
) -> ProtocolMux | None:
    """One loopback port in front of the receiver's gRPC and HTTP servers (None: neither);
    ``listener``: the socket bound before the command ran (armed), else a new one;
    ``on_demand``: the receiver, when its gRPC server was deferred (started by the mux at the
    first HTTP/2 connection)."""
    status = collector.status(receiver_id)
    grpc: GrpcUpstream = _upstream(status.endpoint("grpc"))
    http = _upstream(status.endpoint("http"))
    if grpc is None and on_demand is not None:
        if http is None:  # gRPC only: nothing to defer for
            grpc = _started_grpc(on_demand)
        else:
            grpc = functools.partial(_started_grpc, on_demand)
    if grpc is None and http is None:
        if listener is not None:
            listener.close()
        return None
    return ProtocolMux(grpc=grpc, http=http, listener=listener)


def _started_grpc(receiver: GrpcOnDemand) -> Upstream | None:
    """Start the receiver's deferred gRPC server; where the mux relays to."""
    bound = receiver.start_grpc()
    if bound is None:
        return None
    host = "127.0.0.1" if bound[0] in WILDCARD_HOSTS else bound[0]
    return Upstream(host=host, port=bound[1])


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
    grpc_served = grpc is not None or (mux is not None and mux.serves("grpc"))
    served = ({"http/protobuf", "http/json"} if http else set()) | (
        {"grpc"} if grpc_served else set()
    )
    protocol = wanted if wanted in served else "http/protobuf" if http else "grpc"
    if mux is not None:
        return mux.url, protocol
    if http is not None:
        return _client_url(http), "http/protobuf"
    if grpc is not None:
        return _client_url(grpc), "grpc"
    return "", "http/protobuf"


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


@dataclass(slots=True)
class _Run:
    """What one ``observe`` holds while CMD runs."""

    run_id: str
    run: rundir.RunDir
    command: list[str]
    wiring: Wiring
    collector: Collector
    forward: Mapping[str, str] | None
    """The environment whose ``OTEL_EXPORTER_OTLP_*`` variables name the user's own
    destination; None under ``--no-forward``."""
    mux: ProtocolMux | None = None
    relay: Relay | None = None
    """Sends what CMD exports to the user's own destination (``forward``), from the start."""
    drained: dict[str, Any] | None = None
    armed: bool = False
    """The command ran once its sources were armed, before the collector was built."""
    start_path: dict[str, str] | None = None
    """Which ``observe`` ran it: ``{"server": "warm"}``, or ``"cold"`` and why no warm server
    was used (``otel_bridge.warm``)."""


def _prepare(
    args: argparse.Namespace, command: list[str], early: Early | None
) -> tuple[_Run, Early]:
    """The collector (not started) and, unless the front prepared them (``early``), the run
    directory and CMD behind its gate (the configuration is validated before the run directory
    is created, and the collector built before CMD starts: a bad configuration leaves nothing
    behind)."""
    run_id = early.run_id if early is not None else new_run_id()
    path = early.run.path if early is not None else run_path(args, run_id)
    config, wiring = configure(args, run_id, path)
    run = early.run if early is not None else rundir.RunDir.create(path, replace=args.replace)
    try:
        return _build(args, command, early, (run, run_id), (config, wiring))
    except BaseException:
        if early is None:  # CMD was not started: nothing of the run is left
            run.discard()
        raise


def _build(
    args: argparse.Namespace,
    command: list[str],
    early: Early | None,
    run_of: tuple[rundir.RunDir, str],
    configured: tuple[CollectorConfig, Wiring],
) -> tuple[_Run, Early]:
    """:func:`_prepare`'s collector, and CMD behind its gate when the front did not start it."""
    (run, run_id), (config, wiring) = run_of, configured
    forward = None if args.no_forward or not _names_destination(os.environ) else dict(os.environ)
    if early is None:
        run.begin({"id": run_id})
    collector = Collector(config)
    collector.host.run_dir = run.path
    state = _Run(run_id, run, command, wiring, collector, forward)
    state.start_path = getattr(args, "start_path", None) or {"server": "cold"}
    if early is None:
        trace_id, span_id = secrets.token_bytes(16), secrets.token_bytes(8)
        env, wanted = workload_env(os.environ, run_id=run_id, trace_id=trace_id, span_id=span_id)
        started_ns = time.time_ns()
        workload = Workload(command, env)
        guard = Guard(workload.pid)
        early = Early(run_id, run, wanted, trace_id, span_id, started_ns, workload, guard)
    return state, early


def run_path(args: argparse.Namespace, run_id: str) -> str:
    """The run directory's absolute path: ``-o DIR``, else ``otel-bridge-runs/<run id>``."""
    return os.path.abspath(args.output or os.path.join("otel-bridge-runs", run_id))


def configure(args: argparse.Namespace, run_id: str, path: str) -> tuple[CollectorConfig, Wiring]:
    """The run's validated configuration (``-c FILE``, ``--set`` and the run's overlay for the
    run directory at ``path``, which need not exist yet) and its wiring; ConfigError, or
    OtelBridgeError for a host receiver given a ``root_pid`` (:func:`refuse_root_pid`)."""
    read = read_config(args.config) if args.config else None
    user = read if isinstance(read, Mapping) else None
    overlay, wiring = build_overlay(
        rundir.RunDir(path),
        run_id,
        backend=args.backend,
        user=user,
        keep_runtime_reads=args.keep_runtime_reads,
        hash_files=getattr(args, "hash_files", False),
    )
    config = parse_config(read, overlay=overlay, origin=args.config or "<observe>")
    refuse_root_pid(config, wiring.host, user, args.config)
    return config, wiring


def refuse_root_pid(
    config: CollectorConfig, host: str, user: Mapping[str, Any] | None, origin: str | None
) -> None:
    """Refuse a host receiver given a ``root_pid`` (``--set`` or the ``-c`` file): ``observe``
    roots it at the command it starts, so that setting would be silently ignored."""
    component = config.receivers.get(host)
    settings = component.config if component else None
    if not isinstance(settings, RootConfigured) or not settings.root_pid:
        return
    stated = ((user or {}).get("receivers") or {}).get(host)
    where = f"in {origin}" if isinstance(stated, Mapping) and "root_pid" in stated else "by --set"
    raise OtelBridgeError(
        f"observe: receivers.{host}.root_pid is set ({where}): observe follows the command it "
        "starts; use 'otel-bridge run' with root_pid to follow another process"
    )


_ENDPOINT_VARIABLES = tuple(
    f"OTEL_EXPORTER_OTLP_{signal}ENDPOINT" for signal in ("", "TRACES_", "METRICS_", "LOGS_")
)


def _names_destination(env: Mapping[str, str]) -> bool:
    """Whether ``env`` names an OTLP destination of the user's (the relay reads the rest): a
    command run without one imports no exporter, gRPC or protobuf."""
    return any(env.get(name, "").strip() for name in _ENDPOINT_VARIABLES)


def _relay(env: Mapping[str, str], telemetry: Telemetry) -> Relay | None:
    """The ``otlp`` exporter's relay to the destinations ``env`` names (None: no destination, or
    no exporter that relays is registered)."""
    from otel_bridge.registry import default_registry  # noqa: PLC0415

    factory = default_registry().get(EXPORTER, "otlp")
    if factory is None or factory.relay is None:
        return None
    return factory.relay(env, telemetry)


def _start(state: _Run, early: Early) -> None:
    """Root the host receiver at CMD (handing it the armed sources), start the collector and
    the mux (on the armed listener)."""
    collector = state.collector
    host = collector.component(state.wiring.host)
    if isinstance(host, RootSettable):
        host.set_root_pid(early.workload.pid)
    if early.armed is not None and isinstance(host, Armable):
        host.set_armed(early.armed)
        early.armed = None
        state.armed = True
    elif early.armed is not None:
        collector.host.telemetry.note(
            "observe.armed",
            "the host receiver could not adopt the sources armed for the command: what it did "
            "before the collector started is unknown",
        )
    listener, early.listener = early.listener, None
    early.close_armed()
    otlp = collector.component(state.wiring.otlp)
    if state.forward is not None and isinstance(otlp, Forwarding):
        state.relay = _relay(state.forward, collector.host.telemetry)
        if state.relay is not None:
            otlp.set_forward(state.relay)
    on_demand = otlp if isinstance(otlp, GrpcOnDemand) else None
    if on_demand is not None:
        on_demand.defer_grpc()  # gRPC is imported only for a command that uses it
    try:
        collector.start()
    except BaseException:
        if listener is not None:
            listener.close()
        raise
    state.mux = start_mux(collector, state.wiring.otlp, listener, on_demand)


def observe(args: argparse.Namespace, command: list[str], early: Early | None) -> int:
    """Observe ``command`` (the front's ``early`` preparation, if any); its exit code."""
    try:
        state, early = _prepare(args, command, early)
    except BaseException:
        if early is not None:
            early.abandon()
            _leave(early.run, early)
        raise
    collector = state.collector
    telemetry = collector.host.telemetry
    workload = early.workload
    progress = Progress(telemetry, not args.no_progress)
    live: LiveView | None = None
    try:
        _start(state, early)
        if getattr(args, "view", False):  # a Namespace built without the option
            from otel_bridge.viewer.live import attach as attach_view  # noqa: PLC0415 (opt-in)

            live = attach_view(
                collector, "graph/run", str(state.run.path), open=sys.stderr.isatty()
            )
        early.forward_signals()
        _preload_end_of_run(review=not getattr(args, "no_review", False))
        if not workload.released:
            workload.release(*_otlp_target(collector, state.wiring.otlp, state.mux, early.wanted))
        progress.start()
        code = workload.exit_code()
        progress.stop()
        state.drained = drain(workload, state.mux, telemetry)
        root = _root_span_of(state, early, code)
        _record_root_span(collector, state.wiring.otlp, root)
        if state.relay is not None:
            state.relay.send_root_span(root)
    except BaseException:
        progress.stop()
        early.abandon()
        _stop(state)
        _leave(state.run, early)
        raise
    finally:
        early.restore_signals()
    early.guard.release()
    _stop(state)
    signals = [signal.Signals(s).name for s in early.interrupted]
    summary = _finish(
        state,
        code,
        early.started_ns,
        signals,
        review=_review_inputs(args),
        verbose=bool(getattr(args, "verbose", False)),
    )
    if live is not None:
        live.finish(summary)
    return code


def _leave(run: rundir.RunDir, early: Early) -> None:
    """What a run that failed leaves: nothing when CMD never ran (the gate stayed shut: the
    run directory's contents and the directories made for it are removed); else the run
    directory, with what was recorded until then, and a line saying where."""
    if not early.workload.released:
        run.discard()
        return
    print(
        f"otel-bridge: observe: the run stopped before its end; {run.path} keeps what was "
        "recorded until then (verify reports it incomplete)",
        file=sys.stderr,
    )


_END_OF_RUN = ("otel_bridge.report", "otel_bridge.commands.observe_report")
_REVIEW = "otel_bridge.review.hook"


def _preload_end_of_run(*, review: bool) -> None:
    """Import what the end of the run needs (report, review) in the background while CMD runs,
    so CMD's exit is not followed by those imports (an import already under way in this thread
    is simply waited for by the end of the run). Nothing to import (a warm server's run, whose
    server imported them all): no thread."""
    names = (*_END_OF_RUN, *((_REVIEW,) if review else ()))
    if all(name in sys.modules for name in names):
        return

    def load() -> None:
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError:  # the end of the run reports it where it imports it
                return

    threading.Thread(target=load, name="observe-preload", daemon=True).start()


def _root_span_of(state: _Run, early: Early, code: int) -> Span:
    return _root_span(
        run_id=state.run_id,
        trace_id=early.trace_id,
        span_id=early.span_id,
        command=state.command,
        start=early.started_ns,
        code=code,
        observer_pid=early.observer_pid,
    )


def _stop(state: _Run) -> None:
    if state.mux is not None:
        state.mux.stop()
    state.collector.shutdown()
    if state.relay is not None:  # the receiver has stopped: nothing more comes
        state.relay.shutdown()


def _review_inputs(args: argparse.Namespace) -> ReviewInputs | None:
    """The review's inputs, or None with ``--no-review`` (a Namespace built without these
    options reviews with none)."""
    if getattr(args, "no_review", False):
        return None
    from otel_bridge.review.hook import ReviewInputs  # noqa: PLC0415 (only at the end)

    transcripts = tuple(os.path.abspath(t) for t in getattr(args, "review_transcript", None) or ())
    return ReviewInputs(transcripts=transcripts, model=getattr(args, "review_model", None))


def _finish(
    state: _Run,
    code: int,
    started_ns: int,
    signals: list[str],
    *,
    review: ReviewInputs | None,
    verbose: bool = False,
) -> dict[str, Any]:
    """Write summary.json, report.md, the review (unless told not to) and the manifest; print
    the summary and the report."""
    summary = _summary(state, code, started_ns=started_ns)
    summary["signals_forwarded"] = signals
    report, printed = write_report(state.run, summary)
    state.run.write_json(rundir.SUMMARY, summary)
    reviewed = io.StringIO()  # said after the report, on stderr (stdout is the command's)
    if review is not None:
        from otel_bridge.review.hook import review_at_end  # noqa: PLC0415 (only at the end)

        review_at_end(state.run.path, out=reviewed, inputs=review, brief=not verbose)
    state.run.write_manifest(
        {"id": state.run_id}, required=rundir.REQUIRED, mutable=(RUN_QUEUE_DIR,)
    )
    print_summary(state.run, summary, report if verbose else printed, verbose=verbose)
    if reviewed.getvalue():
        sys.stderr.write(f"\n## Review (review.md)\n\n{reviewed.getvalue()}")
        sys.stderr.flush()
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
        "host_backends_skipped": list(host.skipped),
        "collection": dict(host.collections),
        "collection_brief": dict(host.briefs),
        "collector_endpoints": collector_endpoints(collector, state.mux),
        # The run's own correlator only: with -c the user's pipelines may run another one.
        "correlation": run_correlation(collector),
        "otlp": otlp_summary(
            telemetry, state.mux, recorded=recorded_spans(telemetry), exit_code=code
        ),
        "os_events": telemetry.total("events_emitted", kind=RECEIVER, type="host"),
        "drain": state.drained,
        "start": {"armed": state.armed, **(state.start_path or {})},
        "forward": None if state.relay is None else state.relay.summary(),
        "delivery": delivery_summary(collector),
        "counters": telemetry.counters(),
        "notes": telemetry.notes(),
    }


def collector_endpoints(collector: Collector, mux: ProtocolMux | None) -> list[dict[str, Any]]:
    """Where this run's collector listened: the one OTLP endpoint CMD was given (the mux,
    ``role: observe``) and every receiver's bound endpoint (``role: receiver``). A connection
    of CMD's lineage to one of them is CMD exporting its telemetry to observe, not an endpoint
    CMD chose: ``compare`` leaves them out of the agent's endpoints (``docs/rundir.md``)."""
    out: list[dict[str, Any]] = []
    if mux is not None:
        out.append({"role": "observe", "protocol": "otlp", "address": mux.host, "port": mux.port})
    for rid in collector.component_ids(RECEIVER):
        for e in collector.status(rid).endpoints:
            out.append(
                {"role": "receiver", "receiver": rid, "protocol": e.protocol,
                 "address": e.host, "port": e.port}
            )  # fmt: skip
    return out


def run_correlation(collector: Collector) -> dict[str, int]:
    """Outcome counts of the processors of the run's own evidence pipeline (its correlator)."""
    out: dict[str, int] = {}
    for status in collector.pipeline_statuses(_RUN_PIPELINE):
        for k, v in status.outcomes.items():
            if v:
                out[k] = out.get(k, 0) + v
    return out
