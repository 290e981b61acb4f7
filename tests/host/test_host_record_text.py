"""The record factory's text rule (``docs/strings.md``): :func:`otel_bridge.strings.clean`'s
all-ASCII fast path gives what checking every key and value gives (``clean_each``)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.model import AnyValue
from otel_bridge.strings import RAW_KEY, REPLACED_KEY, clean, clean_each

_TEXT = st.text(alphabet=st.sampled_from("ab/._-é\udce9\ud800\\ \u00ff"), max_size=6)
_SCALAR: st.SearchStrategy[Any] = st.one_of(
    _TEXT,
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.binary(max_size=3),
    st.none(),
)
_VALUE: st.SearchStrategy[Any] = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.tuples(inner, inner),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_TEXT, inner, max_size=3),
    ),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_TEXT, _VALUE, max_size=6))
def test_the_fast_path_equals_checking_every_value(attributes: dict[str, AnyValue]) -> None:
    fast, slow = clean(attributes), clean_each(attributes)
    assert fast == slow
    assert [type(v) for v in fast.values()] == [type(v) for v in slow.values()]


def test_an_os_record_of_plain_text_passes_unchanged_and_one_surrogate_is_flagged() -> None:
    plain: dict[str, AnyValue] = {
        "process.pid": 7,
        "file.path": "/tmp/a.bin",
        "process.command_args": ("true",),
        "evidence.causal": True,
        "evidence.merged_events": 3,
    }
    out = clean(plain)
    assert out == plain
    assert out is not plain
    named = clean({"file.path": "/tmp/caf\udce9.txt", "process.command_args": ("cp", "é")})
    assert named["file.path"] == "/tmp/caf\ufffd.txt"
    assert named[REPLACED_KEY] == ("file.path",)
    assert named[RAW_KEY] == {"file.path": "/tmp/caf\\xe9.txt"}
    assert named["process.command_args"] == ("cp", "é")
