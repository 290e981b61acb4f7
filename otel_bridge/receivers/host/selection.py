"""Backend selection: an explicit backend, or ``auto`` = the strongest that works here.

``auto`` tries ``linux`` (kernel-pushed process events, fanotify; no tracing cost), then
``ebpf`` (syscall tracepoints; several seconds to compile and attach), then ``strace`` (ptrace:
complete syscalls but the highest overhead), then ``portable`` (sampling; always works). Each
backend that cannot run raises :class:`BackendUnavailableError` with its reason; ``auto`` records
every reason and continues (also when a backend fails while starting, e.g. bpftrace cannot
attach), so the summary says which backend was chosen and why the stronger ones were not. A
plane the chosen backend reports unavailable or not sampled goes to the next backend that works
(per-plane ``auto``). The loop lives in :meth:`otel_bridge.receivers.host.HostReceiver.start`.
"""

from __future__ import annotations

from otel_bridge.errors import BackendUnavailableError
from otel_bridge.receivers.host.backend import Backend
from otel_bridge.receivers.host.config import AUTO_ORDER, HostConfig

# Each backend's module is imported when that backend is tried, not before: the ``portable`` one
# pulls psutil and watchdog, ``ebpf`` and ``strace`` their parsers, none of which a run of the
# ``linux`` backend needs (issue 11: the fixed cost of ``observe`` is mostly imports).


def create_backend(name: str, config: HostConfig) -> Backend:
    """Construct backend ``name``; raises ``BackendUnavailableError`` when it cannot run."""
    if name == "linux":
        from otel_bridge.receivers.host.linux import LinuxBackend  # noqa: PLC0415

        return LinuxBackend()
    if name == "ebpf":
        from otel_bridge.receivers.host.ebpf import EbpfBackend  # noqa: PLC0415

        return EbpfBackend(config.bpftrace_path)
    if name == "strace":
        from otel_bridge.receivers.host.strace import StraceBackend  # noqa: PLC0415

        return StraceBackend(config.strace_path)
    if name == "portable":
        from otel_bridge.receivers.host.portable import PortableBackend  # noqa: PLC0415

        return PortableBackend()
    raise BackendUnavailableError(f"unknown host backend {name!r}")


def probe_backends(config: HostConfig) -> list[tuple[str, str]]:
    """``(name, "")`` for each backend that can run here, ``(name, reason)`` for the others.

    Construction is the availability check; a constructed backend holds no resources.
    """
    out: list[tuple[str, str]] = []
    for name in AUTO_ORDER:
        try:
            create_backend(name, config)
        except BackendUnavailableError as exc:
            out.append((name, str(exc) or name))
        else:
            out.append((name, ""))
    return out
