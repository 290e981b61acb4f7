"""Identities, stable keys and the small readers every layer shares. The only home of each.

Two names for one thing:

* An **identity** (``process_id``, ``file_id``, ...) names one node of one run. It must not
  depend on which backend saw the thing: a process observed by the portable poller and by the
  netlink connector is one node. On Linux every backend derives a process start time from
  ``/proc/<pid>/stat`` (boot time plus start ticks), exactly as psutil does, so the same process
  yields the same identity whoever saw it.
* A **stable key** (``process_key``, ``file_key``, ...) names the same thing across runs, so runs
  can be compared and joined: it leaves out what is run-local (pids, start times, trace and span
  ids, numbers and temporary directory names inside arguments). ``docs/model.md`` gives the table.
  A key builder returns None when nothing stable is known of the thing (a process of unknown
  executable and argv, a file with no path, a tool call naming no tool): a key made of nothing
  would join unrelated things across runs. An entity then has the empty key.

Also here, once: ISO 8601 time conversion (``process.creation.time``), the W3C ``traceparent``
parser, and typed readers of OTLP attribute values.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import os
import re
import socket
import uuid
from collections.abc import Iterable, Sequence

from otel_bridge.model import AnyValue, EntityKind, ProcessFacts


def process_id(host_id: str, pid: int, start_time_ms: int | None) -> str:
    """Identity of a process: ``process:<host>:<pid>:<start ms>`` (``?`` if start unknown)."""
    start = "?" if start_time_ms is None else str(start_time_ms)
    return f"{EntityKind.PROCESS}:{host_id}:{pid}:{start}"


def endpoint_id(transport: str, address: str, port: int) -> str:
    """Identity of a network endpoint: ``endpoint:<transport>:<address>:<port>``."""
    return f"{EntityKind.ENDPOINT}:{transport.lower()}:{address}:{port}"


def file_id(path: str) -> str:
    """Identity of a file: ``file:<normalized absolute path>``. Callers resolve links first."""
    return f"{EntityKind.FILE}:{os.path.normpath(path)}"


def executable_id(path: str) -> str:
    """Identity of an executable: ``executable:<normalized path>``."""
    return f"{EntityKind.EXECUTABLE}:{os.path.normpath(path)}"


def kind_id(kind: EntityKind, *parts: str) -> str:
    """Identity for a logical entity (agent, tool call, model, ...): ``<kind>:<part>:...``."""
    return ":".join((str(kind), *parts))


@functools.cache
def _boot_time_s() -> float:
    with open("/proc/stat", encoding="ascii") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise OSError("no btime in /proc/stat")


@functools.cache
def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


def linux_start_time_ms(pid: int) -> int | None:
    """Start time of ``pid`` in ms since the epoch from ``/proc``, or None if it is gone.

    Same arithmetic as psutil's ``Process.create_time()`` on Linux, rounded to a millisecond,
    so every backend agrees on the identity of one process.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: fields start after the last ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        ticks = int(rest[19])
    except (IndexError, ValueError):
        return None
    return start_ms_from_ticks(ticks)


def start_ms_from_ticks(ticks: int) -> int:
    """Convert a ``/proc/<pid>/stat`` start time in clock ticks to ms since the epoch."""
    return round((_boot_time_s() + ticks / _clock_ticks()) * 1000)


def psutil_start_ms(create_time_s: float) -> int:
    """Convert psutil's ``create_time()`` (seconds, float) to the identity's ms."""
    return round(create_time_s * 1000)


@functools.cache
def host_id() -> str:
    """This machine's stable id: ``/etc/machine-id`` where present, else a hostname-derived UUID."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            with open(path, encoding="ascii") as f:
                value = f.read().strip()
        except OSError:
            continue
        if value:
            return value
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, socket.gethostname()))


# --------------------------------------------------------------------------------------------
# Time and W3C trace context
# --------------------------------------------------------------------------------------------


def iso_ms(ms: int) -> str:
    """ISO 8601 UTC with millisecond precision, as ``process.creation.time`` is written."""
    when = dt.datetime.fromtimestamp(ms // 1000, tz=dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


@functools.lru_cache(maxsize=4096)
def iso_to_ms(value: str | None) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 time (``Z`` or offset; naive means UTC).

    None for an empty or malformed value. Cached: one process's creation time is read once per
    event about it.
    """
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return round(parsed.timestamp() * 1000)


def parse_traceparent(value: str) -> tuple[str, str] | None:
    """``(trace_id, span_id)`` hex of a W3C ``traceparent``, or None if malformed or all-zero."""
    parts = value.strip().lower().split("-")
    if len(parts) < 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    if not _HEX.fullmatch(parts[1]) or not _HEX.fullmatch(parts[2]):
        return None
    if parts[1] == "0" * 32 or parts[2] == "0" * 16:
        return None
    return parts[1], parts[2]


