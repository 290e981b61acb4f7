"""``${env:VAR}`` substitution: values, defaults, escapes, typing and error paths."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_bridge.config import substitute


def sub(value: Any, env: dict[str, str]) -> tuple[Any, list[str]]:
    """Substitute ``value`` under ``env``; returns the result and problems."""
    problems: list[str] = []
    return substitute(value, env, problems), problems


@pytest.mark.parametrize(
    ("text", "env", "want"),
    [
        ("${env:A}", {"A": "x"}, "x"),
        ("${A}", {"A": "x"}, "x"),
        ("pre-${env:A}-post", {"A": "x"}, "pre-x-post"),
        ("${env:A}${env:B}", {"A": "1", "B": "2"}, "12"),
        ("${env:A:-dflt}", {}, "dflt"),
        ("${env:A:-dflt}", {"A": ""}, "dflt"),
        ("${env:A:-dflt}", {"A": "set"}, "set"),
        ("${env:A:-}", {}, ""),
        ("${env:A:-a:b-c}", {}, "a:b-c"),
        ("${env:A}", {"A": ""}, ""),
        ("$$", {}, "$"),
        ("$${env:A}", {}, "${env:A}"),
        ("cost $5", {}, "cost $5"),
        ("$$$${env:A}", {"A": "v"}, "$${env:A}"),
        ("$$${env:A}", {"A": "v"}, "$v"),
        ("no refs", {}, "no refs"),
    ],
)
def test_substitution(text: str, env: dict[str, str], want: str) -> None:
    """References, defaults and escapes substitute as documented."""
    assert sub(text, env) == (want, [])


@pytest.mark.parametrize(
    ("text", "env", "want"),
    [
        ("${env:N}", {"N": "42"}, 42),
        ("${env:N}", {"N": "1.5"}, 1.5),
        ("${env:N}", {"N": "true"}, True),
        ("${env:N:-7}", {}, 7),
        ("${env:N}", {"N": "a: b"}, "a: b"),
        ("${env:N}", {"N": "[1, 2]"}, "[1, 2]"),
        ("port ${env:N}", {"N": "42"}, "port 42"),
    ],
)
def test_whole_reference_reads_a_scalar(text: str, env: dict[str, str], want: Any) -> None:
    """A value that is exactly one reference becomes an int, float or bool when it reads as one."""
    got, problems = sub(text, env)
    assert problems == []
    assert got == want
    assert type(got) is type(want)


def test_undefined_variable_names_the_key_path() -> None:
    """An undefined variable without default is a problem at its full key path."""
    got, problems = sub({"a": {"b": ["ok", "${env:MISSING}"]}}, {})
    assert problems == ["a.b[1]: environment variable MISSING is not set"]
    assert got == {"a": {"b": ["ok", "${env:MISSING}"]}}


def test_unsupported_reference() -> None:
    """A reference with another scheme is rejected with the supported syntax."""
    _, problems = sub({"k": "${file:/etc/passwd}"}, {})
    assert problems == [
        "k: unsupported reference ${file:/etc/passwd} "
        "(use ${env:NAME} or ${env:NAME:-default}; write $$ for a literal $)"
    ]


def test_keys_and_non_strings_are_untouched() -> None:
    """Mapping keys and non-string values are never substituted."""
    value = {"${env:A}": 1, "b": True, "c": None, "d": 2.5}
    assert sub(value, {"A": "x"}) == (value, [])


@given(st.text(alphabet=st.characters(blacklist_characters="$"), max_size=30))
def test_text_without_dollar_is_unchanged(text: str) -> None:
    """Text without a $ is returned exactly."""
    assert sub(text, {}) == (text, [])


@given(
    st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True),
    st.text(alphabet=st.characters(blacklist_characters="$}", codec="utf-8"), max_size=20),
)
def test_defined_variable_inside_text(name: str, value: str) -> None:
    """A reference embedded in text is replaced by the variable's exact value."""
    got, problems = sub(f"<${{env:{name}}}>", {name: value})
    assert problems == []
    assert got == f"<{value}>"


@given(st.text(max_size=20))
def test_escaped_text_round_trips(text: str) -> None:
    """Doubling every $ yields the original text back."""
    assert sub(text.replace("$", "$$"), {}) == (text, [])
