"""The review's rule tables: validate commands, incidental paths, claim mentions.

Every table here is documented in ``docs/review.md``; changing one changes what the review says,
so keep the page in step.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Check:
    """One row of the validate table: a command prefix and what it checks."""

    name: str
    category: str
    """``test``, ``lint``, ``typecheck`` or ``build``."""
    words: tuple[str, ...]
    """The leading words of the normalized argv (see :func:`normalized_argv`)."""


VALIDATE_TABLE: tuple[Check, ...] = (
    Check("pytest", "test", ("pytest",)),
    Check("pytest", "test", ("py.test",)),
    Check("unittest", "test", ("unittest",)),
    Check("tox", "test", ("tox",)),
    Check("nox", "test", ("nox",)),
    Check("make test", "test", ("make", "test")),
    Check("make check", "test", ("make", "check")),
    Check("make lint", "lint", ("make", "lint")),
    Check("npm test", "test", ("npm", "test")),
    Check("npm test", "test", ("npm", "run", "test")),
    Check("npm lint", "lint", ("npm", "run", "lint")),
    Check("pnpm test", "test", ("pnpm", "test")),
    Check("pnpm test", "test", ("pnpm", "run", "test")),
    Check("yarn test", "test", ("yarn", "test")),
    Check("yarn test", "test", ("yarn", "run", "test")),
    Check("cargo test", "test", ("cargo", "test")),
    Check("cargo clippy", "lint", ("cargo", "clippy")),
    Check("cargo check", "typecheck", ("cargo", "check")),
    Check("cargo build", "build", ("cargo", "build")),
    Check("go test", "test", ("go", "test")),
    Check("go vet", "lint", ("go", "vet")),
    Check("go build", "build", ("go", "build")),
    Check("mvn test", "test", ("mvn", "test")),
    Check("mvn verify", "test", ("mvn", "verify")),
    Check("gradle test", "test", ("gradle", "test")),
    Check("gradle test", "test", ("gradlew", "test")),
    Check("gradle check", "test", ("gradle", "check")),
    Check("gradle check", "test", ("gradlew", "check")),
    Check("ctest", "test", ("ctest",)),
    Check("ruff", "lint", ("ruff",)),
    Check("flake8", "lint", ("flake8",)),
    Check("pylint", "lint", ("pylint",)),
    Check("eslint", "lint", ("eslint",)),
    Check("mypy", "typecheck", ("mypy",)),
    Check("pyright", "typecheck", ("pyright",)),
    Check("tsc", "typecheck", ("tsc",)),
)
"""The maintained validate table: a process whose normalized argv starts with ``words`` is a
validate run of ``name``. First match wins."""

_LAUNCHERS: tuple[tuple[str, ...], ...] = (
    ("uv", "run"),
    ("poetry", "run"),
    ("pipenv", "run"),
    ("npx",),
    ("pnpx",),
    ("env",),
)
_INTERPRETER = re.compile(r"^(python|pypy)[0-9.]*$")


def normalized_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """``argv`` with launchers and ``python -m`` removed and the program reduced to its name.

    ``/usr/bin/python3 -m pytest -q`` and ``uv run pytest -q`` both become ``pytest -q``;
    ``./gradlew test`` becomes ``gradlew test``.
    """
    words = list(argv)
    changed = True
    while words and changed:
        changed = False
        words[0] = os.path.basename(words[0])
        for launcher in _LAUNCHERS:
            if tuple(words[: len(launcher)]) == launcher and len(words) > len(launcher):
                words = words[len(launcher) :]
                changed = True
                break
        if words and _INTERPRETER.match(words[0]) and len(words) > 2 and words[1] == "-m":
            words = words[2:]
            changed = True
    return tuple(words)


def match_check(argv: Sequence[str] | None) -> Check | None:
    """The validate-table row ``argv`` matches, or None."""
    if not argv:
        return None
    words = normalized_argv(argv)
    for check in VALIDATE_TABLE:
        if words[: len(check.words)] == check.words:
            return check
    return None


INCIDENTAL_PARTS = frozenset(
    {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox", ".nox", "node_modules"}
)
"""Path components of tool caches: files below them are incidental, not artifacts."""
INCIDENTAL_PREFIXES = ("/proc/", "/sys/", "/dev/")


SCRATCH_DIRS = ("/tmp", "/var/tmp")
"""System temporary directories (and ``$TMPDIR``): a file directly in one, outside every
working directory of the session, is a tool's scratch file (``tempfile``'s random names), not
an artifact."""


def scratch(path: str) -> bool:
    """True for a file directly in a system temporary directory (see :data:`SCRATCH_DIRS`)."""
    parent = os.path.dirname(path)
    roots = {*SCRATCH_DIRS, os.environ.get("TMPDIR", "/tmp").rstrip("/") or "/tmp"}
    return parent in roots


def incidental(path: str, run_dir: str = "") -> bool:
    """True for paths the review does not treat as artifacts (caches, pseudo files, the run dir)."""
    if path.startswith(INCIDENTAL_PREFIXES) or path in ("/dev/null", "/dev/tty"):
        return True
    if run_dir and (path == run_dir or path.startswith(run_dir.rstrip("/") + "/")):
        return True
    return any(part in INCIDENTAL_PARTS for part in path.split("/"))


# ----------------------------------------------------------------------------------------------
# Claim mentions
# ----------------------------------------------------------------------------------------------

SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(])|\n+\s*(?:[-*]\s+|\d+[.)]\s+)?")
"""Sentence boundaries: end punctuation followed by a capitalised start, or a line break."""

BACKTICKS = re.compile(r"`([^`\n]+)`")
PATH = re.compile(
    r"(?<![\w/.@:-])((?:\.{0,2}/)?(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/(-])"
)
"""A file name with an extension, optionally with directories (``out/table.csv``)."""
NOT_PATHS = frozenset({"e.g", "i.e", "etc", "vs", "a.m", "p.m"})
NUMBER = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?%?)(?![\w.]*\w)")
WRITE_VERBS = re.compile(
    r"\b(wrote|written|write|writes|created|create|saved|save|generated|produced|added|"
    r"updated|fixed|patched|modified|edited|changed|rewrote|stored|exported|built)\b",
    re.IGNORECASE,
)
RUN_VERBS = re.compile(r"\b(ran|executed|invoked)\b", re.IGNORECASE)
NEGATION = re.compile(r"\b(not|no|never|none)\b|n't\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class OutcomePattern:
    """A phrase stating a check outcome."""

    category: str
    passed: bool
    pattern: re.Pattern[str]


_PASS = (
    r"(pass|passes|passed|passing|succeed|succeeds|succeeded|are green|is green|is clean|are clean)"
)
_FAIL = r"(fail|fails|failed|failing|are red|is red|break|breaks|broke)"
OUTCOMES: tuple[OutcomePattern, ...] = (
    OutcomePattern(
        "test",
        True,
        re.compile(
            rf"\b(tests?|test suite|pytest|unit tests?|specs?)\b(\s+\w+){{0,2}}?"
            rf"\s+(now\s+)?{_PASS}\b",
            re.I,
        ),
    ),
    OutcomePattern("test", True, re.compile(r"\b\d+\s+(tests?\s+)?passed\b", re.I)),
    OutcomePattern(
        "test",
        False,
        re.compile(rf"\b(tests?|test suite|pytest)\b(\s+\w+){{0,2}}?\s+(still\s+)?{_FAIL}\b", re.I),
    ),
    OutcomePattern(
        "lint",
        True,
        re.compile(rf"\b(lint|linting|linter|ruff|eslint|flake8|pylint)\b\s+{_PASS}\b", re.I),
    ),
    OutcomePattern(
        "typecheck",
        True,
        re.compile(rf"\b(mypy|tsc|pyright|type[- ]?checks?|type[- ]?checking)\b\s+{_PASS}\b", re.I),
    ),
    OutcomePattern("build", True, re.compile(rf"\b(build|compilation)\b\s+{_PASS}\b", re.I)),
)
"""Outcome phrases, by check category. A negation before the phrase flips a pass."""

CHECK_NAMES = {c.name.split()[0]: c.name for c in VALIDATE_TABLE}
"""A check named in an outcome phrase (``pytest passes``) restricts it to that check."""
