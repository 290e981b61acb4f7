"""The restricted command parser of the singleton bridge (ExecWeave section V-D).

It extracts the executable head and the arguments of a declared command line, or says why it will
not. It is *not* a shell interpreter: anything whose process image a shell would not start
directly, or whose argument vector a shell would rewrite beyond recognition, is refused.

Rejected anywhere outside quotes (reason ``control_operator``, detail naming the operator):
``;``, ``&&``, ``||``, ``|``, ``&`` (backgrounding), redirections ``<``/``>`` (also ``2>``,
``<<``, ``<(``), grouping/subshells ``(``/``)``, and a newline (a second command).
Rejected anywhere, *also inside quotes* (reason ``command_substitution``): ``$(`` (also ``$((``)
and backticks; a double-quoted ``"$(...)"`` still runs a command, and single quotes are not worth
telling apart for a heuristic that must stay conservative.
Rejected heads: shell built-ins and keywords with no standalone executable (``cd``, ``export``,
``source``, ``.``, ``eval``, ``alias``, ``exec``, ``if``, ``for`` ... reason ``builtin``), a head
containing an expansion (``$VAR``, ``~``, a glob: reason ``expansion_in_head``), unbalanced quotes
(``unbalanced_quotes``) and an empty line (``empty``).

Decisions documented here because the paper leaves them open:

* **Variable-assignment prefixes are allowed** (``FOO=1 BAR=2 make test``): they set the
  environment of the one process the shell starts, whose image is the next word. They are
  stripped and kept in :attr:`ParsedCommand.assignments`. A line of assignments only is
  ``builtin`` (no process starts).
* **Expansions in arguments** (``$VAR``, ``${...}``, ``~``, ``*``, ``?``, ``[``) do not reject the
  command but mark its arguments unstable (:attr:`ParsedCommand.args_stable` false): the process's
  argv will differ from the declared text, so the argument-tail route is not offered for it.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
from dataclasses import dataclass

BUILTINS: frozenset[str] = frozenset(
    {
        ".",
        ":",
        "alias",
        "bg",
        "bind",
        "break",
        "builtin",
        "caller",
        "cd",
        "command",
        "compgen",
        "complete",
        "continue",
        "declare",
        "dirs",
        "disown",
        "enable",
        "eval",
        "exec",
        "exit",
        "export",
        "fc",
        "fg",
        "getopts",
        "hash",
        "history",
        "jobs",
        "let",
        "local",
        "logout",
        "mapfile",
        "popd",
        "pushd",
        "read",
        "readarray",
        "readonly",
        "return",
        "set",
        "shift",
        "shopt",
        "source",
        "suspend",
        "times",
        "trap",
        "type",
        "typeset",
        "ulimit",
        "umask",
        "unalias",
        "unset",
        "wait",
    }
)
"""Shell built-ins that have no standalone executable: no process starts for them."""

KEYWORDS: frozenset[str] = frozenset(
    {"!", "[[", "]]", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for"}
    | {"function", "if", "in", "select", "then", "time", "until", "while", "coproc"}
)
"""Shell reserved words: a line starting with one is shell syntax, not a process image."""

INTERPRETERS: frozenset[str] = frozenset(
    {
        "bash",
        "bun",
        "busybox",
        "cmd",
        "dash",
        "deno",
        "env",
        "fish",
        "java",
        "ksh",
        "node",
        "nodejs",
        "npx",
        "perl",
        "php",
        "pipx",
        "pnpm",
        "powershell",
        "pwsh",
        "python",
        "ruby",
        "sh",
        "sudo",
        "timeout",
        "nice",
        "nohup",
        "uv",
        "uvx",
        "xargs",
        "yarn",
        "zsh",
        "npm",
        "poetry",
        "pipenv",
        "conda",
        "tcsh",
        "csh",
    }
)
"""Interpreters, shells and launchers (after :func:`normalize_exe`). Many unrelated commands run
through them, so their name alone never identifies a process: they match only with argument
evidence."""

_VERSIONED = re.compile(r"^(python|pypy|ruby|perl|php|node|lua|java)[0-9][0-9.]*[a-z]?$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_EXPANSION = re.compile(r"[$*?\[~]")
_OPERATOR_NAMES = {
    ";": "sequence",
    "&&": "and_list",
    "||": "or_list",
    "|": "pipe",
    "&": "background",
    "<": "redirection",
    ">": "redirection",
    "(": "subshell",
    ")": "subshell",
    "\n": "newline",
}


@functools.lru_cache(maxsize=65536)
def normalize_exe(name: str) -> str:
    """Normalized executable basename: basename, lower case, no ``.exe``, no version suffix.

    ``/usr/bin/python3.11`` -> ``python``; ``C:\\bin\\Git.EXE`` -> ``git``.
    """
    base = name.replace("\\", "/").rsplit("/", 1)[-1].lower()
    if base.endswith(".exe"):
        base = base[:-4]
    m = _VERSIONED.match(base)
    return m.group(1) if m else base


def is_interpreter(name: str) -> bool:
    """True when ``name`` (any form) is an interpreter, shell or launcher."""
    return normalize_exe(name) in INTERPRETERS


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A declared command reduced to the process image a shell would start."""

    head: str
    """The executable word as written (``ls``, ``/usr/bin/ls``, ``./run.sh``)."""
    args: tuple[str, ...]
    """The remaining words after quote removal."""
    assignments: tuple[str, ...] = ()
    """Leading ``NAME=value`` words, stripped."""
    args_stable: bool = True
    """False when an argument holds an expansion the shell would rewrite."""

    @property
    def basename(self) -> str:
        """The normalized basename of the head."""
        return normalize_exe(self.head)

    @property
    def has_path(self) -> bool:
        """True when the head names a path rather than a name looked up on ``PATH``."""
        return "/" in self.head or "\\" in self.head


