"""``otel-bridge observe [-c FILE] [-o DIR] [--backend B] -- CMD ...``: observe one command.

Start-up without a blind window: CMD is launched behind a gate (``sh`` blocked reading a FIFO)
so its pid is known before anything runs. If the collector fails at any point, the workload's
process group is terminated, never orphaned. The exit code is CMD's (128+N when killed by
signal N). ``docs/observe.md`` is the contract.

**Arm first, build later.** CMD may run as soon as its observation is *armed*: the ``linux``
backend's kernel sources are attached to the gated pid (:func:`otel_bridge.arming.arm_linux`:
process connector, exec image helper, fanotify groups) and the OTLP endpoint's listening socket
is bound (the kernel's backlog holds an early client's connection). Then the gate opens, and
only then is the collector imported, built and started (:mod:`.observe_run`) on the other
core, adopting the armed sources: what the kernel reported meanwhile is read from their queues
in order, so nothing is lost or labelled late. This module therefore imports the standard
library, :mod:`otel_bridge.rundir`, :mod:`otel_bridge.launch` (the gate's script, CMD's
environment, the run id), :mod:`.observe_options` (the options' table) and
:mod:`otel_bridge.arming` only. A warm ``observe`` does not import it at all: the command line
hands the command to :mod:`otel_bridge.warm` first. Arming applies when the
run's host receiver is the bundled one on the ``linux`` backend (no ``-c``, no ``--set``;
``--backend`` unset, ``auto`` or ``linux``; root). Otherwise, or when arming fails, the
collector is built and started first and the gate opens after it (the order every backend
supports).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from otel_bridge import rundir
from otel_bridge.commands.observe_options import APPEND, FLAG, OPTIONS
from otel_bridge.errors import OtelBridgeError, require_readable
from otel_bridge.launch import (
    Guard,
    exit_code,
    new_run_id,
    open_gate,
    spawn_gate,
    terminate_group,
    workload_env,
)

if TYPE_CHECKING:
    import socket

    from otel_bridge.arming import ArmedHost
    from otel_bridge.commands.observe_run import (
        RUN_QUEUE_DIR,
        Progress,
        Wiring,
        build_overlay,
        durable_state_in_run,
    )

_BODY = ("RUN_QUEUE_DIR", "Progress", "Wiring", "build_overlay", "durable_state_in_run")
"""Names of the run's body (:mod:`.observe_run`) this module offers, imported on first use."""

__all__ = [
    "RUN_QUEUE_DIR",
    "Early",
    "Progress",
    "Wiring",
    "Workload",
    "build_overlay",
    "durable_state_in_run",
    "new_run_id",
    "register",
    "run",
    "workload_env",
]

_ARMABLE_BACKENDS = (None, "auto", "linux")


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
    for option in OPTIONS:  # one table, which the warm client reads too
        settings: dict[str, Any] = {"help": option.help}
        if option.kind == FLAG:
            settings["action"] = "store_true"
        elif option.kind == APPEND:
            settings.update(action="append", default=[])
        if option.metavar is not None:
            settings["metavar"] = option.metavar
        if option.choices is not None:
            settings["choices"] = option.choices
        parser.add_argument(*option.flags, **settings)
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...")
    # the run directory is complete and closed when run() returns: the process may end at once
    parser.set_defaults(func=run, exit_when_done=True)


class Workload:
    """CMD launched behind a gate in its own process group (see the module docstring).

    The gate is ``sh`` reading one line from a FIFO in a private temporary directory (a FIFO,
    not an inherited descriptor: ``dash`` cannot redirect descriptors above 9).
    """

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self._dir = tempfile.mkdtemp(prefix="otel-bridge-gate-")
        self._fifo = os.path.join(self._dir, "gate")
        try:
            self.pid = spawn_gate(command, env, self._fifo)
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.released = False
        self.gate_opened_ns = 0
        """When the gate was open (:func:`otel_bridge.launch.open_gate`), 0 before."""

    def release(self, endpoint: str, protocol: str) -> None:
        """Open the gate: CMD runs with the OTLP endpoint and protocol variables set."""
        self.gate_opened_ns = open_gate(self._fifo, endpoint, protocol)
        shutil.rmtree(self._dir, ignore_errors=True)
        self.released = True

    def terminate(self) -> None:
        """Terminate the whole process group (SIGTERM, then SIGKILL after 3 s) and reap CMD."""
        shutil.rmtree(self._dir, ignore_errors=True)
        terminate_group(self.pid)

    def exit_code(self) -> int:
        """CMD's exit code, 128+N when killed by signal N."""
        return exit_code(self.pid)


