"""The redactor's shortcuts and caches give what every rule gives, and the JSON-lines writer
writes what the standard library wrote.

The reference redactor has one extra pattern that never matches: with an extra pattern the
shortcuts are off and every rule runs on every text. The rule table's own examples
(``test_redaction_rules``) and generated texts built from the rules' trigger pieces are checked
both ways, twice each (the second answer comes from the cache).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_redaction_rules import KEPT, RULES

from otel_bridge import jsonl
from otel_bridge.redaction import Redactor

PIECES = [
    "linux:",
    "token:",
    "Authorization:",
    "authorization",
    "password",
    "PASSWORD",
    "KEY",
    "key",
    "--key",
    "--password",
    "-p",
    "curl",
    "mysql",
    "sshpass",
    "-u",
    "sk-",
    "ghp_",
    "AKIA",
    "AIza",
    "eyJ",
    "hf_",
    "xoxb-",
    "Bearer",
    "https://",
    "@",
    "?",
    "&",
    ";",
    "=",
    ":",
    " ",
    "'",
    '"',
    "-",
    "_",
    ".",
    "/",
    "0",
    "7",
    "A",
    "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH",
    "IDENTIFIED BY",
    "é",
]


def _check(text: str, fast: Redactor, every_rule: Redactor) -> None:
    want = every_rule.text(text)
    assert fast.text(text) == want, text
    assert fast.text(text) == want, text  # from the cache


@pytest.mark.parametrize("text", [r[1] for r in RULES] + [k[1] for k in KEPT])
def test_the_rule_tables_texts(text: str) -> None:
    _check(text, Redactor(), Redactor(["(?!)"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12).map("".join))
def test_generated_texts(text: str) -> None:
    _check(text, Redactor(), Redactor(["(?!)"]))


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,40}:[0-9]{1,12}", fullmatch=True))
def test_word_and_number_texts(text: str) -> None:
    """``word:N`` (the shape of a record id) is decided per word: any number, any word."""
    fast, every_rule = Redactor(), Redactor(["(?!)"])
    _check(text, fast, every_rule)
    word = text.split(":", 1)[0]
    _check(f"{word}:0", fast, every_rule)
    _check(f"{word}:123456789", fast, every_rule)


def test_secret_words_before_a_number_stay_hidden() -> None:
    fast = Redactor()
    assert fast.text("linux:17") == "linux:17"
    assert fast.text("token:17") == "token:[REDACTED]"
    assert fast.text("token:18") == "token:[REDACTED]"
    assert fast.text("Authorization:5") == "Authorization:[REDACTED]"
    assert fast.text("AKIAABCDEFGHIJKLMNOP:1") == "[REDACTED]:1"


def test_the_cache_is_bounded() -> None:
    fast = Redactor()
    for i in range(9_000):  # past the 8,192 remembered texts: it starts over, same answers
        assert fast.text(f"password={i}") == "password=[REDACTED]"
    assert fast.text("password=1") == "password=[REDACTED]"


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=8,
)


def _stdlib(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _small_float(data: Any) -> bool:
    """True when ``data`` holds a float the standard library writes with a negative exponent."""
    if isinstance(data, float):
        return data != 0 and abs(data) < 1e-4
    if isinstance(data, list):
        return any(_small_float(v) for v in data)
    if isinstance(data, dict):
        return any(_small_float(v) for v in data.values())
    return False


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(), JSON_VALUES, max_size=4))
def test_jsonl_lines_are_the_standard_librarys(data: dict[str, Any]) -> None:
    """The same text (lone surrogates and big integers included, through the fallback); a
    float below 1e-4 is spelled without an exponent but is the same number."""
    line = jsonl.dumps(data)
    if _small_float(data):
        assert json.loads(line) == json.loads(_stdlib(data))
    else:
        assert line == _stdlib(data)


def test_jsonl_falls_back_where_orjson_refuses() -> None:
    for data in ({"a": "caf\udce9"}, {"n": 2**70}, {"m": {1: "x"}}):
        assert jsonl.dumps(data) == _stdlib(data)
    assert jsonl.dumps({"t": 1e-05}) == '{"t":0.00001}'
