"""Parsers of the host backends: strace lines, bpftrace %r sockaddrs, /proc/net rows, netlink."""

from __future__ import annotations

import socket
import struct

import hypothesis.strategies as st
from hypothesis import given

from otel_bridge.receivers.host.ebpf_lines import decode_r, decode_sockaddr
from otel_bridge.receivers.host.linux import (
    PROC_EVENT_EXEC,
    PROC_EVENT_EXIT,
    PROC_EVENT_FORK,
    exit_code_of,
    parse_messages,
)
from otel_bridge.receivers.host.netscan import decode_address
from otel_bridge.receivers.host.strace_events import (
    open_access,
    open_flags_text,
    parse_sockaddr,
)
from otel_bridge.receivers.host.strace_parse import (
    StraceParser,
    fd_annotation,
    split_args,
    strings,
    unescape,
)


def test_strace_complete_call() -> None:
    """A complete openat line yields its name, args, result and -yy path annotation."""
    line = (
        '123 1700000000.123456 openat(AT_FDCWD</tmp>, "f.txt", O_WRONLY|O_CREAT|O_TRUNC, 0666)'
        " = 3</tmp/f.txt>"
    )
    call = StraceParser().feed(line)
    assert call is not None
    assert (call.pid, call.name, call.ret, call.ret_annotation) == (123, "openat", 3, "/tmp/f.txt")
    assert call.time_ns == 1_700_000_000_123_456_000
    assert split_args(call.args)[2] == "O_WRONLY|O_CREAT|O_TRUNC"


def test_strace_failed_call_has_errno() -> None:
    """A failed call carries -1 and its errno name."""
    call = StraceParser().feed(
        "7 1.5 connect(3<TCP:[1]>, {sa_family=AF_INET, sin_port=htons(1), "
        'sin_addr=inet_addr("127.0.0.1")}, 16) = -1 ECONNREFUSED (Connection refused)'
    )
    assert call is not None
    assert (call.ret, call.errno) == (-1, "ECONNREFUSED")


def test_strace_unfinished_and_resumed_join() -> None:
    """An unfinished call and its resumption from the same pid become one call."""
    parser = StraceParser()
    assert parser.feed("10 1.0 vfork( <unfinished ...>") is None
    assert (
        parser.feed('11 1.1 execve("/bin/true", ["true"], 0x1 /* 3 vars */ <unfinished ...>')
        is None
    )
    fork = parser.feed("10 1.2 <... vfork resumed>) = 11")
    assert fork is not None
    assert (fork.name, fork.ret) == ("vfork", 11)
    execve = parser.feed("11 1.3 <... execve resumed>) = 0")
    assert execve is not None
    assert execve.name == "execve"
    assert strings(execve.args) == ["/bin/true", "true"]


def test_strace_exit_and_kill_lines() -> None:
    """Exit and kill markers become +exit pseudo-calls; signals and noise are skipped."""
    parser = StraceParser()
    exited = parser.feed("5 2.0 +++ exited with 7 +++")
    killed = parser.feed("6 2.0 +++ killed by SIGKILL +++")
    assert exited is not None
    assert (exited.name, exited.ret) == ("+exit", 7)
    assert killed is not None
    assert (killed.ret, killed.args) == (None, "SIGKILL")
    assert parser.feed("5 2.0 --- SIGCHLD {si_signo=SIGCHLD} ---") is None
    assert parser.feed("garbage") is None
    assert parser.unparsed == 1


def _c_escape(text: str) -> str:
    out = []
    for b in text.encode():
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif 32 <= b < 127:
            out.append(c)
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


@given(st.text(max_size=40))
def test_unescape_inverts_c_escaping(text: str) -> None:
    """unescape undoes strace's C escaping for any string."""
    assert unescape(_c_escape(text)) == text


@given(st.lists(st.text(max_size=10), max_size=5))
def test_split_args_respects_strings(values: list[str]) -> None:
    """Quoted arguments with commas and brackets split into exactly one part each."""
    args = ", ".join(f'"{_c_escape(v)}"' for v in values)
    parts = split_args(args)
    assert [unescape(p[1:-1]) for p in parts] == values


