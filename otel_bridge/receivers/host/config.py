"""Configuration of the ``host`` receiver."""

from __future__ import annotations

from dataclasses import dataclass, field

from otel_bridge.arming import DEFAULT_FANOTIFY_EVENTS, DEFAULT_FANOTIFY_PATHS
from otel_bridge.receivers.host.capture import CaptureConfig
from otel_bridge.receivers.host.selectors import selector_problems

BACKENDS: tuple[str, ...] = ("auto", "linux", "ebpf", "strace", "portable")
"""Accepted ``backend`` values; ``auto`` tries the others in :data:`AUTO_ORDER`."""

AUTO_ORDER: tuple[str, ...] = ("linux", "ebpf", "strace", "portable")
"""Strongest first. ``linux`` leads: kernel-pushed events with no tracing cost (see selection)."""

MIN_POLL_INTERVAL = 0.005
"""The smallest ``poll_interval`` accepted (5 ms); below it the poller only burns CPU."""

FANOTIFY_EVENTS: tuple[str, ...] = (
    "open",
    "modify",
    "close_write",
    "access",
    "create",
    "delete",
    "rename",
)


def _default_fanotify_events() -> list[str]:
    return list(DEFAULT_FANOTIFY_EVENTS)  # what observe arms before the collector is built


def _default_fanotify_paths() -> list[str]:
    return list(DEFAULT_FANOTIFY_PATHS)


