"""The counters the ``host`` receiver declares, and its counting view for direct construction."""

from __future__ import annotations

from otel_bridge.component import RECEIVER, STANDARD_COUNTERS, CounterScope, CounterSpec, Telemetry

COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("events_emitted", "OS event records handed to the pipelines"),
    CounterSpec(
        "events", "OS event records handed on, by event name (process.start, ...)", labeled=True
    ),
    CounterSpec("events_refused", "OS event records the pipelines did not accept"),
    CounterSpec("linux.overruns", "netlink proc connector buffer overruns", "{overruns}"),
    CounterSpec(
        "linux.gate_exec",
        "exec events of observe's gate (its sh) the kernel reported after the sources were armed: "
        "not recorded",
        "{execs}",
    ),
    CounterSpec("strace.unparsed", "strace lines that could not be parsed", "{lines}"),
    CounterSpec("strace.failed_opens", "failed opens strace saw (not reported as events)"),
    CounterSpec("ebpf.unparsed", "bpftrace lines that could not be parsed", "{lines}"),
    CounterSpec("ebpf.failed_opens", "failed opens bpftrace saw (not reported as events)"),
    CounterSpec("argv_unknown", "execs whose argv could not be read (recorded without one)"),
    CounterSpec("image_unknown", "process starts whose executed image could not be read"),
    CounterSpec(
        "network.direction_unknown",
        "sockets whose direction (initiated or accepted) could not be decided: not claimed",
        "{sockets}",
    ),
    CounterSpec(
        "network.held_at_attach",
        "TCP sockets a process already held when strace attached to it, recorded as found then "
        "(network.observed_at=attach)",
        "{sockets}",
    ),
    CounterSpec(
        "follow.followed",
        "processes followed after start (reported telemetry or matched a selector), by how",
        "{processes}",
        labeled=True,
    ),
    CounterSpec(
        "follow.skipped",
        "processes learned but not followed, by reason (other_host, gone, start_mismatch, "
        "by_environment, ...)",
        "{processes}",
        labeled=True,
    ),
    CounterSpec(
        "fanotify.before_follow",
        "file events of a process read before it was followed (from before: not attributed)",
        "{events}",
    ),
    CounterSpec(
        "fanotify.unnamed",
        "file events whose directory could no longer be resolved (gone before the event was "
        "read, or on no marked mount): not reported",
        "{events}",
    ),
    CounterSpec(
        "fanotify.merged_events",
        "file events folded into an earlier record of the same process, file and kind "
        "(file_merge_window)",
        "{events}",
    ),
    CounterSpec(
        "fanotify.follow_unsynced",
        "follows whose file-event queue was not read through in time (events from before the "
        "follow may be attributed)",
        "{processes}",
    ),
    CounterSpec("sockdiag.overruns", "sock_diag destroy-notification buffer overruns"),
    CounterSpec(
        "sockdiag.joined",
        "destroyed TCP connections the eBPF socket tracer had recorded with their pid",
        "{connections}",
    ),
    CounterSpec(
        "socktrace.connections",
        "TCP connections recorded with their pid by the socket tracer (perf or bpftrace)",
        "{connections}",
    ),
    CounterSpec(
        "socktrace.foreign",
        "traced TCP connections of processes outside the lineage (not recorded)",
        "{connections}",
    ),
    CounterSpec(
        "socktrace.before_start",
        "traced TCP connects of a lineage pid made before its process started (an earlier "
        "process with that pid): not recorded",
        "{connections}",
    ),
    CounterSpec(
        "socktrace.unparsed", "socket tracer reports that could not be parsed", "{reports}"
    ),
    CounterSpec(
        "socktrace.lost", "kernel reports the socket tracer lost (perf buffer full)", "{reports}"
    ),
    CounterSpec(
        "sockdiag.connections",
        "TCP connections recorded from destroy notifications",
        "{connections}",
    ),
    CounterSpec(
        "sockdiag.unattributed",
        "destroyed TCP connections no observed process was shown to own (not recorded)",
        "{connections}",
    ),
)
"""The counters of the ``host`` receiver (``receiver.<id>.<name>``)."""


def host_telemetry(telemetry: Telemetry, component_id: str = "host") -> Telemetry:
    """``telemetry`` when it counts for a component already, else scoped to ``component_id``.

    The emitter and context are built by the receiver with a scoped view; tests and tools that
    build them directly with a plain ``Telemetry()`` count as receiver ``host``.
    """
    if telemetry.scope is not None:
        return telemetry
    specs = (*COUNTERS, *STANDARD_COUNTERS[RECEIVER])
    return telemetry.scoped(CounterScope.of(RECEIVER, component_id, specs))