def test_fd_annotation_and_sockaddr() -> None:
    """-yy descriptor annotations and sockaddr renderings are decoded."""
    assert fd_annotation("3</tmp/x>") == "/tmp/x"
    assert fd_annotation("AT_FDCWD</home>") == "/home"
    assert parse_sockaddr(
        '{sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("1.2.3.4")}'
    ) == ("inet", "1.2.3.4", 80)
    assert parse_sockaddr(
        "{sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), "
        'inet_pton(AF_INET6, "::1", &sin6_addr)}'
    ) == ("inet6", "::1", 443)
    assert parse_sockaddr('{sa_family=AF_UNIX, sun_path="/run/x.sock"}') == (
        "unix",
        "/run/x.sock",
        0,
    )
    assert parse_sockaddr("{sa_family=AF_NETLINK}") is None


def test_open_flags() -> None:
    """Numeric and symbolic open flags map to the access mode."""
    assert open_access("O_RDONLY|O_CLOEXEC") == "read"
    assert open_access("O_WRONLY|O_CREAT") == "write"
    assert open_access("O_RDWR") == "read_write"
    assert open_flags_text(0o1101) == "O_WRONLY|O_CREAT|O_TRUNC"
    assert open_flags_text(0o2000000) == "O_RDONLY|O_CLOEXEC"


def _render_r(data: bytes) -> str:
    return "".join(chr(b) if 32 < b < 127 and b != 92 else f"\\x{b:02x}" for b in data)


@given(st.binary(max_size=32))
def test_decode_r_inverts_bpftrace_rendering(data: bytes) -> None:
    """decode_r recovers the bytes bpftrace's %r printed."""
    assert decode_r(_render_r(data)) == data


def test_decode_sockaddr() -> None:
    """Raw sockaddr_in/in6 bytes decode to family, address and port."""
    v4 = struct.pack("<H", socket.AF_INET) + struct.pack(">H", 8080) + socket.inet_aton("127.0.0.1")
    assert decode_sockaddr(v4 + bytes(8)) == ("inet", "127.0.0.1", 8080)
    v6 = (
        struct.pack("<H", socket.AF_INET6)
        + struct.pack(">H", 443)
        + bytes(4)
        + socket.inet_pton(socket.AF_INET6, "::1")
        + bytes(4)
    )
    assert decode_sockaddr(v6) == ("inet6", "::1", 443)
    assert decode_sockaddr(b"\x01\x00") is None


def test_proc_net_address_decoding() -> None:
    """/proc/net/tcp{,6} hex addresses decode (little-endian words), v4-mapped v6 to v4."""
    assert decode_address("0100007F:1F90") == ("127.0.0.1", 8080)
    assert decode_address("00000000000000000000000001000000:0050") == ("::1", 80)
    assert decode_address("0000000000000000FFFF00000100007F:0016") == ("127.0.0.1", 22)


def _netlink(what: int, fields: bytes) -> bytes:
    event = struct.pack("=IIQ", what, 0, 123456789) + fields
    cn = struct.pack("=IIIIHH", 1, 1, 0, 0, len(event), 0) + event
    return struct.pack("=IHHII", 16 + len(cn), 3, 0, 0, 0) + cn


def test_proc_connector_messages() -> None:
    """Fork, exec and exit proc_event structs parse into their fields."""
    data = (
        _netlink(PROC_EVENT_FORK, struct.pack("=IIII", 10, 10, 11, 11))
        + _netlink(PROC_EVENT_EXEC, struct.pack("=II", 11, 11))
        + _netlink(PROC_EVENT_EXIT, struct.pack("=IIIIII", 11, 11, 3 << 8, 17, 10, 10))
    )
    events = parse_messages(data)
    assert [e[0] for e in events] == [PROC_EVENT_FORK, PROC_EVENT_EXEC, PROC_EVENT_EXIT]
    assert events[0][2] == (10, 10, 11, 11)
    assert events[1][1] == 123456789
    assert exit_code_of(events[2][2][2]) == 3
    assert exit_code_of(9) == -9
