"""Edge cases of the bpftrace line interpreter: paths with spaces, signals, toggles, bad lines."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest
from test_host_interpreters import GONE, Harness

from otel_bridge.model import CollectionState
from otel_bridge.receivers.host.ebpf_lines import BpftraceInterpreter, decode_r, decode_sockaddr
from otel_bridge.receivers.host.procfs import read_process


def _raw(data: bytes) -> str:
    """bpftrace's ``%r`` rendering: printable ASCII literal, everything else ``\\xHH``."""
    return "".join(chr(b) if 0x21 <= b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in data)


def _v4(port: int, addr: str = "127.0.0.1") -> bytes:
    return struct.pack("<H", socket.AF_INET) + struct.pack(">H", port) + socket.inet_aton(addr)


def _v6(port: int, addr: str) -> bytes:
    return (
        struct.pack("<H", socket.AF_INET6)
        + struct.pack(">H", port)
        + bytes(4)
        + socket.inet_pton(socket.AF_INET6, addr)
        + bytes(4)
    )


def test_open_path_with_spaces_is_kept_whole() -> None:
    """An O line whose path contains spaces yields the full path, not its first word."""
    h = Harness()
    BpftraceInterpreter(h.ctx).handle_line(f"O {GONE} 5 3 0 /tmp/my dir/a file.txt")
    (rec,) = h.named("file.open")
    assert rec["file.path"] == "/tmp/my dir/a file.txt"
    assert (rec["file.open.flags"], rec["file.access"]) == ("O_RDONLY", "read")


def test_exec_path_with_spaces_is_reported_when_process_is_gone() -> None:
    """An e/E pair for a vanished pid reports the execve path including spaces."""
    h = Harness()
    lines = BpftraceInterpreter(h.ctx)
    lines.handle_line(f"e {GONE} 10 /opt/my tools/run me")
    lines.handle_line(f"E {GONE} 11 0")
    (rec,) = h.named("process.exec")
    assert rec["process.executable.path"] == "/opt/my tools/run me"


def test_failed_exec_emits_nothing_and_forgets_the_path() -> None:
    """A failed execve emits no exec; a later successful one does not reuse the stale path."""
    h = Harness()
    lines = BpftraceInterpreter(h.ctx)
    lines.handle_line(f"e {GONE} 10 /no/such")
    lines.handle_line(f"E {GONE} 11 -2")
    lines.handle_line(f"E {GONE} 12 0")
    (rec,) = h.named("process.exec")
    assert rec.get("process.executable.path", "") != "/no/such"


def test_exit_killed_by_signal_is_negative_signal_number() -> None:
    """An X line whose status is a signal termination reports minus the signal number."""
    h = Harness()
    BpftraceInterpreter(h.ctx).handle_line(f"X {GONE} 20 9")
    (rec,) = h.named("process.exit")
    assert rec["process.exit.code"] == -9


def test_relative_open_without_known_cwd_stays_relative() -> None:
    """A relative path of an unknown process is not joined to a made-up directory."""
    h = Harness()
    BpftraceInterpreter(h.ctx).handle_line(f"O {GONE + 7} 5 3 0 rel/x")
    (rec,) = h.named("file.open")
    assert rec["file.path"] == "rel/x"


def test_relative_open_is_normalised_against_cwd() -> None:
    """``..`` segments of a relative path are resolved against the process cwd."""
    h = Harness()
    BpftraceInterpreter(h.ctx).handle_line(f"O {GONE} 5 3 {0o2} ../etc/./hosts")
    (rec,) = h.named("file.open")
    assert rec["file.path"] == "/etc/hosts"
    assert rec["file.access"] == "read_write"


@pytest.mark.parametrize(
    ("toggle", "line", "event"),
    [
        ("files", f"O {GONE} 5 3 0 /tmp/x", "file.open"),
        ("network", f"C {GONE} 5 0 {_raw(_v4(80))}", "network.connect"),
        ("processes", f"X {GONE} 5 0", "process.exit"),
        ("processes", f"F {GONE} {GONE + 1} 5", "process.start"),
    ],
)
def test_disabled_collection_emits_nothing(toggle: str, line: str, event: str) -> None:
    """With a collection turned off, its lines produce no records."""
    h = Harness(**{toggle: False})
    BpftraceInterpreter(h.ctx).handle_line(line)
    assert h.named(event) == []


def test_fork_adds_child_to_lineage_even_without_process_events() -> None:
    """An F line adds the child to the lineage so its later events are attributed."""
    h = Harness(processes=False)
    BpftraceInterpreter(h.ctx).handle_line(f"F {GONE} {GONE + 3} 5")
    assert GONE + 3 in h.ctx.lineage.snapshot()


