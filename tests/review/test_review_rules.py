"""The review's rule tables: validate commands, incidental paths, claim sentences and mentions."""

from __future__ import annotations

import pytest

from otel_bridge.review import rules
from otel_bridge.review.claims import Mention, extract, sentences, status_of


@pytest.mark.parametrize(
    ("argv", "check"),
    [
        (["/usr/bin/python3", "-m", "pytest", "-q"], "pytest"),
        (["pytest", "tests/"], "pytest"),
        (["uv", "run", "pytest"], "pytest"),
        (["python3.11", "-m", "unittest", "discover"], "unittest"),
        (["make", "test"], "make test"),
        (["make", "check"], "make check"),
        (["npm", "run", "test"], "npm test"),
        (["npx", "tsc", "--noEmit"], "tsc"),
        (["cargo", "test"], "cargo test"),
        (["go", "test", "./..."], "go test"),
        (["./gradlew", "test"], "gradle test"),
        (["ruff", "check", "."], "ruff"),
        (["mypy", "--strict", "pkg"], "mypy"),
        (["python", "analyze.py"], None),
        (["make"], None),
        (["cat", "pytest.ini"], None),
        ([], None),
    ],
)
def test_validate_table(argv: list[str], check: str | None) -> None:
    found = rules.match_check(argv)
    assert (found.name if found else None) == check


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/w/__pycache__/calc.cpython-311.pyc", True),
        ("/w/.pytest_cache/v/cache/lastfailed", True),
        ("/proc/self/stat", True),
        ("/dev/null", True),
        ("/runs/r1/graph.json", True),
        ("/w/calc.py", False),
        ("/w/scratch/state.bin", False),
    ],
)
def test_incidental_paths(path: str, expected: bool) -> None:
    assert rules.incidental(path, run_dir="/runs/r1") is expected


def test_sentences_split_on_end_punctuation_and_lines() -> None:
    text = "I wrote a.py. The mean is 17.5.\n- Tests pass\n2. Done"
    assert sentences(text) == ["I wrote a.py.", "The mean is 17.5.", "Tests pass", "Done"]


def _kinds(sentence: str) -> list[tuple[str, str]]:
    return [(m.type, m.text) for m in extract(sentence, {"pytest", "python"})]


def test_mentions_of_paths_commands_outcomes_and_numbers() -> None:
    assert _kinds("I ran `python -m pytest -q test_calc.py` and all tests pass.") == [
        ("command", "python -m pytest -q test_calc.py"),
        ("outcome", "tests pass"),
    ]
    assert _kinds("I wrote out/table.csv and plot.svg, e.g. for the report.") == [
        ("path", "out/table.csv"),
        ("path", "plot.svg"),
    ]
    assert _kinds("The overall mean is 17.5 over 12 rows and 3 cities.") == [
        ("number", "17.5"),
        ("number", "12"),
    ]
    assert _kinds("I had a look around.") == []


def test_path_roles_and_outcome_polarity() -> None:
    written = extract("I saved the summary to summary.txt.", set())[0]
    referenced = extract("The summary is in summary.txt.", set())[0]
    assert written.extra["role"] == "written"
    assert referenced.extra["role"] == "referenced"
    passed = extract("All tests pass now.", set())[0]
    negated = extract("Not all tests pass.", set())[0]
    failing = extract("The tests still fail.", set())[0]
    named = extract("pytest passes.", set())[0]
    assert (passed.extra["passed"], negated.extra["passed"], failing.extra["passed"]) == (
        True,
        False,
        False,
    )
    assert named.extra["check"] == "pytest"


@pytest.mark.parametrize(
    ("statuses", "claim"),
    [
        (["supported", "supported"], "supported"),
        (["supported", "unsupported"], "partially_supported"),
        (["unsupported"], "unsupported"),
        (["supported", "contradicted"], "contradicted"),
    ],
)
def test_claim_status_from_mentions(statuses: list[str], claim: str) -> None:
    assert status_of(Mention("path", "x", status=s) for s in statuses) == claim
