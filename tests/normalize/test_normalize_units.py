"""Unit tables for the normalizer's value readers and its span-ancestry memory."""

from __future__ import annotations

import pytest

from otel_bridge.identity import iso_to_ms
from otel_bridge.model import AnyValue, Channel, Entity, EntityKind, Observation, Source
from otel_bridge.processors.normalize.ancestry import (
    Ancestry,
    Found,
    Missing,
    Outcome,
    PendingLink,
    Role,
    Root,
    SpanInfo,
)
from otel_bridge.processors.normalize.command import is_shell_tool
from otel_bridge.processors.normalize.values import (
    NOT_JSON,
    get_bool,
    get_int,
    get_str,
    json_value,
)

A: dict[str, AnyValue] = {
    "s": "x",
    "empty": "",
    "n": 7,
    "f": 1.5,
    "b": True,
    "sb": "False",
    "si": "12",
    "bad": "1x",
    "t": ("a",),
}


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (("s",), "x"),
        (("empty", "s"), "x"),
        (("n",), "7"),
        (("f",), "1.5"),
        (("b",), None),
        (("missing",), None),
        (("t",), None),
        (("empty",), None),
    ],
)
def test_get_str(keys: tuple[str, ...], expected: str | None) -> None:
    """get_str returns the first non-empty string (numbers converted, bools not)."""
    assert get_str(A, *keys) == expected


@pytest.mark.parametrize(
    ("key", "expected"), [("n", 7), ("si", 12), ("bad", None), ("b", None), ("f", None)]
)
def test_get_int(key: str, expected: int | None) -> None:
    """get_int accepts ints and decimal strings, never bools."""
    assert get_int(A, key) == expected


@pytest.mark.parametrize(
    ("key", "expected"), [("b", True), ("sb", False), ("s", None), ("n", None)]
)
def test_get_bool(key: str, expected: bool | None) -> None:
    """get_bool accepts explicit booleans and "true"/"false" strings only."""
    assert get_bool(A, key) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2026-01-01T00:00:00.000Z", 1_767_225_600_000),
        ("2026-01-01T00:00:00.123+00:00", 1_767_225_600_123),
        ("2026-01-01T01:00:00+01:00", 1_767_225_600_000),
        ("2026-01-01T00:00:00", 1_767_225_600_000),
        ("yesterday", None),
        ("", None),
        (None, None),
    ],
)
def test_iso_to_ms(value: str | None, expected: int | None) -> None:
    """ISO 8601 times (Z, offsets, naive as UTC) become epoch milliseconds."""
    assert iso_to_ms(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('"s"', "s"),
        ("[1]", [1]),
        ({"a": (1, 2), "m": {"x": True}}, {"a": [1, 2], "m": {"x": True}}),
    ],
)
def test_json_value_decodes(value: AnyValue, expected: object) -> None:
    """JSON strings are parsed; mappings are taken as objects."""
    assert json_value(value) == expected


@pytest.mark.parametrize("value", ["{", "ls -la", 3, None, b"{}"])
def test_json_value_rejects(value: AnyValue) -> None:
    """Anything that is not JSON text or a mapping is NOT_JSON."""
    assert json_value(value) is NOT_JSON


@pytest.mark.parametrize(
    ("name", "shell"),
    [
        ("shell", True),
        ("bash", True),
        ("run_shell_command", True),
        ("execute_command", True),
        ("terminal", True),
        ("Bash", True),
        ("run-terminal-cmd", True),
        ("local_shell", True),
        ("read_file", False),
        ("search", False),
        ("bashful_poet", False),
        ("commander", False),
    ],
)
def test_shell_tool_names(name: str, shell: bool) -> None:
    """Tool names that say they run shell commands are recognized, word-bounded."""
    assert is_shell_tool(name) is shell


def _key(n: int, trace: int = 1) -> bytes:
    return trace.to_bytes(16, "big") + n.to_bytes(8, "big")


AGENT = Entity(kind=EntityKind.AGENT, id="agent:s:a")
SPAN = Entity(kind=EntityKind.SPAN, id="span:1:2")


