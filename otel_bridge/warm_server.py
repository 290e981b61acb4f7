"""The warm observe server: ``observe``'s imports paid once, not per run.

``otel-bridge observe --warm-server`` imports everything an ``observe`` run needs
(:data:`PRELOAD`), binds a Unix socket in a directory only its user can enter
(:func:`otel_bridge.warm.socket_dir`), and serves each request in a child it forks (no thread
exists when it forks: :func:`single_threaded` is checked before each fork). The client, the
protocol and the socket's place are :mod:`otel_bridge.warm`.

The warm child gets the client's standard streams (``SCM_RIGHTS``), working directory, umask,
environment and ``--set`` overrides, creates the run directory, arms the host sources on CMD's
pid, opens the gate and runs the same body as a cold ``observe``
(:mod:`otel_bridge.commands.observe_run`) with a :class:`RemoteWorkload`: CMD's exit status
comes from the client over the socket. ``docs/observe.md`` ("The warm server") is the contract.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from otel_bridge import rundir
from otel_bridge.commands.observe import Workload
from otel_bridge.errors import OtelBridgeError
from otel_bridge.launch import Guard, open_gate
from otel_bridge.warm import (
    SOCKET_NAME,
    WarmUnavailableError,
    check_private_dir,
    identity,
    peer_uid,
    receive,
    send,
    socket_dir,
)

if TYPE_CHECKING:
    from otel_bridge.commands.observe import Early

_REAP_INTERVAL = 0.1
"""The server reaps its ended children (runs, spare helpers) this often while idle."""

PRELOAD: tuple[str, ...] = (
    "otel_bridge.commands.observe_run",
    "otel_bridge.exporters.otlp.relay",
    "otel_bridge.commands.observe_report",
    "otel_bridge.otlp.mux",
    "otel_bridge.otlp.json_codec",
    "otel_bridge.otlp.proto_codec",
    "otel_bridge.receivers.host.linux",
    "otel_bridge.receivers.host.fanotify",
    "otel_bridge.receivers.host.execreader",
    "otel_bridge.receivers.host.perftrace",
    "otel_bridge.receivers.host.socktrace",
    "otel_bridge.receivers.host.sockdiag",
    "otel_bridge.receivers.host.netscan",
    "otel_bridge.graph.fold",
    "otel_bridge.report",
    "otel_bridge.review.hook",
    "otel_bridge.importers.sessions",
    "otel_bridge.importers.codingagents",
    "encodings.idna",
    "encodings.ascii",
)
"""Modules the server imports before serving (with what they import, and the components of
every run, ``observe_run.warm``): what a cold ``observe`` of the bundled configuration imports
on its way, including what its end imports (the review's session importers) and the codec
an address lookup needs (``socket.getaddrinfo`` of a ``str`` host: the mux's connection to the
receiver, at the command's first OTLP connection). gRPC is not among them: its runtime is
started at the first HTTP/2 connection in the child, never in the server (a process that forks
must not hold gRPC's threads)."""


# ---------------------------------------------------------------------------------------------
# The server


def single_threaded() -> bool:
    """Whether this process has exactly one thread (Python's and any native one)."""
    import threading  # noqa: PLC0415

    return threading.active_count() == 1 and len(os.listdir("/proc/self/task")) == 1


def preload() -> None:
    """Import :data:`PRELOAD` (those an installed extra provides) and every component module of
    a run."""
    import importlib  # noqa: PLC0415

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional extra not installed: a run imports what it needs
            continue
    importlib.import_module("otel_bridge.commands.observe_run").warm()
    rehearse()


def rehearse() -> None:
    """Do once what every run's child would otherwise do for the first time, so that a forked
    child finds it done: parse the bundled run configuration (the loader's type hints, the
    configuration schema) and create its collector (factories open nothing: the normalizer's
    compiled channel rules land in :mod:`re`'s cache), compile the review's schema validator,
    and convert an empty graph document as the report does (``msgspec`` builds its knowledge of
    the graph's types at the first conversion in a process: 1 to 4 ms of every run's end in its
    child otherwise, 0.35 ms after). Starts no thread and keeps nothing open; a step that fails
    is left for the run, which reports it."""
    import tempfile  # noqa: PLC0415

    from otel_bridge import report, schemas  # noqa: PLC0415
    from otel_bridge.commands.observe_run import build_overlay  # noqa: PLC0415
    from otel_bridge.config import parse_config  # noqa: PLC0415
    from otel_bridge.pipeline import Collector  # noqa: PLC0415

    with contextlib.suppress(Exception):
        schemas.fast_validator("review")
    with contextlib.suppress(Exception):
        report.graph_of({"nodes": [], "edges": []})
    with (
        tempfile.TemporaryDirectory(prefix="otel-bridge-rehearsal-") as tmp,
        contextlib.suppress(Exception),
    ):
        run = rundir.RunDir.create(os.path.join(tmp, "run"), replace=False)
        overlay, _ = build_overlay(run, "rehearsal")
        Collector(parse_config(None, overlay=overlay, origin="<observe>"))


def make_private_dir(path: str) -> None:
    """Create ``path`` owner-only (or accept it when it already is); refuses anything else."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        check_private_dir(path)
    except WarmUnavailableError as exc:
        raise OtelBridgeError(f"warm server: {exc}") from None


def bind() -> socket.socket:
    """The listening socket; a stale one (no server answering) is replaced."""
    directory = socket_dir()
    make_private_dir(directory)
    path = os.path.join(directory, SOCKET_NAME)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    else:
        raise OtelBridgeError(f"warm server: one is already listening on {path}")
    finally:
        probe.close()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(16)
    listener.setblocking(False)  # the server and an ahead child accept only once it is readable
    return listener


_WAKE: list[int] = []
"""The server's signal wake-up pipe (read end, write end) while it serves: a SIGTERM or SIGINT
writes to it from C, so the loop's ``select`` returns at once and the loop ends at its top.
A handler that raised instead would lose the signal when it ran inside a finalizer (Python
prints such an exception and drops it), and the server would wait for a second signal."""


def serve(*, ready: Callable[[str], None] | None = None) -> int:
    """Run the warm server until SIGTERM or SIGINT; exit code 0."""
    preload()
    listener = bind()
    path = listener.getsockname()

    stopping: list[int] = []

    def stop(signum: int, frame: object) -> None:
        del frame
        stopping.append(signum)  # read at the loop's top; the wake-up pipe ends its select

    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    _WAKE[:] = [wake_r, wake_w]
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"otel-bridge: warm observe server on {path} (pid {os.getpid()})", file=sys.stderr)
    if ready is not None:
        ready(path)
    children: set[int] = set()
    spare = _Spare()
    ahead = _Ahead()
    try:
        while not stopping:
            if ahead.due():
                ahead.fork(listener, children, spare)
            accepting = [] if ahead.pid is not None else [listener.fileno()]
            watched = [*accepting, ahead.taken_fd, wake_r, *spare.watched()]
            readable, _, _ = select.select(watched, [], [], _REAP_INTERVAL)
            if wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                continue  # a signal: ``stopping`` says whether to end
            if ahead.taken_fd in readable:
                ahead.taken()
            reaped = _reap(children)
            spare.ended(reaped)
            ahead.ended(reaped)
            if accepting and accepting[0] in readable:
                _accept(listener, children, spare, ahead)
    finally:
        signal.set_wakeup_fd(-1)
        for fd in _WAKE:
            os.close(fd)
        _WAKE.clear()
        ahead.close()
        spare.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        listener.close()
    return 0


class _Spare:
    """The exec image helper the next run adopts (root only). The next one is started when the
    run that adopted the last one has ended, not at its fork: its interpreter's start (about
    15 ms of CPU, then real-time priority) would otherwise share the machine with that run's
    arming and workload. A run that comes before it is ready (another run still going, or one
    right after) adopts it while it is still starting, and waits for it in its own child: it
    started before that run, so it is ready sooner than one the run would spawn."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._taken = False
        self._after: int | None = None
        """The run whose end starts the next spare."""
        self._after_fd: int | None = None
        """A pidfd of that run (the server wakes at its end), None without one."""
        self.spawn()

    def spawn(self) -> None:
        """Start the next one (not waited for)."""
        from otel_bridge.arming import spawn_helper  # noqa: PLC0415 (the server's only)

        self.proc, self._ready, self._taken = None, False, False
        if os.geteuid() == 0:
            with contextlib.suppress(OSError):
                self.proc = spawn_helper([])

    def take(self) -> tuple[subprocess.Popen[bytes], bool] | None:
        """The spare, and whether it is ready (False: still starting; the run's child waits
        for it, :func:`_adopted_helper`); None when there is none."""
        from otel_bridge.arming import wait_helper  # noqa: PLC0415

        if self.proc is None:
            return None
        if not self._ready:
            assert self.proc.stdout is not None
            if select.select([self.proc.stdout], [], [], 0)[0]:
                try:
                    wait_helper(self.proc, timeout=0)
                    self._ready = True
                except OSError:  # it failed: the run spawns its own; start another
                    self.spawn()
                    return None
        self._taken = True
        return self.proc, self._ready

    def handed_over(self, children: set[int], run: int) -> None:
        """After the fork of ``run``: when its child took the spare, drop this process's ends
        (it is reaped later); the next one is started when ``run`` has ended (:meth:`ended`)."""
        if not self._taken or self.proc is None:
            return
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        children.add(self.proc.pid)
        self.proc, self._ready, self._taken = None, False, False
        self._forget_run()
        self._after = run
        with contextlib.suppress(OSError):  # without a pidfd, the reap interval notices
            self._after_fd = os.pidfd_open(run)

    def watched(self) -> list[int]:
        """What the server's wait watches for this: the pidfd of the run the next spare
        waits for."""
        return [] if self._after_fd is None else [self._after_fd]

    def ended(self, reaped: list[int]) -> None:
        """The server reaped ``reaped``: start the next spare when its run is among them."""
        if self._after is not None and self._after in reaped:
            self._forget_run()
            self.spawn()

    def _forget_run(self) -> None:
        if self._after_fd is not None:
            os.close(self._after_fd)
        self._after = self._after_fd = None

    def close(self) -> None:
        """Stop the spare (the server ends)."""
        from otel_bridge.arming import stop_helper  # noqa: PLC0415

        self._forget_run()
        if self.proc is not None:
            stop_helper(self.proc)
            self.proc = None


class _Ahead:
    """The run's child forked ahead of the next connection, which it accepts itself
    (:func:`_wait_for_client`): a run then starts without the server's accept and fork (the
    fork of a process holding every import, 2 to 10 ms on a busy machine, and the new child's
    wait for a processor after it). Like the spare helper, which it is forked holding (the
    server keeps none), the next one is forked when the run the last one took has ended; a
    connection that comes before (a run under way) is accepted, and forked for, by the server.
    It ends with the server however the server ends: the server holds the only write end of
    its lifeline pipe, which turns readable at the server's exit."""

    def __init__(self) -> None:
        self.pid: int | None = None
        """The child waiting for a connection; None: the server accepts."""
        self._serving: int | None = None
        """The last one, once it took a connection, until it has ended."""
        self._lifeline_r, self._lifeline_w = os.pipe()
        self.taken_fd, self._taken_w = os.pipe()
        """Readable when the waiting child took a connection (it writes a byte)."""

    def due(self) -> bool:
        """Whether to fork one now: none is waiting and the last one's run has ended."""
        return self.pid is None and self._serving is None

    def fork(self, listener: socket.socket, children: set[int], spare: _Spare) -> None:
        """Fork the next one, handing it the spare helper."""
        helper = spare.take()
        pid = _fork()
        if pid == 0:
            os.close(self._lifeline_w)
            os.close(self.taken_fd)
            _wait_for_client(listener, self._lifeline_r, self._taken_w, helper)
        self.pid = pid
        children.add(pid)
        spare.handed_over(children, pid)

    def taken(self) -> None:
        """The waiting child took a connection: the server accepts until the next is forked."""
        os.read(self.taken_fd, 64)
        self._serving, self.pid = self.pid, None

    def ended(self, reaped: list[int]) -> None:
        """The server reaped ``reaped``: the next one is due once the last one's run ended (or
        the waiting one died)."""
        if self._serving in reaped:
            self._serving = None
        if self.pid in reaped:
            self.pid = None

    def in_run_child(self) -> None:
        """In a child the server forked for a connection it accepted: none of this is its."""
        for fd in (self._lifeline_r, self._lifeline_w, self.taken_fd, self._taken_w):
            os.close(fd)

    def close(self) -> None:
        """The server ends: end the waiting child (a run under way goes on)."""
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = None
        os.close(self._lifeline_w)


def _fork() -> int:
    """``os.fork``, once no thread runs and the standard streams are flushed."""
    if not single_threaded():
        raise RuntimeError("warm server: a thread is running; it must not fork")
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return os.fork()


def _wait_for_client(
    listener: socket.socket,
    lifeline: int,
    taken: int,
    helper: tuple[subprocess.Popen[bytes], bool] | None,
) -> NoReturn:
    """An ahead child (:class:`_Ahead`): wait for a connection of this user, tell the server
    it took it, serve it (never returns). Ends when the server has ended."""
    try:
        _detach()
        while True:
            readable, _, _ = select.select([listener.fileno(), lifeline], [], [])
            if lifeline in readable:  # the server has ended
                os._exit(0)
            with contextlib.suppress(BlockingIOError):
                conn, _ = listener.accept()
                if _refused(conn):
                    conn.close()
                    continue
                break
        os.write(taken, b"x")
        for fd in (lifeline, taken):
            os.close(fd)
        listener.close()
    except BaseException:
        os._exit(2)
    if helper is not None:
        _CHILD_HELPER.append(helper)
    _child(conn)


def _refused(conn: socket.socket) -> bool:
    """Whether ``conn`` comes from another user (said on the server's stderr)."""
    uid = peer_uid(conn)
    if uid == os.geteuid():
        return False
    print(f"otel-bridge: warm server: refused a client of uid {uid}", file=sys.stderr)
    return True


def _detach() -> None:
    """A run's child: the default SIGINT and SIGTERM, and a session of its own (a Ctrl-C at
    the server's terminal does not reach it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)  # the server's pipe: a signal of this child must not wake it
    for fd in _WAKE:
        os.close(fd)
    _WAKE.clear()
    os.setsid()


def _reap(children: set[int]) -> list[int]:
    """Reap the ended ``children``; their pids."""
    reaped = []
    for pid in list(children):
        try:
            if not os.waitpid(pid, os.WNOHANG)[0]:
                continue
        except ChildProcessError:
            pass
        children.discard(pid)
        reaped.append(pid)
    return reaped


_CHILD_HELPER: list[tuple[subprocess.Popen[bytes], bool]] = []
"""In a forked child: the spare exec image helper it adopts, and whether it was ready."""


def _adopted_helper() -> subprocess.Popen[bytes] | None:
    """The spare this child adopted, ready (waited for when it was still starting); None when
    there is none or it failed to start (the run then spawns its own)."""
    from otel_bridge.arming import wait_helper  # noqa: PLC0415

    if not _CHILD_HELPER:
        return None
    helper, ready = _CHILD_HELPER.pop()
    if ready:
        return helper
    try:
        return wait_helper(helper)
    except OSError:  # stopped by wait_helper
        return None


def _accept(listener: socket.socket, children: set[int], spare: _Spare, ahead: _Ahead) -> None:
    """Fork a child for one connection of this user (no ahead child was waiting for it)."""
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    with conn:
        if _refused(conn):
            return
        helper = spare.take()
        pid = _fork()
        if pid == 0:
            try:
                ahead.in_run_child()
                _detach()
                listener.close()
            except BaseException:
                os._exit(2)
            if helper is not None:
                _CHILD_HELPER.append(helper)
            _child(conn)
        children.add(pid)
        spare.handed_over(children, pid)


def _child(conn: socket.socket) -> NoReturn:
    """Serve one client and end (never returns)."""
    code = 2
    try:
        code = _serve_client(conn)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            print(f"otel-bridge: warm server: {exc!r}", file=sys.stderr)
    finally:
        import logging  # noqa: PLC0415

        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        _let_go_of_streams()
        with contextlib.suppress(OSError):
            send(conn, {"done": code})
        os._exit(0)


def _let_go_of_streams() -> None:
    """Point descriptors 0, 1 and 2 (the client's streams, :func:`_serve_client`) at
    ``/dev/null``: what reads the client's output (a pipe, ``$(...)``) sees its end when the
    client exits, not when this process has also been torn down (its memory, the kernel
    sources whose release is still under way), which follows the exit code."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        if null > 2:
            os.close(null)


def _serve_client(conn: socket.socket) -> int:
    """Greet, take the client's streams and context, run the observation; the exit code."""
    hello, _ = receive(conn)
    send(conn, {"hello": identity()})
    if hello.get("hello") != identity():
        return 2
    request, fds = receive(conn, max_fds=3)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(int(request["umask"]))
    os.environ.clear()
    os.environ.update(request["env"])
    args = argparse.Namespace(**request["args"])
    args.start_path = {"server": "warm"}
    from otel_bridge.config import OVERRIDES  # noqa: PLC0415 (imported by the preload)

    OVERRIDES.set(tuple(str(s) for s in getattr(args, "set", None) or ()))  # as cli._call
    import logging  # noqa: PLC0415

    level = getattr(
        logging, str(getattr(args, "log_level", None) or "WARNING").upper(), logging.WARNING
    )
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from otel_bridge.errors import ConfigError  # noqa: PLC0415

    try:
        return _observe(conn, args, request)
    except ConfigError as exc:
        print("otel-bridge: invalid configuration:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
    except OtelBridgeError as exc:
        print(f"otel-bridge: {exc}", file=sys.stderr)
    return 2


def _observe(conn: socket.socket, args: argparse.Namespace, request: dict[str, Any]) -> int:
    from otel_bridge.commands import observe as front  # noqa: PLC0415
    from otel_bridge.commands.observe_run import configure, observe, run_path  # noqa: PLC0415

    command = [str(a) for a in request["command"]]
    run_id = str(request["run_id"])
    path = run_path(args, run_id)
    if args.config or getattr(args, "set", None):  # a bad one leaves no run directory behind
        configure(args, run_id, path)
    run_dir = rundir.RunDir.create(path, replace=args.replace)
    run_dir.begin({"id": run_id})
    workload = RemoteWorkload(int(request["pid"]), str(request["gate"]), conn)
    early: Early = front.Early(
        run_id, run_dir, str(request["wanted"]), bytes.fromhex(request["trace_id"]),
        bytes.fromhex(request["span_id"]), int(request["started_ns"]), workload, _NoGuard(),
        interrupted=workload.signals, observer_pid=int(request["client_pid"]),
    )  # fmt: skip
    if front.armable(args):
        try:
            front.arm(early, helper=_adopted_helper())
        except BaseException:
            early.abandon()
            raise
    return observe(args, command, early)


class _NoGuard(Guard):
    """The client holds the workload's guard (it is CMD's parent); nothing to release here."""

    def __init__(self) -> None:  # no watchdog process
        self._write = -1


class RemoteWorkload(Workload):
    """CMD started by the client behind its gate: the warm child opens the gate (the FIFO is
    the client's, and this user's), and learns CMD's exit status from the client."""

    def __init__(self, pid: int, gate: str, conn: socket.socket) -> None:
        self.pid = pid
        self._fifo = gate
        self._dir = ""  # the FIFO is in the client's socket directory: the client removes it
        self._conn = conn
        self.released = False
        self.gate_opened_ns = 0
        self.signals: list[int] = []

    def release(self, endpoint: str, protocol: str) -> None:
        """Open the gate (the client removes its FIFO)."""
        self.gate_opened_ns = open_gate(self._fifo, endpoint, protocol)
        self.released = True

    def exit_code(self) -> int:
        """CMD's exit code, as the client (its parent) saw it."""
        message, _ = receive(self._conn)
        self.signals.extend(int(s) for s in message.get("signals", ()))
        return int(message["exit"])

    def terminate(self) -> None:
        """Terminate CMD's process group (the client reaps it)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                try:
                    os.killpg(self.pid, 0)
                except ProcessLookupError:
                    return
                time.sleep(0.01)  # no event for "the group is empty" (not ours to wait on)
