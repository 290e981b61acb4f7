"""Explicit selectors of a standing collector: which running processes the host receiver follows.

A process matches when it satisfies *any* configured selector (``cgroup``, ``executable``,
``command``, ``user``, and in a standing collector ``follow_exporters``: its environment sets
its OpenTelemetry SDK to send to this collector, :func:`exports_here`). Selectors are matched
against ``/proc`` every ``selector_interval`` by
:class:`~otel_bridge.receivers.host.follow.Follower`; a matching process is followed, with its
descendants, from the scan that found it. Validation says, with the key path, every selector
that cannot work here (an invalid pattern, an unknown user, cgroup selectors without the cgroup
v2 hierarchy), so ``validate`` refuses what ``run`` could not do.
"""

from __future__ import annotations

import fnmatch
import os
import pwd
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from otel_bridge.identity import reaches_listener
from otel_bridge.receivers.host.procfs import read_bytes

if TYPE_CHECKING:
    from otel_bridge.receivers.host.config import HostConfig

ENDPOINT_VARS = (
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
)
"""The environment variables naming where an OpenTelemetry SDK sends (the specification's)."""
DEFAULT_PORTS = frozenset({4317, 4318})
"""The SDKs' default OTLP ports (gRPC, HTTP) on ``localhost``, used when no endpoint is set."""


def exports_here(environ: bytes, listening: Collection[tuple[str, int]]) -> str:
    """Whether a process with this environment (``/proc/<pid>/environ``) has its OpenTelemetry
    SDK send to an address in ``listening`` (``(address, port)`` bound by this collector): the
    variable that says so, or ``""``. An endpoint variable counts when its port is one of
    ``listening``'s and its host is this machine (a loopback address or name, this host's name,
    or the bound address itself); with ``OTEL_*`` variables and no endpoint, the SDKs' default
    ``localhost:4317``/``4318`` counts when the collector listens there on a local address
    (unless ``OTEL_TRACES_EXPORTER`` names no ``otlp``). ``OTEL_SDK_DISABLED=true`` sends
    nothing; ``OTEL_BRIDGE_*`` (this collector's own settings) are not an SDK's."""
    otel: dict[str, str] = {}
    for item in environ.split(b"\0"):
        if item.startswith(b"OTEL_") and not item.startswith(b"OTEL_BRIDGE_"):  # not ours
            key, _, value = item.partition(b"=")
            otel[key.decode("ascii", "replace")] = value.decode("utf-8", "replace")
    if not otel or otel.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ""
    named = [(var, otel[var]) for var in ENDPOINT_VARS if otel.get(var)]
    for var, url in named:
        host, port = _host_port(url)
        if port is not None and reaches_listener(host, port, listening):
            return var
    exporters = otel.get("OTEL_TRACES_EXPORTER", "otlp") + otel.get("OTEL_LOGS_EXPORTER", "")
    if (
        not named
        and "otlp" in exporters
        and any(reaches_listener("localhost", p, listening) for p in DEFAULT_PORTS)
    ):
        return "the SDK's default endpoint"
    return ""


def service_of(environ: bytes) -> str:
    """The ``service.name`` an environment gives its SDK (``OTEL_SERVICE_NAME``, else
    ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``, percent-decoded), ``""`` when none."""
    attributes = ""
    for item in environ.split(b"\0"):
        if item.startswith(b"OTEL_SERVICE_NAME="):
            return item.partition(b"=")[2].decode("utf-8", "replace").strip()
        if item.startswith(b"OTEL_RESOURCE_ATTRIBUTES="):
            attributes = item.partition(b"=")[2].decode("utf-8", "replace")
    for pair in attributes.split(","):
        key, _, value = pair.partition("=")
        if key.strip() == "service.name":
            return unquote(value.strip())
    return ""


def _host_port(url: str) -> tuple[str, int | None]:
    """The host and port of an OTLP endpoint value (``http://h:4318``, ``h:4317``)."""
    try:
        parts = urlsplit(url.strip() if "://" in url else "//" + url.strip())
        return parts.hostname or "", parts.port
    except ValueError:
        return "", None


CGROUP_ROOT = "/sys/fs/cgroup"


def cgroups_readable() -> bool:
    """True when processes' cgroup memberships can be read (``/proc/<pid>/cgroup``, Linux)."""
    return os.path.exists("/proc/self/cgroup")


def _uid(value: str) -> int | None:
    if value.isdigit():
        return int(value)
    try:
        return pwd.getpwnam(value).pw_uid
    except KeyError:
        return None


def _cgroup_path(value: str) -> str:
    """A cgroup selector with a ``/`` as a path relative to its hierarchy's root.

    A path under :data:`CGROUP_ROOT` loses that prefix, and, on a hybrid or v1 host, the
    hierarchy's own mount directory (``unified``, ``memory``, ``systemd``, ...).
    """
    if not value.startswith(CGROUP_ROOT + "/"):
        return "/" + value.strip("/")
    rest = value[len(CGROUP_ROOT) :].strip("/")
    first, _, tail = rest.partition("/")
    if first and os.path.ismount(os.path.join(CGROUP_ROOT, first)):
        rest = tail
    return "/" + rest.strip("/")