_HEX = re.compile(r"[0-9a-f]+")


# --------------------------------------------------------------------------------------------
# Typed readers of attribute values
# --------------------------------------------------------------------------------------------


def str_value(value: object) -> str | None:
    """A non-empty string attribute value (a number is converted), else None."""
    if value.__class__ is str:
        return value if value else None
    if isinstance(value, str):
        return value or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def int_value(value: object) -> int | None:
    """An integer attribute value (a decimal string is accepted; a Boolean is not), else None."""
    if value.__class__ is int:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def bool_value(value: object) -> bool | None:
    """A Boolean stated explicitly (``"true"``/``"false"`` strings too), else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def str_tuple(value: AnyValue) -> tuple[str, ...] | None:
    """A string array attribute as a tuple (non-strings left out), else None."""
    if isinstance(value, tuple | list):
        if all(x.__class__ is str for x in value):
            return tuple(value)  # type: ignore[arg-type]
        return tuple(x for x in value if isinstance(x, str))
    return None


# --------------------------------------------------------------------------------------------
# Stable keys: the same thing in two runs, one key
# --------------------------------------------------------------------------------------------

_DIGITS = re.compile(r"\d+")
_HEXISH = re.compile(r"\b[0-9a-fA-F]{8,}\b")
_TMP_NAME = re.compile(r"(?<![^\s'\"=:(])(/tmp|/var/tmp|/dev/shm|/run/user/\d+)/[^/\s'\"]+")
"""A temporary directory's first component, where a path starts: the whole string, or a path
inside one argument (``--out=/tmp/x/f``, a shell command ``echo hi > /tmp/x/f``)."""


def path_shape(path: str) -> str:
    """A path with its run-local parts masked.

    The first component under a temporary directory (``/tmp/tmpa1b2c3``, ``/tmp/pytest-of-x``)
    becomes ``<tmp>``, also where such a path starts inside a longer string (an argument
    ``--out=/tmp/x/f``, a shell command ``echo hi > /tmp/x/f``); runs of eight or more hex
    digits become ``<hex>``; other digit runs stay (``report2.csv`` and ``report3.csv`` are
    different files in every run).
    """
    norm = os.path.normpath(path) if path else path
    norm = _TMP_NAME.sub(lambda m: f"{m.group(1)}/<tmp>", norm)
    return _HEXISH.sub("<hex>", norm)


def arg_shape(arg: str) -> str:
    """One argument with its run-local parts masked: paths by :func:`path_shape`, then every
    run of digits as ``#`` (pids, ports, counters, timestamps)."""
    arg = path_shape(arg) if "/" in arg else _HEXISH.sub("<hex>", arg)
    return _DIGITS.sub("#", arg)


def argv_shape(argv: Sequence[str]) -> str:
    """The shape of an argument vector: each argument by :func:`arg_shape`, joined by spaces."""
    return " ".join(arg_shape(a) for a in argv)


def process_key(executable: str | None, argv: Sequence[str] | None) -> str | None:
    """``process:<executable path>:<argv shape>``; ``?`` stands for the half not observed.

    None when neither an executable nor a non-empty argv was observed: a key made of nothing
    (``process:?:?``) would join every unknown process of every run.
    """
    if not executable and not argv:
        return None
    exe = path_shape(executable) if executable else "?"
    shape = "?" if argv is None else argv_shape(argv)
    return f"{EntityKind.PROCESS}:{exe}:{shape}"


def executable_key(path: str) -> str | None:
    """``executable:<normalised path>`` (temporary directories masked); None without a path."""
    return f"{EntityKind.EXECUTABLE}:{path_shape(path)}" if path else None


def file_key(path: str) -> str | None:
    """``file:<normalised path>`` (temporary directories masked); None without a path."""
    return f"{EntityKind.FILE}:{path_shape(path)}" if path else None


EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)


