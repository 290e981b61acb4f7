"""CMD behind its gate, with the operating system's calls only: what both ``observe`` paths share,
and all the warm client (:mod:`otel_bridge.warm`) uses to start the workload.

The gate is ``sh`` reading two lines (the OTLP endpoint and protocol) from a FIFO, then
``exec``-ing CMD, so CMD's pid is known before it runs (``docs/observe.md``). Both the cold
``observe`` (:class:`otel_bridge.commands.observe.Workload`) and the warm client start it with
:func:`spawn_gate`, which needs no module beyond ``os``: the client runs on every warm
``observe``, and :mod:`subprocess` alone costs it more instructions than starting the workload
does. :class:`Guard` is the workload's watchdog, warm and cold.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal without enum (no stub in typeshed)
import os
import select
import time

TYPE_CHECKING = False  # not ``typing``'s: the warm client does not import ``typing``
if TYPE_CHECKING:
    from collections.abc import Mapping

PROTOCOLS = ("grpc", "http/protobuf", "http/json")
"""The OTLP protocols an SDK may be told (``OTEL_EXPORTER_OTLP_PROTOCOL``)."""
OTLP_VARS = "OTEL_EXPORTER_OTLP_"
"""Every variable of the user's own OTLP destination is taken from CMD's environment (its
destination is forwarded to instead, see ``otel_bridge.exporters.otlp.relay``); the gate sets
the two CMD needs."""
GATE = (
    "{ IFS= read -r OTEL_EXPORTER_OTLP_ENDPOINT && IFS= read -r OTEL_EXPORTER_OTLP_PROTOCOL; } "
    '< "$1" || exit 126; shift; '
    "export OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_PROTOCOL; "
    'case $1 in */*) [ -e "$1" ] ;; *) command -v -- "$1" >/dev/null ;; esac || '
    '{ printf "otel-bridge: %s: command not found\\n" "$1" >&2; exit 127; }; exec "$@"'
)
"""The gate's script: ``sh -c GATE otel-bridge-gate FIFO CMD...``. A CMD that names no program
is said in observe's own name with the shell's code (127), not in the gate's."""
GATE_NAME = "otel-bridge-gate"
_GUARD = 'IFS= read -r word; [ "$word" = done ] || kill -s KILL -- -{pgid} 2>/dev/null'
_DEFAULT_SIGNALS = (_signal.SIGPIPE, _signal.SIGXFSZ)
"""Ignored by Python, restored for a spawned program (as ``subprocess`` does)."""
_TERMINATE_WAIT = 3.0


def new_run_id() -> str:
    """A sortable, unique run id: ``20260101T120000Z-1a2b3c``."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + os.urandom(3).hex()


def workload_env(
    environ: Mapping[str, str], *, run_id: str, trace_id: bytes, span_id: bytes
) -> tuple[dict[str, str], str]:
    """CMD's environment without the user's OTLP destination, and the protocol they chose."""
    wanted = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", ""
    )
    env = {k: v for k, v in environ.items() if not k.startswith(OTLP_VARS)}
    env.update(
        {
            "TRACEPARENT": f"00-{trace_id.hex()}-{span_id.hex()}-01",
            "OTEL_BRIDGE_RUN_ID": run_id,
        }
    )
    return env, wanted.strip() if wanted.strip() in PROTOCOLS else ""


def spawn_gate(command: list[str], env: Mapping[str, str], fifo: str) -> int:
    """Make the FIFO ``fifo`` (owner-only) and start CMD behind it in a process group of its
    own; CMD's pid (the gate's, which ``exec``-s CMD). The caller reaps it."""
    os.mkfifo(fifo, 0o600)
    try:
        return os.posix_spawnp(
            "sh",
            ["sh", "-c", GATE, GATE_NAME, fifo, *command],
            dict(env),
            file_actions=inherited_closed(),
            setpgroup=0,
            setsigdef=_DEFAULT_SIGNALS,
        )
    except BaseException:
        os.unlink(fifo)
        raise


def open_gate(fifo: str, endpoint: str, protocol: str) -> int:
    """Write the OTLP endpoint and protocol into the gate's FIFO ``fifo``: CMD runs. Returns
    when the gate was open, in CLOCK_MONOTONIC ns (the clock of the kernel's process events):
    read once the gate's shell had opened the FIFO (an open for writing waits for the reader),
    before the lines that let it ``exec`` CMD. So an exec event of the gated pid stamped before
    it is the gate's own (its ``sh``, whose event the kernel may send after ``posix_spawn``
    returned), and CMD's exec is stamped after it."""
    with open(fifo, "w", encoding="utf-8") as f:
        opened = time.monotonic_ns()
        f.write(f"{endpoint}\n{protocol}\n")
    return opened


