"""The restricted command parser: what it accepts, what it refuses, and why."""

from __future__ import annotations

import pytest

from otel_bridge.processors.correlate.parser import (
    ParsedCommand,
    Unsupported,
    is_interpreter,
    normalize_exe,
    parse_command,
    resolve_head,
)

ACCEPT = [
    ("ls -la", "ls", ("-la",), True),
    ("/usr/bin/git status", "/usr/bin/git", ("status",), True),
    ("python3 'a;b' \"c|d\"", "python3", ("a;b", "c|d"), True),
    ("FOO='x y' BAR=1 make test", "make", ("test",), True),
    ("grep -n 'a && b' f.txt", "grep", ("-n", "a && b", "f.txt"), True),
    ("git commit -m 'fix # 3'", "git", ("commit", "-m", "fix # 3"), True),
    ("ls a\\ b", "ls", ("a b",), True),
    ("echo hi # a comment; rm -rf /", "echo", ("hi",), True),
    ("ls $HOME", "ls", ("$HOME",), False),
    ('ls "$HOME"', "ls", ("$HOME",), False),
    ("ls '$HOME'", "ls", ("$HOME",), True),
    ("ls *.py", "ls", ("*.py",), False),
    ("./run.sh --fast", "./run.sh", ("--fast",), True),
]

REJECT = [
    ("", "empty", ""),
    ("   ", "empty", ""),
    ("ls; rm x", "control_operator", "sequence"),
    ("make && make test", "control_operator", "and_list"),
    ("make || true", "control_operator", "or_list"),
    ("ls | wc -l", "control_operator", "pipe"),
    ("sleep 10 &", "control_operator", "background"),
    ("ls > out.txt", "control_operator", "redirection"),
    ("cat < in.txt", "control_operator", "redirection"),
    ("ls 2>&1", "control_operator", "redirection"),
    ("(cd /tmp)", "control_operator", "subshell"),
    ("diff <(ls a) <(ls b)", "control_operator", "redirection"),
    ("ls\nrm x", "control_operator", "newline"),
    ("echo $(whoami)", "command_substitution", "$("),
    ('echo "$(whoami)"', "command_substitution", "$("),
    ("echo '$(whoami)'", "command_substitution", "$("),
    ("echo `whoami`", "command_substitution", "backtick"),
    ("echo '`whoami`'", "command_substitution", "backtick"),
    ("echo $((1+2))", "command_substitution", "$("),
    ("cd /tmp", "builtin", "cd"),
    ("export A=1", "builtin", "export"),
    ("source env.sh", "builtin", "source"),
    (". env.sh", "builtin", "."),
    ("eval ls", "builtin", "eval"),
    ("alias ll=ls", "builtin", "alias"),
    ("exec ls", "builtin", "exec"),
    ("if true", "builtin", "if"),
    ("A=1", "builtin", "assignment_only"),
    ("$EDITOR file", "expansion_in_head", "$EDITOR"),
    ("~/bin/tool", "expansion_in_head", "~/bin/tool"),
    ("echo 'open", "unbalanced_quotes", ""),
]


@pytest.mark.parametrize(("line", "head", "args", "stable"), ACCEPT)
def test_accepts(line: str, head: str, args: tuple[str, ...], stable: bool) -> None:
    """Plain commands parse to their executable head and argument words."""
    got = parse_command(line)
    assert isinstance(got, ParsedCommand), got
    assert (got.head, got.args, got.args_stable) == (head, args, stable)


@pytest.mark.parametrize(("line", "reason", "detail"), REJECT)
def test_rejects(line: str, reason: str, detail: str) -> None:
    """Shell control syntax, substitutions and built-ins are refused with their reason."""
    got = parse_command(line)
    assert isinstance(got, Unsupported), got
    assert got.reason == reason
    if detail:
        assert got.detail == detail


def test_assignment_prefix_kept() -> None:
    """Variable-assignment prefixes are stripped from the head and kept."""
    got = parse_command("A=1 B='two words' pytest -q")
    assert isinstance(got, ParsedCommand)
    assert got.assignments == ("A=1", "B=two words")
    assert got.head == "pytest"


@pytest.mark.parametrize(
    ("name", "norm"),
    [
        ("/usr/bin/python3.11", "python"),
        ("python3", "python"),
        ("C:\\Tools\\Git.EXE", "git"),
        ("node18", "node"),
        ("ls", "ls"),
        ("x2goclient", "x2goclient"),
    ],
)
def test_normalize_exe(name: str, norm: str) -> None:
    """Basenames are normalized: directory, case, .exe and interpreter versions dropped."""
    assert normalize_exe(name) == norm


def test_interpreters() -> None:
    """Interpreters, shells and launchers are recognized in any spelling; tools are not."""
    for name in ("python3.12", "/bin/bash", "sh", "node", "env", "uv", "npx", "java", "perl"):
        assert is_interpreter(name), name
    for name in ("ls", "git", "pytest", "make"):
        assert not is_interpreter(name), name


def test_resolve_head() -> None:
    """Path heads resolve against the process working directory; bare names do not."""
    assert resolve_head("./run.sh", "/work") == "/work/run.sh"
    assert resolve_head("/usr/bin/../bin/ls", None) == "/usr/bin/ls"
    assert resolve_head("ls", "/work") is None
    assert resolve_head("bin/x", None) is None