def ephemeral_range(path: str = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The ephemeral port range of this network namespace (default 32768-60999)."""
    try:
        with open(path, encoding="ascii") as f:
            low, high = (int(x) for x in f.read().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return (low, high) if 0 < low <= high else DEFAULT_EPHEMERAL_RANGE


@functools.cache
def _local_ephemeral_range() -> tuple[int, int]:
    return ephemeral_range()


def canonical_ip(address: str) -> str | None:
    """``address`` (brackets allowed) as a canonical IP address, IPv4-mapped IPv6 written as
    IPv4; None when it is no IP address."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


def is_loopback(address: str) -> bool:
    """True for a loopback IP address (``127.0.0.0/8``, ``::1``, IPv4-mapped loopback)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
"""Bind addresses that listen on every address of the host."""


def reaches_listener(host: str, port: int | None, listeners: Iterable[tuple[str, int]]) -> bool:
    """Whether a client of this machine that connects to ``host``:``port`` reaches one of
    ``listeners`` (``(address, port)`` as a collector on this machine bound them). The port is
    the same, and: a listener bound to every address is reached at a loopback address,
    ``localhost`` or this machine's name; one bound to ``localhost`` at a loopback address or
    ``localhost``; one bound to an address at that address (IPv4-mapped IPv6 read as IPv4), and
    a loopback one at ``localhost`` too."""
    client = canonical_ip(host)
    named_local = host == "localhost"
    local = named_local or (client is not None and is_loopback(client))
    for address, bound in listeners:
        if bound != port:
            continue
        if address in WILDCARD_HOSTS:
            reached = local or host == socket.gethostname()
        elif address == "localhost":
            reached = local
        else:
            bound_ip = canonical_ip(address)
            reached = host == address or (client is not None and client == bound_ip)
            reached = reached or (named_local and is_loopback(bound_ip or ""))
        if reached:
            return True
    return False


def endpoint_key(transport: str, address: str, port: int) -> str | None:
    """``endpoint:<transport>:<address>:<port>``, the identity without its run-local parts.

    For a Unix socket the address is its path, masked like a file's. A loopback port in this
    host's ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``) was chosen by the kernel
    at bind time (a local server started on port 0: a test model server, a collector) and differs
    from run to run, so the key says ``ephemeral`` instead of the number:
    ``endpoint:tcp:127.0.0.1:ephemeral``. The identity keeps the number. None without an
    address (a port alone names no endpoint).
    """
    if not address:
        return None
    transport = transport.lower()
    if transport == "unix":
        address = path_shape(address)
    elif is_loopback(address):
        low, high = _local_ephemeral_range()
        if low <= port <= high:
            return f"{EntityKind.ENDPOINT}:{transport}:{address}:ephemeral"
    return f"{EntityKind.ENDPOINT}:{transport}:{address}:{port}"


UNKNOWN_TOOL = "unknown_tool"
"""The tool name of a tool call whose span names no tool (``ToolCallFacts.tool``)."""


def agent_key(service: str, name: str | None, agent_id: str | None) -> str | None:
    """``agent:<service>:<name>`` (the id when the agent states no name); None when the agent
    states neither: the service alone does not say which agent it is."""
    named = name or agent_id
    return f"{EntityKind.AGENT}:{service}:{named}" if named else None


def tool_call_key(agent: str | None, tool: str) -> str | None:
    """``tool_call:<agent>:<tool name>``: every call of one tool by one agent shares the key
    (``?`` for an unknown agent). None when the span names no tool."""
    if not tool or tool == UNKNOWN_TOOL:
        return None
    return f"{EntityKind.TOOL_CALL}:{agent or '?'}:{tool}"


def model_key(provider: str, name: str) -> str | None:
    """``model:<provider>:<model name>``; None without a model name."""
    return f"{EntityKind.MODEL}:{provider.lower() or 'unknown'}:{name}" if name else None


def command_key(tool: str, command: str) -> str | None:
    """``command:<tool>:<command shape>`` (the declared command's words by :func:`arg_shape`);
    None for a command of no words."""
    words = command.split()
    return f"{EntityKind.COMMAND}:{tool}:{argv_shape(words)}" if words else None


def span_key(service: str, name: str) -> str | None:
    """``span:<service>:<span name>`` for a plain operation span; None for an unnamed span."""
    return f"{EntityKind.SPAN}:{service}:{name}" if name else None


def operation_key(kind: str, service: str, name: str | None) -> str | None:
    """``<kind>:<service>:<name>`` for a typed operation span (workflow, retrieval, ...):
    every run of one named workflow shares the key. None when the span names none."""
    return f"{kind}:{service}:{name}" if name else None


def process_label(facts: ProcessFacts) -> str:
    """``<executable name> (<pid>)`` for a process, from what it executed; empty when no image
    was observed (a label never names another process's image)."""
    name = facts.executable_name or os.path.basename(facts.executable_path or "")
    return f"{name} ({facts.pid})" if name else ""


@functools.lru_cache(maxsize=4096)
def key_rank(key: str) -> int:
    """How informative a stable key is: the more the better.

    Every key beats the empty key (no stable key stated); among keys, fewer ``:``-separated
    parts that are exactly ``?`` (not observed) is better. A node's key is replaced only by one
    of a higher rank, so equal ranks keep the first key seen.
    """
    if not key:
        return -(1 << 30)
    return -key.split(":").count("?")