def command_of(args: argparse.Namespace) -> list[str]:
    """CMD from the command line; refuses an empty one."""
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise OtelBridgeError("observe: no command given (usage: otel-bridge observe -- CMD ...)")
    return command


@dataclass(slots=True)
class Early:
    """What the front prepared before the collector exists: the run's ids and directory, CMD
    behind its gate (and its guard), and, when armed, the host sources and the OTLP listener
    (the gate is then open already)."""

    run_id: str
    run: rundir.RunDir
    wanted: str
    trace_id: bytes
    span_id: bytes
    started_ns: int
    workload: Workload
    guard: Guard
    armed: ArmedHost | None = None
    listener: socket.socket | None = None
    interrupted: list[int] = field(default_factory=list)
    """SIGINT/SIGTERM received (and passed on to CMD's process group), in order."""
    observer_pid: int = field(default_factory=os.getpid)
    """The ``observe`` process the user started (the run's root span names it): this one, or
    the warm server's client (``otel_bridge.warm``)."""
    _previous: dict[int, Any] = field(default_factory=dict)

    def forward_signals(self) -> None:
        """From now on SIGINT and SIGTERM go to CMD's process group (observe carries on, and
        ends when CMD does). Before the gate opens. Safe twice."""
        if self._previous:
            return

        def forward(signum: int, frame: object) -> None:
            del frame
            self.interrupted.append(signum)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.workload.pid, signum)

        for s in (signal.SIGINT, signal.SIGTERM):
            self._previous[s] = signal.signal(s, forward)

    def restore_signals(self) -> None:
        """The handlers :meth:`forward_signals` replaced. Safe twice."""
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def abandon(self) -> None:
        """The run cannot go on: terminate CMD's group and release what was armed."""
        self.restore_signals()
        self.workload.terminate()
        self.guard.release()
        self.close_armed()

    def close_armed(self) -> None:
        """Release the armed sources and the listener nobody adopted. Safe twice."""
        if self.armed is not None:
            self.armed.close()
            self.armed = None
        if self.listener is not None:
            self.listener.close()
            self.listener = None


def armable(args: argparse.Namespace) -> bool:
    """Whether this run's host receiver is the bundled one on the ``linux`` backend (no
    ``-c`` file and no ``--set`` override could change it)."""
    return (
        not args.config
        and not getattr(args, "set", None)
        and not getattr(args, "hash_files", False)  # content capture reads fanotify's own fds
        and getattr(args, "backend", None) in _ARMABLE_BACKENDS
        and sys.platform == "linux"
        and os.geteuid() == 0
    )


def start_early(args: argparse.Namespace, command: list[str], warm: Warm | None = None) -> Early:
    """The run directory and CMD behind its gate; then arm and open the gate when it can
    (``warm``: started while the front waits for the exec image helper)."""
    run_id = new_run_id()
    run_dir = rundir.RunDir.create(
        args.output or os.path.join("otel-bridge-runs", run_id), replace=args.replace
    )
    run_dir.begin({"id": run_id})  # killed from now on, the directory says "incomplete"
    trace_id, span_id = secrets.token_bytes(16), secrets.token_bytes(8)
    env, wanted = workload_env(os.environ, run_id=run_id, trace_id=trace_id, span_id=span_id)
    started_ns = time.time_ns()
    try:
        workload = Workload(command, env)
    except BaseException:
        run_dir.discard()  # nothing ran: nothing of the run is left
        raise
    early = Early(
        run_id, run_dir, wanted, trace_id, span_id, started_ns, workload,
        Guard(workload.pid),
    )  # fmt: skip
    try:
        arm(early, warm)
    except BaseException:
        early.abandon()
        if not workload.released:
            run_dir.discard()
        raise
    return early


