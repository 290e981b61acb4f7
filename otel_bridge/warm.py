"""The warm observe client, and what it shares with the server (:mod:`otel_bridge.warm_server`).

``otel-bridge observe --warm-server`` keeps everything an ``observe`` run imports loaded and
serves each run in a child it forks. ``otel-bridge observe -- CMD`` (the *client*) connects to
its socket when it is there (``--no-warm`` or ``OTEL_BRIDGE_WARM=0`` turn this off), checks on
both sides that the peer is the same user (``SO_PEERCRED``), and otherwise runs cold; the
summary says which path ran. ``docs/observe.md`` ("The warm server") is the contract.

The workload stays the client's: the client starts CMD behind its gate itself
(:mod:`otel_bridge.launch`: its argv, environment, working directory, uid, standard streams and
terminal, and the client's child, so the exit status, job control and the process tree are what
a cold ``observe`` gives), holds the workload guard, and forwards SIGINT/SIGTERM to CMD's process
group. The warm child gets the client's standard streams (``SCM_RIGHTS``), working directory,
umask and environment, runs the observation and opens the gate; CMD's exit status goes to it
over the socket, and the run's exit code comes back.

**Lean by design.** The command line hands ``observe`` to :func:`client_main` before it builds
any parser (``otel_bridge/cli.py``): this module, :mod:`otel_bridge.launch` and
:mod:`otel_bridge.commands.observe_options` are everything of otel-bridge a warm ``observe``
imports, and they import only modules the interpreter has in C (``_socket``, ``_signal``,
``marshal``, ``select``, ``struct``) besides ``os``: ``socket``, ``signal`` and ``json`` would
pull in ``enum`` and ``re`` and cost the client more instructions than all it does. Messages are
``marshal``-encoded: both ends check the peer's uid (``SO_PEERCRED``) before decoding anything,
and a process of the same user can already read and change either side's memory.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal without enum (no stub in typeshed)
import _socket
import marshal
import os
import select
import stat
import struct
import sys
import time

from otel_bridge import __version__
from otel_bridge.commands.observe_options import parse
from otel_bridge.launch import (
    Guard,
    exit_code,
    exited,
    new_run_id,
    spawn_gate,
    terminate_group,
    workload_env,
)

TYPE_CHECKING = False  # not ``typing``'s: the client does not import ``typing``
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

SOCKET_NAME = "observe.sock"
ENV_SWITCH = "OTEL_BRIDGE_WARM"
"""``0`` (or ``off``, ``no``, ``false``): ``observe`` never uses a warm server."""
_OFF = ("0", "off", "no", "false")
_HELLO_TIMEOUT = 5.0
"""How long the client waits for the server's answer before running cold."""
_MAX_MESSAGE = 16 * 1024 * 1024
_LEN = struct.Struct("!I")
_PEERCRED = struct.Struct("3i")
_FD = struct.Struct("i")
_FORWARDED = (_signal.SIGINT, _signal.SIGTERM)

StartPath = dict[str, str]
"""Which ``observe`` ran, for the summary's ``start``: ``{"server": "cold", "warm_unavailable":
why}`` when not the warm server."""


class WarmUnavailableError(Exception):
    """No usable warm server: the client runs cold (the message says why)."""


