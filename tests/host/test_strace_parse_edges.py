"""Edge cases of the strace line parser, table-driven over real ``strace -f -ttt -yy`` lines."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import hypothesis.strategies as st
import pytest
from hypothesis import given
from test_host_interpreters import GONE, Harness

from otel_bridge.receivers.host.strace_events import SyscallInterpreter
from otel_bridge.receivers.host.strace_parse import (
    StraceParser,
    Syscall,
    fd_annotation,
    split_args,
    string_arg,
    strings,
    unescape,
)

T = "1796077434.620110"
T_NS = 1_796_077_434_620_110_000

# (line, name, ret, errno, ret annotation); lines copied from real strace 6.x output.
COMPLETE: list[tuple[str, str, int | None, str, str]] = [
    (
        f'17312 {T} openat(AT_FDCWD</tmp>, "/usr/lib/locale/locale-archive", O_RDONLY|O_CLOEXEC)'
        " = -1 ENOENT (No such file or directory)",
        "openat",
        -1,
        "ENOENT",
        "",
    ),
    (
        f'17312 {T} openat(AT_FDCWD</tmp>, "out.txt", O_WRONLY|O_CREAT|O_TRUNC, 0666)'
        " = 3</tmp/out.txt>",
        "openat",
        3,
        "",
        "/tmp/out.txt",
    ),
    (
        f"9 {T} connect(3<TCP:[40310]>, {{sa_family=AF_INET, sin_port=htons(80), "
        'sin_addr=inet_addr("10.0.0.1")}, 16) = -1 EINPROGRESS (Operation now in progress)',
        "connect",
        -1,
        "EINPROGRESS",
        "",
    ),
    (
        f"9 {T} connect(3<TCP:[1]>, {{sa_family=AF_INET, sin_port=htons(1), "
        'sin_addr=inet_addr("127.0.0.1")}, 16) = -1 ECONNREFUSED (Connection refused)',
        "connect",
        -1,
        "ECONNREFUSED",
        "",
    ),
    (f"17312 {T} exit_group(1)   = ?", "exit_group", None, "", ""),
    (
        f"17311 {T} clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD,"
        " child_tidptr=0x7f9443fbfa10) = 17313",
        "clone",
        17313,
        "",
        "",
    ),
    (
        f'5 {T} execve("/usr/bin/sh", ["sh", "-c", "echo \\"hi there\\""], 0x7ffc /* 35 vars */)'
        " = 0",
        "execve",
        0,
        "",
        "",
    ),
    (f"5 {T} dup2(3</tmp/a b>, 1</dev/pts/0>) = 1</tmp/a b>", "dup2", 1, "", "/tmp/a b"),
    (f'5 {T} read(3</tmp/x>, "=", 1) = 1', "read", 1, "", ""),
]


@pytest.mark.parametrize(("line", "name", "ret", "errno", "anno"), COMPLETE)
def test_complete_lines_parse_name_result_errno_and_annotation(
    line: str, name: str, ret: int | None, errno: str, anno: str
) -> None:
    """Each complete line yields one call with its result, errno and -yy result annotation."""
    parser = StraceParser()
    call = parser.feed(line)
    assert call is not None
    assert (call.name, call.ret, call.errno, call.ret_annotation) == (name, ret, errno, anno)
    assert call.time_ns == T_NS
    assert parser.unparsed == 0


def test_execve_args_with_quotes_and_truncation_are_unescaped() -> None:
    """Quoted execve arguments with escaped quotes unescape; a truncated one keeps its prefix."""
    call = StraceParser().feed(
        f'5 {T} execve("/usr/bin/sh", ["sh", "-c", "echo \\"a,b\\" x"...], 0x7ff /* 3 vars */) = 0'
    )
    assert call is not None
    args = split_args(call.args)
    assert len(args) == 3
    assert string_arg(args[0]) == "/usr/bin/sh"
    assert strings(args[1]) == ["sh", "-c", 'echo "a,b" x']


def test_unfinished_resumed_vfork_pair_is_joined_across_interleaving() -> None:
    """A vfork split by another pid's lines is joined with its resumed result (the child pid)."""
    parser = StraceParser()
    lines = [
        f"17311 {T} vfork( <unfinished ...>",
        f"17312 {T} rt_sigprocmask(SIG_SETMASK, [], ~[KILL STOP RTMIN RT_1], 8) = 0",
        f'17312 {T} execve("/usr/bin/cat", ["cat", "/x"], 0x5620 /* 35 vars */ <unfinished ...>',
        f"17311 {T} <... vfork resumed>) = 17312",
        f"17312 {T} <... execve resumed>) = 0",
    ]
    out = [c for c in map(parser.feed, lines) if c is not None]
    assert [(c.pid, c.name, c.ret) for c in out] == [
        (17312, "rt_sigprocmask", 0),
        (17311, "vfork", 17312),
        (17312, "execve", 0),
    ]
    assert strings(split_args(out[2].args)[1]) == ["cat", "/x"]
    assert parser.unparsed == 0