def arm(
    early: Early, warm: Warm | None = None, helper: subprocess.Popen[bytes] | None = None
) -> None:
    """Attach the host sources and bind the OTLP endpoint, then open the gate; leaves the gate
    shut when a source cannot be attached (the collector is then built first). ``helper``: an
    exec image helper started ahead (the warm server's)."""
    from otel_bridge.arming import arm_linux  # noqa: PLC0415 (only for an armable run)
    from otel_bridge.otlp.mux import listen  # noqa: PLC0415

    try:
        armed = early.armed = arm_linux(
            early.workload.pid, waiting=None if warm is None else warm.start, helper=helper
        )
    except (OSError, OtelBridgeError):
        return
    early.listener = listen()
    host, port = early.listener.getsockname()[:2]
    early.forward_signals()
    # the bundled OTLP receiver serves gRPC and HTTP behind the mux: the user's choice stands
    early.workload.release(f"http://{host}:{port}", early.wanted or "http/protobuf")
    armed.gate_opened_ns = early.workload.gate_opened_ns  # the gate's own exec came before


def run(args: argparse.Namespace) -> int:
    """Observe ``args.command``; returns its exit code. Through this user's warm server when
    one is listening (``otel_bridge.warm``), else cold; ``--warm-server`` starts that server.
    The command line has usually tried the warm server already (``args.start_path`` then says
    why it did not run the command, ``otel_bridge.cli``)."""
    if getattr(args, "warm_server", False):
        from otel_bridge.warm_server import serve  # noqa: PLC0415

        return serve()
    command = command_of(args)
    for path in getattr(args, "review_transcript", None) or ():  # before CMD runs
        require_readable(path, "--review-transcript")
    if getattr(args, "start_path", None) is None:
        from otel_bridge import warm  # noqa: PLC0415 (the warm client)

        options = {k: v for k, v in vars(args).items() if not callable(v)}
        if warm.enabled(options, os.environ):
            outcome = warm.run_client(options, command)
            if isinstance(outcome, int):
                return outcome
            args.start_path = outcome
        else:
            args.start_path = {"server": "cold", "warm_unavailable": "turned off"}
    early = None
    if armable(args):
        warm_imports = Warm()
        try:
            early = start_early(args, command, warm_imports)
        finally:
            warm_imports.join()
    try:
        from otel_bridge.commands.observe_run import observe  # noqa: PLC0415 (after arming)
    except BaseException:
        if early is not None:
            early.abandon()
        raise
    return observe(args, command, early)


_WARM_SWITCH_INTERVAL = 0.0005
"""The interpreter's thread switch interval while :class:`Warm`'s thread runs beside the front:
the front's thread gets the interpreter back within 0.5 ms after each system call (the default
5 ms would be paid at each of them)."""


class Warm:
    """Imports the collector's modules in a background thread while the front waits for the
    exec image helper to start (:func:`otel_bridge.arming.arm_linux`'s ``waiting``), so that
    what the build imports after the gate opened (and therefore after a short command's exit)
    is only what is left. :meth:`join` is called before the front imports anything itself: no
    module is ever imported by two threads at once."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._interval = sys.getswitchinterval()

    def start(self) -> None:
        """Start importing (once)."""
        if self._thread is not None:
            return
        sys.setswitchinterval(_WARM_SWITCH_INTERVAL)
        self._thread = threading.Thread(target=self._load, name="observe-warm", daemon=True)
        self._thread.start()

    @staticmethod
    def _load() -> None:
        try:
            importlib.import_module("otel_bridge.commands.observe_run").warm()
        except Exception:  # the build imports it again and reports it there
            return

    def join(self) -> None:
        """Wait for the imports (none started: nothing to wait for). Safe twice."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            sys.setswitchinterval(self._interval)


def __getattr__(name: str) -> Any:
    """Names of the run's body, imported when first used (this module stays light)."""
    if name in _BODY:
        from otel_bridge.commands import observe_run  # noqa: PLC0415

        return getattr(observe_run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