def enabled(options: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
    """Whether this ``observe`` may use a warm server."""
    if options.get("no_warm"):
        return False
    return environ.get(ENV_SWITCH, "").strip().lower() not in _OFF


def socket_dir(environ: Mapping[str, str] | None = None) -> str:
    """``$XDG_RUNTIME_DIR/otel-bridge`` when that is set, else ``/tmp/otel-bridge-<uid>``."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "otel-bridge")
    return f"/tmp/otel-bridge-{os.geteuid()}"


def socket_path(environ: Mapping[str, str] | None = None) -> str:
    """Where the server listens."""
    return os.path.join(socket_dir(environ), SOCKET_NAME)


def check_private_dir(path: str) -> None:
    """``path`` must be a real directory of this user that nobody else can enter."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise WarmUnavailableError("no warm server") from None
    if not stat.S_ISDIR(st.st_mode):
        raise WarmUnavailableError(f"{path} is not a directory")
    if st.st_uid != os.geteuid():
        raise WarmUnavailableError(f"{path} belongs to uid {st.st_uid}, not to this user")
    if st.st_mode & 0o077:
        raise WarmUnavailableError(f"{path} is open to other users (mode {st.st_mode & 0o777:o})")


def peer_uid(sock: _socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (``SO_PEERCRED``)."""
    raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _PEERCRED.size)
    return int(_PEERCRED.unpack(raw)[1])


def send(sock: _socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    """One message: its length, then its ``marshal`` encoding; ``fds`` ride along
    (``SCM_RIGHTS``)."""
    data = marshal.dumps(message)
    data = _LEN.pack(len(data)) + data
    if fds:
        rights = b"".join(_FD.pack(fd) for fd in fds)
        sent = sock.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
        data = data[sent:]
    if data:
        sock.sendall(data)


def receive(sock: _socket.socket, *, max_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """One message and the descriptors that came with it; ``EOFError`` when the peer left."""
    fds: list[int] = []
    if max_fds:
        head, ancillary, _flags, _addr = sock.recvmsg(_LEN.size, _socket.CMSG_LEN(max_fds * 4))
        for level, kind, data in ancillary:
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                usable = len(data) - len(data) % _FD.size
                fds += [fd for (fd,) in _FD.iter_unpack(data[:usable])]
    else:
        head = sock.recv(_LEN.size)
    head += _exactly(sock, _LEN.size - len(head)) if head else b""
    if len(head) < _LEN.size:
        raise EOFError("the peer closed the connection")
    (length,) = _LEN.unpack(head)
    if length > _MAX_MESSAGE:
        raise EOFError("message too large")
    try:
        message = marshal.loads(_exactly(sock, length))
    except (ValueError, TypeError, EOFError):
        raise EOFError("not a message") from None
    if not isinstance(message, dict):
        raise EOFError("not a message")
    return message, fds


def _exactly(sock: _socket.socket, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = sock.recv(n)
        if not chunk:
            raise EOFError("the peer closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def identity() -> dict[str, str]:
    """What client and server must share: the same otel-bridge (version and location)."""
    return {"version": __version__, "package": os.path.dirname(os.path.abspath(__file__))}


# ---------------------------------------------------------------------------------------------
# The client


def client_main(argv: Sequence[str], *, console: bool = False) -> int | StartPath | None:
    """``observe`` from the command line, before any parser is built: CMD's exit code when the
    warm server ran it; else, when this command line is ``observe``'s and it did not, why not
    (the cold run's ``start``); None when ``argparse`` must read the command line (an option
    :func:`~otel_bridge.commands.observe_options.parse` does not read exactly, ``-h``, no CMD,
    ``--warm-server``). ``console``: this process ends when this returns (the console entry
    point)."""
    options = parse(argv)
    if options is None or options["warm_server"]:
        return None
    command = command_of(options)
    if not command or not all(map(_readable, options.get("review_transcript") or ())):
        return None  # argparse's path refuses it (an unreadable file: before CMD runs)
    if not enabled(options, os.environ):
        return {"server": "cold", "warm_unavailable": "turned off"}
    try:
        return run_client(options, command, console=console)
    except KeyboardInterrupt:
        return 130


def _readable(path: str) -> bool:
    try:
        with open(path, "rb"):
            return True
    except OSError:
        return False


def command_of(options: Mapping[str, Any]) -> list[str]:
    """CMD from the parsed options (without its leading ``--``); empty when none was given."""
    command = [str(a) for a in options["command"]]
    return command[1:] if command[:1] == ["--"] else command


def run_client(
    options: Mapping[str, Any], command: list[str], *, console: bool = False
) -> int | StartPath:
    """Run ``command`` through the warm server: its exit code; or, when there is no usable
    server, why not (said on stderr too when a server was there and was not used).
    ``console``: this process ends next (its workload guard is not waited for)."""
    closed = [fd for fd in (0, 1, 2) if not _is_open(fd)]  # before this opens any descriptor
    try:
        sock = _connect()
    except WarmUnavailableError as exc:
        return _cold(exc)
    try:
        return _client_run(sock, options, command, closed, console=console)
    finally:
        sock.close()


def _cold(exc: WarmUnavailableError) -> StartPath:
    if not str(exc).startswith("no warm server"):  # one was there, and was not used
        print(f"otel-bridge: not using the warm server: {exc}; running cold", file=sys.stderr)
    return {"server": "cold", "warm_unavailable": str(exc)}


def _connect() -> _socket.socket:
    """A connection to this user's warm server, its uid checked and our hello sent (its answer
    is read by :func:`_greeted`); raises :class:`WarmUnavailableError`."""
    directory = socket_dir()
    check_private_dir(directory)
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        try:
            sock.connect(os.path.join(directory, SOCKET_NAME))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            what = "no warm server" if isinstance(exc, FileNotFoundError) else "stale socket"
            raise WarmUnavailableError(f"{what} ({directory})") from None
        except OSError as exc:
            reason = f"cannot connect to the warm server: {exc.strerror}"
            raise WarmUnavailableError(reason) from None
        uid = peer_uid(sock)
        if uid != os.geteuid():
            raise WarmUnavailableError(
                f"refused a warm server of uid {uid} (this user is {os.geteuid()})"
            )
        send(sock, {"hello": identity()})
    except BaseException:
        sock.close()
        raise
    return sock


def _greeted(sock: _socket.socket) -> None:
    """Read the server's answer to our hello; raises :class:`WarmUnavailableError`."""
    ready, _, _ = select.select([sock], [], [], _HELLO_TIMEOUT)
    if not ready:
        raise WarmUnavailableError("the warm server did not answer")
    try:
        answer, _ = receive(sock)
    except (EOFError, OSError, ValueError):
        raise WarmUnavailableError("the warm server closed the connection") from None
    if answer.get("hello") != identity():
        raise WarmUnavailableError(
            f"the warm server runs another otel-bridge ({answer.get('hello')})"
        )


def _client_run(
    sock: _socket.socket,
    options: Mapping[str, Any],
    command: list[str],
    closed: list[int],
    *,
    console: bool,
) -> int | StartPath:
    """Start CMD behind its gate here (while the server forks the run's child), send the run's
    request behind the hello (the child reads it only after answering the hello, so the run
    costs no round trip), start CMD's watchdog while the child arms, relay CMD's exit; the
    run's exit code. A hello answer it cannot use ends the gated CMD unrun: the run goes
    cold."""
    run_id = new_run_id()
    trace_id, span_id = os.urandom(16), os.urandom(8)
    env, wanted = workload_env(os.environ, run_id=run_id, trace_id=trace_id, span_id=span_id)
    umask = os.umask(0o077)
    os.umask(umask)
    gate = os.path.join(socket_dir(), f"gate-{run_id}")  # the private directory checked above
    started_ns = time.time_ns()
    pid = spawn_gate(command, env, gate)
    guard: Guard | None = None
    signals: list[int] = []
    previous = _forward_signals(pid, signals)
    try:
        request = {
            "args": dict(options), "command": command, "run_id": run_id,
            "trace_id": trace_id.hex(), "span_id": span_id.hex(), "wanted": wanted,
            "started_ns": started_ns, "pid": pid, "gate": gate, "client_pid": os.getpid(),
            "cwd": os.getcwd(), "umask": umask, "env": dict(os.environ),
        }  # fmt: skip
        _send_with_streams(sock, request, closed)  # read by the child once it answered the hello
        guard = Guard(pid)  # while the child arms (if this process dies first, the child's
        # read of CMD's exit fails and it terminates CMD's group)
        try:
            _greeted(sock)
        except WarmUnavailableError as exc:
            terminate_group(pid)  # still behind its gate: it never ran
            return _cold(exc)
        early_end = _wait_workload(sock, pid)
        if early_end is not None:  # the run ended before CMD did (it printed why)
            terminate_group(pid)
            return early_end
        code = exit_code(pid)
        send(sock, {"exit": code, "signals": signals})
        answer, _ = receive(sock)
        return int(answer.get("done", 2))
    except (EOFError, OSError) as exc:
        terminate_group(pid)
        print(f"otel-bridge: the warm server's run ended early ({exc})", file=sys.stderr)
        return 2
    finally:
        for s, handler in previous.items():
            _signal.signal(s, handler)
        if guard is not None:  # a process that ends now leaves it to init to reap
            guard.release(wait=not console)
        _unlink(gate)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _send_with_streams(sock: _socket.socket, request: dict[str, Any], closed: list[int]) -> None:
    """Send the request with descriptors 0, 1 and 2 (``/dev/null`` for one this process
    started without)."""
    streams = [
        os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC) if fd in closed else fd for fd in (0, 1, 2)
    ]
    try:
        send(sock, request, streams)
    finally:
        for given, fd in enumerate(streams):
            if fd != given:
                os.close(fd)