def test_resumed_clone_keeps_flags_from_both_halves() -> None:
    """A clone split mid-arguments keeps the flags of the first half and the rest of the second."""
    parser = StraceParser()
    assert (
        parser.feed(
            f"17313 {T} clone(child_stack=NULL, flags=CLONE_VM|CLONE_THREAD|SIGCHLD"
            " <unfinished ...>"
        )
        is None
    )
    call = parser.feed(f"17313 {T} <... clone resumed>, child_tidptr=0x7f94) = 17314")
    assert call is not None
    assert call.ret == 17314
    assert "CLONE_THREAD" in call.args
    assert "child_tidptr=0x7f94" in call.args


def test_unfinished_exit_group_resumes_with_unknown_result() -> None:
    """exit_group split in two resumes as a call whose result is unknown (None), not an error."""
    parser = StraceParser()
    assert parser.feed(f"7 {T} exit_group(0 <unfinished ...>") is None
    call = parser.feed(f"7 {T} <... exit_group resumed>) = ?")
    assert call == Syscall(7, T_NS, "exit_group", "0", None)


@pytest.mark.parametrize(
    ("rest", "expected"),
    [
        ("+++ exited with 0 +++", ("", 0)),
        ("+++ exited with 255 +++", ("", 255)),
        ("+++ killed by SIGKILL +++", ("SIGKILL", None)),
        ("+++ killed by SIGSEGV (core dumped) +++", ("SIGSEGV", None)),
    ],
)
def test_exit_lines_become_exit_records(rest: str, expected: tuple[str, int | None]) -> None:
    """Process exits and kills become ``+exit`` records carrying code or signal name."""
    call = StraceParser().feed(f"42 {T} {rest}")
    assert call is not None
    assert call.name == "+exit"
    assert (call.args, call.ret) == expected


@pytest.mark.parametrize(
    "rest",
    [
        "--- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=17312, si_status=1} ---",
        "--- stopped by SIGSTOP ---",
        "+++ superseded by execve in pid 12 +++",
    ],
)
def test_signal_and_other_markers_are_skipped_without_counting(rest: str) -> None:
    """Signal deliveries and unknown +++ markers yield nothing and are not counted as unparsed."""
    parser = StraceParser()
    assert parser.feed(f"1 {T} {rest}") is None
    assert parser.unparsed == 0


@pytest.mark.parametrize(
    "line",
    [
        "strace: Process 123 attached",
        "garbage line",
        f'12 {T} write(1, "partial',
    ],
)
def test_noise_is_counted_as_unparsed(line: str) -> None:
    """Lines that are neither calls nor markers are counted, not raised."""
    parser = StraceParser()
    assert parser.feed(line) is None
    assert parser.unparsed == 1


def test_blank_lines_are_ignored_silently() -> None:
    """Blank lines are not counted as unparsed."""
    parser = StraceParser()
    assert parser.feed("\n") is None
    assert parser.feed("   ") is None
    assert parser.unparsed == 0


def test_pending_halves_are_per_pid() -> None:
    """Two pids with unfinished calls each resume their own call."""
    parser = StraceParser()
    parser.feed(f'1 {T} openat(AT_FDCWD</a>, "one", O_RDONLY <unfinished ...>')
    parser.feed(f'2 {T} openat(AT_FDCWD</b>, "two", O_RDONLY <unfinished ...>')
    second = parser.feed(f"2 {T} <... openat resumed>) = 4</b/two>")
    first = parser.feed(f"1 {T} <... openat resumed>) = 3</a/one>")
    assert first is not None
    assert second is not None
    assert string_arg(split_args(first.args)[1]) == "one"
    assert string_arg(split_args(second.args)[1]) == "two"
    assert (first.ret_annotation, second.ret_annotation) == ("/a/one", "/b/two")