def selector_problems(config: HostConfig) -> list[str]:
    """Each selector of ``config`` that cannot work here, as ``key[i]: message``."""
    problems: list[str] = []
    if config.selector_interval < 0.01:
        problems.append("selector_interval: must be at least 10ms")
    for i, pattern in enumerate(config.command):
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append(f"command[{i}]: not a regular expression: {exc}")
    for i, glob in enumerate(config.executable):
        if not glob.strip():
            problems.append(f"executable[{i}]: empty pattern")
    for i, user in enumerate(config.user):
        if _uid(user) is None:
            problems.append(f"user[{i}]: no such user {user!r} on this host")
    for i, group in enumerate(config.cgroup):
        if not group.strip("/ "):
            problems.append(f"cgroup[{i}]: empty cgroup path")
        elif ".." in group.split("/"):
            problems.append(f"cgroup[{i}]: '..' is not allowed in a cgroup path")
        elif not cgroups_readable():
            problems.append(f"cgroup[{i}]: this system has no /proc/<pid>/cgroup to match")
    return problems


@dataclass(frozen=True, slots=True)
class Selectors:
    """The compiled selectors of one host receiver (see the module docstring)."""

    cgroup_paths: tuple[str, ...] = ()
    cgroup_names: tuple[str, ...] = ()
    executables: tuple[str, ...] = ()
    commands: tuple[re.Pattern[str], ...] = ()
    uids: frozenset[int] = frozenset()
    exporters: bool = False
    """Match a process whose SDK sends to this collector (:func:`exports_here`)."""

    @classmethod
    def of(cls, config: HostConfig, *, standing: bool = True) -> Selectors:
        """Compile ``config``'s selectors (it was validated); ``follow_exporters`` only in a
        ``standing`` collector (under ``observe`` the workload's lineage is the subject)."""
        paths = tuple(_cgroup_path(g) for g in config.cgroup if "/" in g)
        names = tuple(g for g in config.cgroup if "/" not in g)
        uids = frozenset(u for u in (_uid(v) for v in config.user) if u is not None)
        return cls(
            cgroup_paths=paths,
            cgroup_names=names,
            executables=tuple(config.executable),
            commands=tuple(re.compile(p) for p in config.command),
            uids=uids,
            exporters=config.follow_exporters and standing,
        )

    def __bool__(self) -> bool:
        return bool(
            self.cgroup_paths
            or self.cgroup_names
            or self.executables
            or self.commands
            or self.uids
            or self.exporters
        )

    @property
    def rescan(self) -> bool:
        """Whether a process that matched nothing must be matched again at the next scan (its
        command line and environment change when it execs; its user, cgroup, executable
        seldom do)."""
        return bool(self.commands) or self.exporters

    def match(self, pid: int, listening: Collection[tuple[str, int]] = ()) -> tuple[str, str]:
        """Which selector ``pid`` matches (``"user=0"``, ...), ``""`` for none or gone, and for
        a ``follow_exporters`` match the ``service.name`` its environment names (else ``""``);
        ``listening``: where this collector's receivers listen."""
        try:
            how = self._match(pid)
            return (how, "") if how else self._exporter(pid, listening)
        except (OSError, ValueError):
            return "", ""  # gone, or not ours to read

    def _exporter(self, pid: int, listening: Collection[tuple[str, int]]) -> tuple[str, str]:
        if not self.exporters or not listening:
            return "", ""
        environ = read_bytes(f"/proc/{pid}/environ")  # every process, every scan
        if not environ:
            return "", ""  # gone, not ours to read, or empty
        found = exports_here(environ, listening)
        if not found:
            return "", ""
        how = f"exporter={found} (its environment sends its telemetry here)"
        return how, service_of(environ)

    def _match(self, pid: int) -> str:
        if self.uids:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        uid = int(line.split()[1])
                        if uid in self.uids:
                            return f"user={uid}"
                        break
        if self.cgroup_paths or self.cgroup_names:
            found = self._cgroup(pid)
            if found:
                return found
        if self.executables:
            exe = os.readlink(f"/proc/{pid}/exe")
            for glob in self.executables:
                if fnmatch.fnmatchcase(exe, glob) or fnmatch.fnmatchcase(
                    os.path.basename(exe), glob
                ):
                    return f"executable={glob}"
        if self.commands:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read().rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
            for pattern in self.commands:
                if line and pattern.search(line):
                    return f"command={pattern.pattern}"
        return ""

    def _cgroup(self, pid: int) -> str:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            text = f.read()
        for line in text.splitlines():  # "0::/path" (v2), "4:memory:/path" (v1): any matches
            path = line.split(":", 2)[-1] or "/"
            for want in self.cgroup_paths:
                if path == want or path.startswith(want.rstrip("/") + "/") or want == "/":
                    return f"cgroup={want}"
            parts = path.split("/")
            for name in self.cgroup_names:
                if name in parts:
                    return f"cgroup={name}"
        return ""
