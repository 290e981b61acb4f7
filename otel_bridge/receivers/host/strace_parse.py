"""Incremental parser of ``strace -f -ttt -yy -o FILE`` output into typed syscall records.

Lines look like ``PID SECONDS.MICROS name(args) = result``; with ``-f`` a call interrupted by
another process's output is split into ``name(args <unfinished ...>`` and
``<... name resumed>rest``, which :class:`StraceParser` joins per pid. ``-yy`` annotates
descriptors with their path (``3</tmp/f>``) or socket (``3<TCP:[127.0.0.1:80]>``), which is how
relative paths and listening addresses are resolved without reading ``/proc``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"^(?P<pid>\d+)\s+(?P<ts>\d+\.\d+)\s+(?P<rest>.*)$")
_CALL = re.compile(r"^(?P<name>\w+)\((?P<args>.*)\)\s+=\s+(?P<ret>.*)$", re.DOTALL)
_UNFINISHED = re.compile(r"^(?P<name>\w+)\((?P<args>.*?)\s*<unfinished \.\.\.>$")
_RESUMED = re.compile(r"^<\.\.\. (?P<name>\w+) resumed>(?P<rest>.*)$")
_EXITED = re.compile(r"^\+\+\+ exited with (?P<code>\d+) \+\+\+$")
_KILLED = re.compile(r"^\+\+\+ killed by (?P<sig>SIG\w+)(?: \(core dumped\))? \+\+\+$")
_RET = re.compile(r"^(?P<value>-?\d+|\?)(?:<(?P<anno>.*)>)?(?:\s+(?P<errno>E[A-Z0-9]+))?")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"(\.\.\.)?')
_FD_ANNO = re.compile(r"^(?P<fd>-?\d+|AT_FDCWD)<(?P<anno>.*)>$")
"""Anchored at the end: a path or a connected socket (``TCP:[a:1->b:2]``) may contain ``>``."""
_DEVICE = re.compile(r"<(?:char|block) \d+:\d+>$")
"""The suffix ``-yy`` gives a device's path (``/dev/null<char 1:3>``)."""


@dataclass(frozen=True, slots=True)
class Syscall:
    """One completed system call (or a process exit, ``name`` ``+exit``)."""

    pid: int
    time_ns: int
    name: str
    args: str
    ret: int | None
    """The numeric result; None for ``?`` (exit_group, exec in the new image)."""
    ret_annotation: str = ""
    """The ``-yy`` annotation of a returned descriptor (the opened path)."""
    errno: str = ""


def unescape(text: str) -> str:
    """Undo strace's C-style string escaping (``\\n``, ``\\"``, ``\\x41``, octal)."""
    if "\\" not in text:
        return text
    out = bytearray()
    i = 0
    raw = text.encode("utf-8", "surrogateescape")
    simple = {ord("n"): 10, ord("t"): 9, ord("r"): 13, ord("v"): 11, ord("f"): 12}
    while i < len(raw):
        c = raw[i]
        if c != 0x5C or i + 1 >= len(raw):
            out.append(c)
            i += 1
            continue
        n = raw[i + 1]
        if n == ord("x") and i + 3 < len(raw) + 1:
            out.append(int(raw[i + 2 : i + 4], 16))
            i += 4
        elif 0x30 <= n <= 0x37:
            j = i + 1
            while j < len(raw) and j < i + 4 and 0x30 <= raw[j] <= 0x37:
                j += 1
            out.append(int(raw[i + 1 : j], 8) & 0xFF)
            i = j
        else:
            out.append(simple.get(n, n))
            i += 2
    return out.decode("utf-8", "surrogateescape")


def strings(args: str) -> list[str]:
    """Every quoted string in an argument list, unescaped, in order."""
    return [unescape(m.group(1)) for m in _STRING.finditer(args)]