def test_short_fraction_timestamp_is_scaled_to_nanoseconds() -> None:
    """A timestamp with fewer than 9 fractional digits is right-padded, not misread."""
    call = StraceParser().feed("3 12.5 getpid() = 3")
    assert call is not None
    assert call.time_ns == 12_500_000_000


@pytest.mark.parametrize(
    ("arg", "anno"),
    [
        ("AT_FDCWD</home/u>", "/home/u"),
        ("3<TCP:[127.0.0.1:80->127.0.0.1:5000]>", "TCP:[127.0.0.1:80->127.0.0.1:5000]"),
        ("-1", ""),
        ('"plain"', ""),
    ],
)
def test_fd_annotation_table(arg: str, anno: str) -> None:
    """Descriptor annotations are extracted from dir fds and sockets; plain args have none."""
    assert fd_annotation(arg) == anno


@pytest.mark.parametrize(
    ("escaped", "plain"),
    [
        ("a\\nb", "a\nb"),
        ('say \\"hi\\"', 'say "hi"'),
        ("\\x41\\x42", "AB"),
        ("\\101", "A"),
        ("\\0", "\0"),
        ("tab\\there", "tab\there"),
        ("back\\\\slash", "back\\slash"),
        ("\\303\\251", "é"),
    ],
)
def test_unescape_table(escaped: str, plain: str) -> None:
    """strace's C escapes (hex, octal, named, utf-8 byte sequences) decode to the original text."""
    assert unescape(escaped) == plain


@given(st.lists(st.text(alphabet="ab,[]{}() \"'\\", max_size=6), min_size=1, max_size=5))
def test_split_args_of_quoted_strings_round_trips(values: list[str]) -> None:
    """Quoted, escaped strings joined by commas split back into exactly the same values."""
    quoted = ['"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values]
    parts = split_args(", ".join(quoted))
    assert [string_arg(p) for p in parts] == values


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
def test_real_strace_output_parses_completely() -> None:
    """A real traced shell run parses with no unparsed lines and yields its exec, open and exit."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace")
        target = os.path.join(tmp, "made.txt")
        subprocess.run(
            [
                "strace",
                "-f",
                "-ttt",
                "-yy",
                "-o",
                out,
                "sh",
                "-c",
                f"cat /nonexistent-{os.getpid()} 2>/dev/null; echo x > {target}; exit 3",
            ],
            check=False,
            timeout=10,
        )
        parser = StraceParser()
        with open(out, encoding="utf-8", errors="surrogateescape") as f:
            calls = [c for c in map(parser.feed, f) if c is not None]
    assert parser.unparsed == 0
    execs = [c for c in calls if c.name == "execve" and c.ret == 0]
    assert any(strings(split_args(c.args)[1])[:1] == ["cat"] for c in execs)
    failed = [c for c in calls if c.name == "openat" and c.errno == "ENOENT"]
    assert any(f"/nonexistent-{os.getpid()}" in c.args for c in failed)
    opened = [c for c in calls if c.name == "openat" and c.ret_annotation == target]
    assert opened
    assert opened[0].ret is not None
    assert opened[0].ret >= 0
    exits = [c for c in calls if c.name == "+exit"]
    assert 3 in [c.ret for c in exits]
    assert len(exits) >= 2


def test_dirfd_path_containing_angle_bracket_resolves_relative_path() -> None:
    """A relative unlinkat under a directory named with '>' resolves against the full directory."""
    h = Harness()
    interp = SyscallInterpreter(h.ctx)
    call = StraceParser().feed(f'{GONE} {T} unlinkat(3</tmp/a>b>, "f.txt", 0) = 0')
    assert call is not None
    interp.handle(call)
    (rec,) = h.named("file.delete")
    assert rec["file.path"] == "/tmp/a>b/f.txt"


def test_listen_on_socket_annotation_reports_local_endpoint() -> None:
    """listen on a -yy annotated TCP socket emits network.listen with its address and port."""
    h = Harness()
    interp = SyscallInterpreter(h.ctx)
    call = StraceParser().feed(f"{GONE} {T} listen(3<TCP:[127.0.0.1:8080]>, 128) = 0")
    assert call is not None
    interp.handle(call)
    (rec,) = h.named("network.listen")
    assert (rec["network.local.address"], rec["network.local.port"]) == ("127.0.0.1", 8080)
    assert rec["network.transport"] == "tcp"