def _link(tag: str, seen: list[Outcome]) -> PendingLink:
    def resolve(outcome: Outcome) -> list[Observation]:
        seen.append(outcome)
        return []

    return PendingLink(
        accept=frozenset({Role.AGENT}),
        fallback=None,
        resolve=resolve,
        source=Source(channel=Channel.SEM, backend="otlp", record_id=tag),
        time_unix_nano=0,
        describe=tag,
    )


def test_walk_outcomes() -> None:
    """walk finds an accepted ancestor, stops at a missing span, or reaches the root."""
    anc = Ancestry(10, 10)
    anc.remember(_key(1), SpanInfo(Role.AGENT, AGENT, None))
    anc.remember(_key(2), SpanInfo(Role.PLAIN, SPAN, _key(1)))
    anc.remember(_key(3), SpanInfo(Role.MODEL, None, _key(2)))
    outcome, fallback = anc.walk(_key(3), frozenset({Role.AGENT}))
    assert outcome == Found(AGENT)
    assert fallback == SPAN
    assert anc.walk(_key(9), frozenset({Role.AGENT}))[0] == Missing(_key(9))
    assert anc.walk(_key(2), frozenset({Role.TOOL}))[0] == Root(SPAN)
    assert anc.walk(None, frozenset({Role.AGENT}))[0] == Root(None)


def test_remember_returns_waiting_links() -> None:
    """Links parked on a span come back when that span is remembered."""
    anc = Ancestry(10, 10)
    seen: list[Outcome] = []
    assert anc.wait(_key(5), _link("a", seen)) == []
    assert anc.pending_count == 1
    (link,) = anc.remember(_key(5), SpanInfo(Role.AGENT, AGENT, None))
    assert link.describe == "a"
    assert anc.pending_count == 0


def test_pending_is_fifo_bounded() -> None:
    """Beyond capacity the oldest waiting links are evicted and returned."""
    anc = Ancestry(10, 2)
    seen: list[Outcome] = []
    anc.wait(_key(1), _link("a", seen))
    anc.wait(_key(2), _link("b", seen))
    evicted = anc.wait(_key(3), _link("c", seen))
    assert [link.describe for link in evicted] == ["a"]
    assert sorted(link.describe for link in anc.drain()) == ["b", "c"]
    assert anc.drain() == []


def test_span_memory_keeps_the_most_recent_spans_within_twice_its_capacity() -> None:
    """The last ``capacity`` spans are always remembered; at most twice that many are held."""
    capacity = 3
    anc = Ancestry(capacity, 10)
    for n in range(1, 20):
        anc.remember(_key(n), SpanInfo(Role.PLAIN, SPAN, None))
        assert len(anc) <= 2 * capacity
        for recent in range(max(1, n - capacity + 1), n + 1):
            assert isinstance(anc.walk(_key(recent), frozenset({Role.PLAIN}))[0], Found)
    assert isinstance(anc.walk(_key(1), frozenset({Role.PLAIN}))[0], Missing)


def test_a_span_seen_again_is_held_once_and_refreshed() -> None:
    """Remembering a span again keeps one entry, now in the newest generation."""
    anc = Ancestry(2, 10)
    anc.remember(_key(1), SpanInfo(Role.PLAIN, SPAN, None))
    anc.remember(_key(2), SpanInfo(Role.PLAIN, SPAN, None))  # 1 and 2 become the old generation
    anc.remember(_key(1), SpanInfo(Role.AGENT, AGENT, None))
    assert len(anc) == 2
    assert anc.lookup(_key(1)) == SpanInfo(Role.AGENT, AGENT, None)
    anc.remember(_key(3), SpanInfo(Role.PLAIN, SPAN, None))  # {1, 3} old, 2 dropped
    assert anc.lookup(_key(1)) is not None
    assert anc.lookup(_key(2)) is None


def test_walk_stops_on_a_cycle() -> None:
    """A malformed parent cycle ends the walk at the root instead of looping."""
    anc = Ancestry(10, 10)
    anc.remember(_key(1), SpanInfo(Role.PLAIN, SPAN, _key(2)))
    anc.remember(_key(2), SpanInfo(Role.PLAIN, SPAN, _key(1)))
    assert anc.walk(_key(1), frozenset({Role.AGENT}))[0] == Root(SPAN)