@dataclass(slots=True)
class HostConfig:
    """Settings of the host receiver (``receivers.host``)."""

    backend: str = "auto"
    """``auto`` (strongest that works here), ``linux``, ``ebpf``, ``strace`` or ``portable``."""
    root_pid: int = 0
    """Root of a lineage to observe from the start (``observe`` sets it to its command).

    0 (a standing collector): the receiver follows what the selectors below and
    ``follow_telemetry`` name, each from the moment it is known (:mod:`.follow`)."""
    follow_telemetry: bool = True
    """Follow every process of this host that reports spans (its resource's ``process.pid``,
    matched by ``process.creation.time`` when stated) and its descendants from then on."""
    follow_exporters: bool = True
    """In a standing collector, follow every process of this host whose OpenTelemetry SDK is set
    by its environment to send here (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``
    naming a port this collector's receivers listen on, on a local address; or ``OTEL_*``
    variables and no endpoint, the SDKs' default ``localhost:4317``/``4318``, when it listens
    there), from the selector scan that first sees it: before its first span arrives (an SDK
    sends its spans when they end, a batch processor later or at exit)."""
    cgroup: list[str] = field(default_factory=list)
    """Follow processes in these cgroups: a path (as ``/proc/<pid>/cgroup`` shows it, or under
    ``/sys/fs/cgroup``; sub-cgroups included) of a systemd slice or unit or a container, or a
    bare unit or scope name (``agent.service``, ``docker-<id>.scope``) matching any component
    of the process's cgroup path, in any hierarchy (v2 or v1)."""
    executable: list[str] = field(default_factory=list)
    """Follow processes whose executable path or file name matches one of these globs."""
    command: list[str] = field(default_factory=list)
    """Follow processes whose command line (arguments joined by spaces) matches one of these
    regular expressions (searched, not anchored)."""
    user: list[str] = field(default_factory=list)
    """Follow processes whose real user is one of these (names or numeric uids)."""
    selector_interval: float = 0.5
    """How often the selectors are matched against the running processes (seconds)."""
    run_id: str = ""
    """Run id tagged on every record (``otel_bridge.run.id``); ``observe`` sets it."""
    processes: bool = True
    """Collect process start/exec/exit."""
    files: bool = True
    """Collect file activity (syscalls, fanotify, or watchdog under ``watch_paths``)."""
    network: bool = True
    """Collect connections and listening sockets."""
    network_accepted: bool = False
    """Linux and strace backends: also record each TCP connection a followed process *accepted*
    from a listener as ``network.accept`` (local and peer address and port). Off by default; a fleet
    agent turns it on so a gateway can join the two ends of a connection across hosts
    (``docs/deployment.md``)."""
    poll_interval: float = 0.02
    """Portable backend: process/connection sampling period (seconds, minimum 5 ms)."""
    network_poll_interval: float = 0.01
    """Linux backend: period of the socket table scan (the remaining network blind window)."""
    socket_tracing: bool = True
    """Linux backend: add kernel-pushed TCP connect events with their exact pid from the
    tracepoint ``sock:inet_sock_set_state``, read through ``perf_event_open`` (attached before
    the workload starts) or else bpftrace (``bpftrace_path``, started beside the workload,
    never delaying it; ``socket_tracer``, ``docs/host.md``). Off, or with neither: connections
    closed between two scans are recorded only when a scan saw their owner (else counted as
    unattributed machine connections), and the network collection state says so."""
    socket_tracer: str = "auto"
    """Linux backend: which socket tracer: ``auto`` (perf, else bpftrace), ``perf`` (the
    tracepoint read through ``perf_event_open``, attached in milliseconds) or ``bpftrace``."""
    watch_paths: list[str] = field(default_factory=list)
    """Portable backend: directories watched for file changes (session-correlated, non-causal)."""
    fanotify_events: list[str] = field(default_factory=_default_fanotify_events)
    """Linux backend: fanotify events to mark: ``open``, ``modify``, ``close_write``, ``access``,
    and the directory-entry changes ``create``, ``delete``, ``rename``.

    The default reports writes with ``close_write`` (one event per open-for-writing cycle);
    ``modify`` fires on every ``write()`` call and costs far more on write-heavy workloads.
    Directory-entry changes need a second fanotify group that reports file handles and names
    (``FAN_REPORT_DFID_NAME``, Linux 5.17 for ``rename``)."""
    fanotify_paths: list[str] = field(default_factory=_default_fanotify_paths)
    """Linux backend: a path on each filesystem (or mount) to mark."""
    fanotify_mark: str = "filesystem"
    """``filesystem`` (whole filesystem of each path) or ``mount`` (that mount only)."""
    file_merge_window: float = 1.0
    """Linux backend: a process's repeated file events of one kind on one file within this many
    seconds of the first are one record, which says how many events it stands for
    (``evidence.merged_events``) and the last one's time (``evidence.last_time_unix_nano``);
    its time is the first's. 0: one record per event read. Records reach the pipeline up to this
    much later: keep it under ``correlate``'s ``allowed_lateness`` (2 s by default) and
    ``enrich``'s ``hold_delay``. ``docs/host.md``."""
    capture: CaptureConfig = field(default_factory=CaptureConfig)
    """Opt-in content capture: ``file_hashes: true`` records the size and SHA-256 of each file
    the lineage wrote (never the content), ``max_bytes`` the largest file read (``docs/host.md``).
    """
    capture_environment: bool = False
    """Store each process's environment (redacted). Off: only ``TRACEPARENT`` is read."""
    batch_interval: float = 0.05
    """Emit a batch at least this often (seconds) while events are pending."""
    batch_size: int = 256
    """Emit a batch as soon as this many events are pending."""
    strace_path: str = "strace"
    """The strace executable (strace backend)."""
    bpftrace_path: str = "bpftrace"
    """The bpftrace executable (ebpf backend, and the linux backend's socket tracer)."""
    startup_timeout: float = 15.0
    """How long a tracing backend (strace, bpftrace) may take to attach (seconds)."""

    def validate(self) -> list[str]:
        """Problems with this config, each as ``key: message``."""
        problems: list[str] = []
        if self.backend not in BACKENDS:
            problems.append(f"backend: must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.root_pid < 0:
            problems.append("root_pid: must be >= 0")
        problems.extend(selector_problems(self))
        if self.poll_interval < MIN_POLL_INTERVAL:
            problems.append(
                f"poll_interval: must be at least {MIN_POLL_INTERVAL * 1000:.0f}ms, "
                f"got {self.poll_interval * 1000:g}ms"
            )
        if self.socket_tracer not in ("auto", "perf", "bpftrace"):
            problems.append("socket_tracer: must be 'auto', 'perf' or 'bpftrace'")
        if self.network_poll_interval < 0.001:
            problems.append("network_poll_interval: must be at least 1ms")
        for i, name in enumerate(self.fanotify_events):
            if name not in FANOTIFY_EVENTS:
                problems.append(
                    f"fanotify_events[{i}]: must be one of {', '.join(FANOTIFY_EVENTS)}, "
                    f"got {name!r}"
                )
        if self.fanotify_mark not in ("filesystem", "mount"):
            problems.append("fanotify_mark: must be 'filesystem' or 'mount'")
        if not 0 <= self.file_merge_window <= 60:
            problems.append("file_merge_window: must be between 0 and 60 seconds")
        if self.batch_interval <= 0:
            problems.append("batch_interval: must be > 0")
        if self.batch_size < 1:
            problems.append("batch_size: must be >= 1")
        if self.startup_timeout <= 0:
            problems.append("startup_timeout: must be > 0")
        problems.extend(self.capture.problems())
        return problems