def _unlink(path: str) -> None:
    try:  # noqa: SIM105 (the client does without contextlib)
        os.unlink(path)
    except FileNotFoundError:
        pass


def _forward_signals(pgid: int, seen: list[int]) -> dict[int, Any]:
    """SIGINT and SIGTERM go to CMD's process group, as in a cold ``observe``."""

    def forward(signum: int, frame: object) -> None:
        del frame
        seen.append(signum)
        try:  # noqa: SIM105 (the client does without contextlib)
            os.killpg(pgid, signum)
        except ProcessLookupError:
            pass

    handler: Callable[[int, object], None] = forward
    return {s: _signal.signal(s, handler) for s in _FORWARDED}


def _wait_workload(sock: _socket.socket, pid: int) -> int | None:
    """Wait until CMD exits (None; not reaped yet), or the warm child ends the run first (its
    code). A pidfd wakes this at CMD's exit; without one (an old kernel, valgrind) CMD is polled
    every 10 ms."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except OSError:
        pidfd = None
    try:
        while True:
            watched = [sock.fileno()] if pidfd is None else [pidfd, sock.fileno()]
            ready, _, _ = select.select(watched, [], [], None if pidfd is not None else 0.01)
            if pidfd in ready or (pidfd is None and exited(pid)):
                return None
            if sock.fileno() in ready:
                message, _ = receive(sock)  # EOFError: the child died
                if "done" in message:
                    return int(message["done"])
    finally:
        if pidfd is not None:
            os.close(pidfd)
