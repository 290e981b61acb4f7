"""The typed overlay: every supported type, nesting, unions, durations and error messages."""

from __future__ import annotations

import datetime
import enum
import importlib
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_bridge.config import overlay, parse_duration
from otel_bridge.config.overlay import INVALID, convert, suggest


class Color(enum.StrEnum):
    """A StrEnum config value."""

    RED = "red"
    GREEN = "green"


@dataclass(slots=True)
class Leaf:
    """A nested section with defaults."""

    endpoint: str = "127.0.0.1:1"
    size: int = 4


@dataclass(slots=True)
class Rule:
    """A list element that has a required field."""

    pattern: str
    replacement: str = "***"


@dataclass(slots=True)
class Everything:
    """A config with one field of each supported type."""

    name: str = "x"
    count: int = 1
    ratio: float = 0.5
    enabled: bool = False
    poll_interval: float = 1.0
    timeout: float = 2.0
    score: float = 0.0
    mode: Literal["fast", "safe"] = "safe"
    color: Color = Color.RED
    tags: list[str] = field(default_factory=list)
    pair: tuple[int, str] = (0, "")
    many: tuple[int, ...] = ()
    unique: frozenset[str] = frozenset()
    labels: dict[str, int] = field(default_factory=dict)
    view: Mapping[str, str] = field(default_factory=dict)
    leaf: Leaf = field(default_factory=Leaf)
    maybe_leaf: Leaf | None = None
    maybe_text: str | None = "set"
    number_or_text: int | str = 0
    rules: list[Rule] = field(default_factory=list)
    where: pathlib.Path = pathlib.Path(".")
    wait: datetime.timedelta = datetime.timedelta(seconds=1)
    anything: Any = None
    window: float = field(default=0.0, metadata={"duration": True})


def apply(data: Any) -> tuple[Everything, list[str]]:
    """Overlay ``data`` onto the defaults under the path ``c``."""
    problems: list[str] = []
    return overlay(Everything(), data, "c", problems), problems


def test_empty_and_null_keep_defaults() -> None:
    """An empty mapping and null both leave the default config unchanged."""
    assert apply({}) == (Everything(), [])
    assert apply(None) == (Everything(), [])


def test_scalars_convert() -> None:
    """Strings, ints, floats (ints widen), bools, paths and timedeltas are accepted."""
    cfg, problems = apply(
        {
            "name": "y",
            "count": 3,
            "ratio": 2,
            "enabled": True,
            "where": "/tmp/a",
            "wait": "1m",
            "anything": {"k": [1]},
        }
    )
    assert problems == []
    assert (cfg.name, cfg.count, cfg.ratio, cfg.enabled) == ("y", 3, 2.0, True)
    assert isinstance(cfg.ratio, float)
    assert cfg.where == pathlib.Path("/tmp/a")
    assert cfg.wait == datetime.timedelta(minutes=1)
    assert cfg.anything == {"k": [1]}


def test_durations_only_on_duration_fields() -> None:
    """Duration strings convert on *_interval, timeout and marked fields, not on others."""
    cfg, problems = apply({"poll_interval": "200ms", "timeout": "1m30s", "window": "2s"})
    assert problems == []
    assert cfg.poll_interval == pytest.approx(0.2)
    assert cfg.timeout == pytest.approx(90.0)
    assert cfg.window == pytest.approx(2.0)
    _, problems = apply({"score": "3s"})
    assert problems == ["c.score: expected a number, got string '3s'"]


def test_wrong_scalar_types_are_named() -> None:
    """Each wrong scalar names its path, the expected type and what was given."""
    _, problems = apply({"name": 5, "count": True, "enabled": "yes", "ratio": None})
    assert problems == [
        "c.name: expected a string, got integer 5",
        "c.count: expected an integer, got boolean true",
        "c.enabled: expected a boolean, got string 'yes'",
        "c.ratio: expected a number, got null",
    ]


def test_literal_and_enum() -> None:
    """Literal and StrEnum values are checked against their choices with a suggestion."""
    cfg, problems = apply({"mode": "fast", "color": "green"})
    assert problems == []
    assert cfg.mode == "fast"
    assert cfg.color is Color.GREEN
    _, problems = apply({"mode": "fats", "color": "gren"})
    assert problems == [
        "c.mode: 'fats' is not one of 'fast', 'safe' (did you mean 'fast'?)",
        "c.color: 'gren' is not one of red, green (did you mean 'green'?)",
    ]


def test_collections() -> None:
    """Lists, fixed and variable tuples, frozensets and mappings convert element-wise."""
    cfg, problems = apply(
        {
            "tags": ["a", "b"],
            "pair": [1, "x"],
            "many": [1, 2, 3],
            "unique": ["a", "a"],
            "labels": {"a": 1},
            "view": {"k": "v"},
        }
    )
    assert problems == []
    assert cfg.tags == ["a", "b"]
    assert cfg.pair == (1, "x")
    assert cfg.many == (1, 2, 3)
    assert cfg.unique == frozenset({"a"})
    assert cfg.labels == {"a": 1}
    assert cfg.view == {"k": "v"}


def test_collection_errors_have_index_paths() -> None:
    """A bad element is reported at ``path[i]`` or ``path.key``."""
    _, problems = apply(
        {"tags": ["a", 2], "pair": [1], "labels": {"a": "x"}, "many": "1,2", "view": [1]}
    )
    assert problems == [
        "c.tags[1]: expected a string, got integer 2",
        "c.pair: expected a list of 2 items, got 1",
        "c.labels.a: expected an integer, got string 'x'",
        "c.many: expected a list, got string '1,2'",
        "c.view: expected a mapping, got a list",
    ]