def test_ipv6_connect_and_unknown_errno() -> None:
    """IPv6 peers decode; an errno outside the table is reported as ``errno N``."""
    h = Harness()
    lines = BpftraceInterpreter(h.ctx)
    lines.handle_line(f"C {GONE} 5 0 {_raw(_v6(443, '::1'))}")
    lines.handle_line(f"C {GONE} 6 -99 {_raw(_v6(443, '2001:db8::7'))}")
    (ok,) = h.named("network.connect")
    assert (ok["network.peer.address"], ok["network.peer.port"]) == ("::1", 443)
    (bad,) = h.named("network.connect_attempt")
    assert bad["network.peer.address"] == "2001:db8::7"
    assert (bad["network.connect.result"], bad["error.type"]) == ("failed", "errno 99")


def test_unix_socket_connect_is_ignored() -> None:
    """A connect to an AF_UNIX address (not decodable as inet) emits nothing."""
    h = Harness()
    raw = struct.pack("<H", socket.AF_UNIX) + b"/run/x.sock\x00" + bytes(14)
    BpftraceInterpreter(h.ctx).handle_line(f"C {GONE} 5 0 {_raw(raw)}")
    assert h.named("network.connect") == []
    assert h.named("network.connect_attempt") == []


def test_event_time_is_converted_from_monotonic_to_wall_clock() -> None:
    """Record time is the monotonic stamp shifted to wall-clock, close to now for a fresh stamp."""
    h = Harness()
    BpftraceInterpreter(h.ctx).handle_line(f"O {GONE} {time.monotonic_ns()} 3 0 /x")
    h.emitter.flush()
    (log,) = h.sink.logs
    assert abs(log.time_unix_nano - time.time_ns()) < 5_000_000_000


@pytest.mark.parametrize("line", ["O notapid 1 2 3 /x", "X 1", f"C {GONE} 5", "F 1 2"])
def test_malformed_lines_raise_value_or_index_error(line: str) -> None:
    """Malformed lines raise ValueError/IndexError, the two the reader loop counts as unparsed."""
    h = Harness()
    with pytest.raises((ValueError, IndexError)):
        BpftraceInterpreter(h.ctx).handle_line(line)


@pytest.mark.parametrize("line", ["READY", "", "Attaching 7 probes...", "? 1 2 3"])
def test_banner_and_unknown_lines_are_ignored(line: str) -> None:
    """The READY banner, bpftrace chatter and unknown kinds produce no records."""
    h = Harness()
    BpftraceInterpreter(h.ctx).handle_line(line)
    assert h.records() == []


def test_lost_line_does_not_upgrade_unavailable_collections() -> None:
    """A lost-events line degrades only available collections; unavailable ones stay so."""
    h = Harness()
    h.ctx.collection_state("file", CollectionState.UNAVAILABLE, "no fanotify")
    h.ctx.collection_state("network", CollectionState.AVAILABLE, "ok")
    lines = BpftraceInterpreter(h.ctx)
    lines.handle_line("Lost 3 events")
    lines.handle_line("Lost 4 events")
    assert lines.lost == 2
    assert h.ctx.states["file"][0] == CollectionState.UNAVAILABLE
    assert h.ctx.states["network"][0] == CollectionState.DEGRADED


def test_decode_r_of_backslash_escape_and_short_sockaddr() -> None:
    """``\\\\`` decodes to one backslash; a sockaddr shorter than 8 bytes decodes to None."""
    assert decode_r("a\\\\b") == b"a\\b"
    assert decode_sockaddr(b"\x02\x00\x00") is None
    assert decode_sockaddr(struct.pack("<H", socket.AF_INET6) + bytes(10)) is None


def test_exec_of_live_process_reads_real_identity() -> None:
    """An exec line for this live test process reports its real executable from /proc."""
    h = Harness(root=os.getpid())
    real = read_process(os.getpid(), h.ctx.redactor)
    assert real is not None
    h.ctx.events.remember(real)  # the image is only read for the identity the receiver knows
    lines = BpftraceInterpreter(h.ctx)
    lines.handle_line(f"e {os.getpid()} 10 /bogus/path")
    lines.handle_line(f"E {os.getpid()} 11 0")
    (rec,) = h.named("process.exec")
    assert rec["process.executable.path"] == os.path.realpath(f"/proc/{os.getpid()}/exe")
    assert rec["process.pid"] == os.getpid()