def split_args(args: str) -> list[str]:
    """Top-level comma-separated arguments (brackets, braces and strings respected)."""
    parts: list[str] = []
    depth = 0
    in_str = False
    escaped = False
    current: list[str] = []
    for ch in args:
        if in_str:
            current.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    if current:
        parts.append("".join(current).strip())
    return parts


def exec_environment(arg: str) -> tuple[dict[str, str], bool] | None:
    """The environment an ``execve`` passed (its ``envp`` argument, printed in full because the
    tracer runs with ``-e abbrev=!execve,execveat``), and whether every entry is complete.

    None when strace printed no array (``0x7ffd... /* 25 vars */``): nothing observed. Entries
    whose value strace cut at ``-s`` are left out, and a cut value or array makes the second
    item False: a name missing from an incomplete environment was not observed absent.
    """
    text = arg.strip()
    if not text.startswith("["):
        return None
    env: dict[str, str] = {}
    complete = "..." not in _STRING.sub("", text)
    for m in _STRING.finditer(text):
        name, sep, value = unescape(m.group(1)).partition("=")
        if m.group(2) or not sep:
            complete = complete and not m.group(2)
            continue
        env[name] = value
    return env, complete


def fd_annotation(arg: str) -> str:
    """The ``-yy`` annotation of a descriptor argument (``3</tmp/x>`` -> ``/tmp/x``)."""
    m = _FD_ANNO.match(arg.strip())
    return m.group("anno") if m else ""


def annotated_path(anno: str) -> str:
    """The path in a ``-yy`` descriptor annotation of a file (``fd_annotation``, a returned
    descriptor's ``ret_annotation``).

    strace writes the path C-escaped, like its strings (``<`` and ``>`` as ``\\74`` and ``\\76``,
    every byte outside printable ASCII in octal: ``caf\\303\\251.txt`` is ``café.txt``), and
    adds ``<char M:N>`` or ``<block M:N>`` after a device's path. Since a ``<`` of the path
    itself is always escaped, that suffix is never part of the name."""
    return unescape(_DEVICE.sub("", anno))


def string_arg(arg: str) -> str | None:
    """The unescaped value of a quoted argument, or None."""
    m = _STRING.match(arg.strip())
    return unescape(m.group(1)) if m else None


class StraceParser:
    """Turns lines into :class:`Syscall` records, joining unfinished/resumed halves."""

    def __init__(self) -> None:
        self._pending: dict[int, tuple[str, str]] = {}
        self.unparsed = 0

    def feed(self, line: str) -> Syscall | None:
        """The completed call on ``line``, or None (a half call, a signal, noise)."""
        m = _LINE.match(line.rstrip("\n"))
        if m is None:
            if line.strip():
                self.unparsed += 1
            return None
        pid = int(m.group("pid"))
        sec, _, frac = m.group("ts").partition(".")
        time_ns = int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])
        rest = m.group("rest")
        if rest.startswith("+++"):
            exited = _EXITED.match(rest)
            if exited:
                return Syscall(pid, time_ns, "+exit", "", int(exited.group("code")))
            killed = _KILLED.match(rest)
            if killed:
                return Syscall(pid, time_ns, "+exit", killed.group("sig"), None)
            return None
        if rest.startswith("---"):
            return None
        unfinished = _UNFINISHED.match(rest)
        if unfinished:
            self._pending[pid] = (unfinished.group("name"), unfinished.group("args"))
            return None
        resumed = _RESUMED.match(rest)
        if resumed:
            name, head = self._pending.pop(pid, (resumed.group("name"), ""))
            rest = f"{name}({head}{resumed.group('rest')}"
        call = _CALL.match(rest)
        if call is None:
            self.unparsed += 1
            return None
        ret = _RET.match(call.group("ret").strip())
        value: int | None = None
        anno = errno = ""
        if ret is not None:
            raw = ret.group("value")
            value = None if raw == "?" else int(raw)
            anno = ret.group("anno") or ""
            errno = ret.group("errno") or ""
        return Syscall(pid, time_ns, call.group("name"), call.group("args"), value, anno, errno)