def test_nested_dataclass_overlays_the_default() -> None:
    """A nested section overlays its default: unspecified fields keep their values."""
    cfg, problems = apply({"leaf": {"size": 9}})
    assert problems == []
    assert cfg.leaf == Leaf(endpoint="127.0.0.1:1", size=9)


def test_nested_unknown_key_has_full_path_and_suggestion() -> None:
    """An unknown nested key names its full path and the closest valid key."""
    _, problems = apply({"leaf": {"endpont": "x"}, "colour": "red", "zzz": 1})
    assert problems == [
        "c.leaf.endpont: unknown key (did you mean 'endpoint'?)",
        "c.colour: unknown key (did you mean 'color'?)",
        "c.zzz: unknown key (valid keys: "
        "anything, color, count, enabled, labels, leaf, many, maybe_leaf, maybe_text, mode, "
        "name, number_or_text, pair, poll_interval, ratio, rules, score, tags, timeout, "
        "unique, view, wait, where, window)",
    ]


def test_optional_section_null_means_defaults() -> None:
    """As in the Collector, an empty optional section turns it on with its defaults."""
    cfg, problems = apply({"maybe_leaf": None})
    assert problems == []
    assert cfg.maybe_leaf == Leaf()
    cfg, _ = apply({"maybe_leaf": {"size": 2}})
    assert cfg.maybe_leaf == Leaf(size=2)


def test_optional_scalar_null_means_none() -> None:
    """Null sets an optional scalar to None."""
    cfg, problems = apply({"maybe_text": None})
    assert problems == []
    assert cfg.maybe_text is None


def test_union_tries_each_member() -> None:
    """A union accepts any member's type and otherwise names all of them."""
    assert apply({"number_or_text": "a"})[0].number_or_text == "a"
    assert apply({"number_or_text": 4})[0].number_or_text == 4
    _, problems = apply({"number_or_text": 1.5})
    assert problems == ["c.number_or_text: expected an integer or a string, got number 1.5"]


def test_list_of_dataclasses_requires_required_fields() -> None:
    """Elements of a list of dataclasses are built from mappings; required fields must be set."""
    cfg, problems = apply({"rules": [{"pattern": "a"}, {"pattern": "b", "replacement": "-"}]})
    assert problems == []
    assert cfg.rules == [Rule(pattern="a"), Rule(pattern="b", replacement="-")]
    _, problems = apply({"rules": [{"replacement": "x"}, {"pattern": "p", "patern": 1}, "s"]})
    assert problems == [
        "c.rules[0].pattern: required",
        "c.rules[1].patern: unknown key (did you mean 'pattern'?)",
        "c.rules[2]: expected a mapping, got string 's'",
    ]


def test_not_a_mapping() -> None:
    """A non-mapping component body is one problem at the component's path."""
    assert apply([1])[1] == ["c: expected a mapping, got a list"]


def test_convert_reports_invalid_marker() -> None:
    """convert returns INVALID for a value it cannot convert."""
    problems: list[str] = []
    assert convert(int, "x", "p", problems) is INVALID
    assert problems == ["p: expected an integer, got string 'x'"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("200ms", 0.2),
        ("3s", 3.0),
        ("1m", 60.0),
        ("1h", 3600.0),
        ("1m30s", 90.0),
        ("1.5s", 1.5),
        ("10us", 1e-5),
        ("10µs", 1e-5),
        ("5ns", 5e-9),
        ("0s", 0.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    """Go-style duration strings convert to seconds."""
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3", "s", "3 s", "-1s", "1d", "1.2.3s", "ms3"])
def test_parse_duration_rejects(text: str) -> None:
    """Malformed durations raise ValueError."""
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(["ns", "us", "ms", "s", "m", "h"])),
        min_size=1,
        max_size=4,
    )
)
def test_parse_duration_sums_parts(parts: list[tuple[int, str]]) -> None:
    """A duration is the sum of its parts, whatever their order."""
    factor = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    text = "".join(f"{n}{unit}" for n, unit in parts)
    assert parse_duration(text) == pytest.approx(sum(n * factor[u] for n, u in parts))


def test_suggest() -> None:
    """suggest names a close candidate and nothing for a distant word."""
    assert suggest("endpiont", ["endpoint", "size"]) == " (did you mean 'endpoint'?)"
    assert suggest("qqq", ["endpoint"]) == ""


@dataclass(slots=True)
class _Unresolvable:
    """A config class whose annotation names nothing importable (a component bug)."""

    value: NoSuchType = None  # type: ignore[name-defined]  # noqa: F821


def test_type_hints_are_read_once_and_an_unreadable_class_is_refused_every_time() -> None:
    """The loader keeps a class's type hints (the warm server's rehearsal fills them for every
    run it forks); a class whose hints cannot be read is a problem on each use, not remembered
    as readable."""
    module = importlib.import_module("otel_bridge.config.overlay")  # the name is the function
    first: list[str] = []
    assert overlay(Leaf(), {"size": 5}, "x", first) == Leaf(size=5)
    assert module._TYPE_HINTS[Leaf] is module._type_hints(Leaf)
    for _ in range(2):
        problems: list[str] = []
        assert overlay(_Unresolvable(), {"value": 1}, "bad", problems) == _Unresolvable()
        assert len(problems) == 1
        assert "cannot read the config type _Unresolvable" in problems[0]
    assert _Unresolvable not in module._TYPE_HINTS