@dataclass(frozen=True, slots=True)
class Unsupported:
    """Why a declared command is outside the parser's scope."""

    reason: str
    """One of ``empty``, ``control_operator``, ``command_substitution``, ``builtin``,
    ``expansion_in_head``, ``unbalanced_quotes``."""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Scan:
    end: int
    """Where the command ends (a comment starts there)."""
    expanding: tuple[bool, ...]
    """Per word: does the shell expand something in it (``$``, a glob, ``~``)?"""


_PLAIN = re.compile(r"[^'\"\\`$*?\[~#;&|<>()\n]*")
"""Matches a line with none of the characters :func:`scan` acts on: no quote, escape,
substitution, expansion, comment or operator. Its words are its whitespace-separated parts."""


def scan(line: str) -> Unsupported | Scan:
    """Reject substitutions anywhere and control operators outside quotes; find expansions."""
    if _PLAIN.fullmatch(line):
        # What the character walk below returns for such a line, without the walk.
        return Scan(len(line), (False,) * len(line.split()))
    return scan_chars(line)


def scan_chars(line: str) -> Unsupported | Scan:
    """:func:`scan` by walking the line character by character (any line)."""
    if "`" in line:
        return Unsupported("command_substitution", "backtick")
    if "$(" in line:
        return Unsupported("command_substitution", "$(")
    quote = ""
    expanding: list[bool] = []
    in_word = False
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if quote == "'":
            if c == "'":
                quote = ""
        elif quote == '"':
            if c == "\\":
                i += 1
            elif c == '"':
                quote = ""
            elif c == "$":
                expanding[-1] = True
        elif c.isspace() and c != "\n":
            in_word = False
        elif c == "#" and not in_word:
            return Scan(i, tuple(expanding))
        elif c in ";&|<>()\n":
            op = line[i : i + 2] if line[i : i + 2] in ("&&", "||") else c
            return Unsupported("control_operator", _OPERATOR_NAMES[op])
        else:
            if not in_word:
                expanding.append(False)
                in_word = True
            if c == "\\":
                i += 1
            elif c in "'\"":
                quote = c
            elif c in "$*?[" or (c == "~" and (i == 0 or line[i - 1].isspace())):
                expanding[-1] = True
        i += 1
    return Scan(n, tuple(expanding))


@functools.lru_cache(maxsize=4096)
def parse_command(line: str) -> ParsedCommand | Unsupported:
    """Parse a declared command line into head and arguments, or say why not.

    Results are immutable and cached: agents declare the same commands again and again.
    """
    if not line or not line.strip():
        return Unsupported("empty")
    scanned = scan(line)
    if isinstance(scanned, Unsupported):
        return scanned
    text = line[: scanned.end]
    if "'" in text or '"' in text or "\\" in text:
        try:
            words = shlex.split(text, posix=True)
        except ValueError:
            return Unsupported("unbalanced_quotes")
    else:
        words = text.split()  # nothing to unquote: exactly what shlex would return
    if len(words) != len(scanned.expanding):
        # A word made only of an empty quoted string, or similar corner: stay out.
        return Unsupported("unbalanced_quotes", "word_split_mismatch")
    expanding = list(scanned.expanding)
    assignments: list[str] = []
    while words and _ASSIGNMENT.match(words[0]):
        assignments.append(words.pop(0))
        expanding.pop(0)
    if not words:
        return Unsupported("builtin", "assignment_only" if assignments else "empty")
    head = words[0]
    if head in BUILTINS or head in KEYWORDS:
        return Unsupported("builtin", head)
    if expanding[0]:
        return Unsupported("expansion_in_head", head)
    return ParsedCommand(
        head=head,
        args=tuple(words[1:]),
        assignments=tuple(assignments),
        args_stable=not any(expanding[1:]),
    )


def resolve_head(head: str, cwd: str | None) -> str | None:
    """The normalized path a path-like head names, joined to ``cwd`` when relative."""
    if "/" not in head:
        return None
    if os.path.isabs(head):
        return os.path.normpath(head)
    if not cwd:
        return None
    return os.path.normpath(os.path.join(cwd, head))