def inherited_closed() -> list[tuple[int, int]]:
    """``posix_spawn`` actions closing every inheritable descriptor above 2 this process holds
    (one its own parent passed it): the spawned program gets only 0, 1 and 2, as with
    ``subprocess``'s ``close_fds``, which a cold ``observe`` uses."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    actions = []
    for name in names:
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                actions.append((os.POSIX_SPAWN_CLOSE, fd))
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return actions


def exit_code(pid: int) -> int:
    """Wait for child ``pid``: its exit code, 128+N when killed by signal N."""
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return 128 - code if code < 0 else code


def wait_exit(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` s for child ``pid`` to exit (not reaped); whether it did. A pidfd
    wakes this at the exit; without one (an old kernel, valgrind) it is polled every 10 ms."""
    deadline = time.monotonic() + timeout
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except OSError:
        pidfd = None
    try:
        while not exited(pid):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                select.select([], [], [], min(left, 0.01))
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def exited(pid: int) -> bool:
    """Whether child ``pid`` has exited (left to be reaped)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def terminate_group(pid: int) -> None:
    """Terminate child ``pid``'s process group (SIGTERM, SIGKILL after 3 s) and reap ``pid``."""
    for sig in (_signal.SIGTERM, _signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        if wait_exit(pid, _TERMINATE_WAIT):
            break
    try:  # noqa: SIM105 (the client does without contextlib); stragglers of the group
        os.killpg(pid, _signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:  # noqa: SIM105 (the client does without contextlib)
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


class Guard:
    """Kills process group ``pgid`` when this process dies, however it dies: a watchdog ``sh``
    in a session of its own waits on a pipe only this process holds open; if the pipe closes
    without the word ``done`` (this process was killed, even with SIGKILL), it sends SIGKILL to
    the group. :meth:`release`: the run ended normally."""

    def __init__(self, pgid: int) -> None:
        read_end, self._write = os.pipe()  # both ends close on exec
        actions: list[tuple[int, int] | tuple[int, int, int] | tuple[int, int, str, int, int]]
        actions = [
            *inherited_closed(),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ]
        if read_end == 0:  # this process had no stdin: ``dup2(0, 0)`` would keep close-on-exec
            os.set_inheritable(0, True)
        else:
            actions.insert(0, (os.POSIX_SPAWN_DUP2, read_end, 0))
        try:
            self._pid = os.posix_spawnp(
                "sh",
                ["sh", "-c", _GUARD.format(pgid=int(pgid))],
                dict(os.environ),
                file_actions=actions,
                setsid=True,
                setsigdef=_DEFAULT_SIGNALS,
            )
        except BaseException:
            os.close(self._write)
            raise
        finally:
            os.close(read_end)

    def release(self, *, wait: bool = True) -> None:
        """The watchdog exits without killing anything. Safe twice. ``wait=False``: not waited
        for (a process about to exit leaves it to ``init`` to reap)."""
        if self._write < 0:
            return
        try:  # noqa: SIM105 (the client does without contextlib)
            os.write(self._write, b"done\n")
        except OSError:
            pass
        os.close(self._write)
        self._write = -1
        if not wait:
            return
        try:  # noqa: SIM105 (the client does without contextlib)
            os.waitpid(self._pid, 0)
        except ChildProcessError:
            pass
