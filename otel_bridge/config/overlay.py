"""Typed overlay of a YAML mapping onto a component's default config dataclass.

The loader never builds configs from dicts by hand: it walks the dataclass's type hints and
converts each YAML value to the declared type, collecting every problem with its key path.
Supported types: ``str``, ``int``, ``float``, ``bool``, ``pathlib.Path``, ``datetime.timedelta``,
``list[X]``, ``tuple[X, ...]``, fixed tuples, ``set``/``frozenset``, ``dict``/``Mapping[str, X]``,
nested dataclasses (overlaid onto the default's value), ``X | None`` and other unions,
``Literal[...]``, ``enum.Enum`` (``StrEnum``) and ``Any``.

Durations: a ``float`` field whose name says it holds seconds (``timeout``, ``*_interval``,
``*_timeout``, ``*_delay``, ``*_duration``, ``*_period``, ``*_window``, ``*_ttl``, ``*_seconds``,
``*_s``, or ``field(metadata={"duration": True})``) also accepts Go-style duration strings such
as ``"200ms"``, ``"3s"``, ``"1m30s"``, converted to seconds.

Optional nested dataclasses follow the Collector: ``grpc:`` with no value means "this section
with its defaults", not "off".
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import enum
import math
import pathlib
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from otel_bridge.config.env import SUBSTITUTED_TEXT, join_path

_DURATION_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_SUFFIXES = (
    "_interval",
    "_timeout",
    "_delay",
    "_duration",
    "_period",
    "_window",
    "_ttl",
    "_seconds",
    "_s",
)


class _Invalid:
    """Marker for a value that could not be converted (its problem is already recorded)."""


INVALID = _Invalid()


MAX_SECONDS = 1e9
"""The longest duration a config accepts (about 31 years; threads cannot wait longer anyway)."""
_MAX_DURATION_TEXT = 64


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration (``"200ms"``, ``"1m30s"``); ValueError if malformed.

    A duration longer than :data:`MAX_SECONDS` (or written with more than 64 characters) is
    refused as malformed, so ``"999...9s"`` never becomes infinity.
    """
    s = text.strip()
    if not s:
        raise ValueError("empty duration")
    if len(s) > _MAX_DURATION_TEXT:
        raise ValueError(f"invalid duration {text[:20]!r}... ({len(s)} characters)")
    pos, total = 0, 0.0
    while pos < len(s):
        match = _DURATION_PART.match(s, pos)
        if match is None:
            raise ValueError(
                f"invalid duration {text!r} (expected e.g. 200ms, 3s, 1m30s; units ns us ms s m h)"
            )
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if not total <= MAX_SECONDS:
        raise ValueError(f"duration {text!r} is longer than {MAX_SECONDS:.0e} seconds")
    return total


def _number(value: float | int, path: str, problems: list[str], duration: bool) -> Any:
    """``value`` as a finite float (a duration also at most :data:`MAX_SECONDS`), else INVALID."""
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        problems.append(f"{path}: expected a finite number, got {_describe(value)[:40]}")
        return INVALID
    if duration and abs(number) > MAX_SECONDS:
        problems.append(f"{path}: duration {number:g}s is longer than {MAX_SECONDS:.0e} seconds")
        return INVALID
    return number


def _text(value: str, path: str, problems: list[str]) -> str | _Invalid:
    """``value`` unless it holds a NUL character (no path, name or address can)."""
    if "\0" in value:
        problems.append(f"{path}: contains a NUL character")
        return INVALID
    return value


def is_duration_field(field: dataclasses.Field[Any]) -> bool:
    """True when a ``float`` field holds seconds and so accepts duration strings."""
    if field.metadata.get("duration") is True:
        return True
    name = field.name
    return name in {"timeout", "interval", "delay"} or name.endswith(_DURATION_SUFFIXES)


def suggest(word: str, candidates: typing.Iterable[str]) -> str:
    """A ``" (did you mean 'x'?)"`` suffix when a candidate is close to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def overlay(default: Any, data: Any, path: str, problems: list[str]) -> Any:
    """``default`` (a dataclass instance) with the YAML mapping ``data`` applied.

    ``None`` leaves the default unchanged. Problems are appended as ``"path: message"``; the
    returned value is the best effort (the default where a value was rejected).
    """
    if data is None:
        return default
    if not isinstance(data, Mapping):
        problems.append(f"{path or '<root>'}: expected a mapping, got {_describe(data)}")
        return default
    cls = type(default)
    hints = _hints(cls, path, problems)
    if hints is None:
        return default
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    changes: dict[str, Any] = {}
    for key, value in data.items():
        key_path = join_path(path, key)
        field = fields.get(key) if isinstance(key, str) else None
        if field is None:
            problems.append(_unknown_key(key_path, str(key), fields))
            continue
        converted = convert(
            hints[field.name],
            value,
            key_path,
            problems,
            current=getattr(default, field.name),
            duration=is_duration_field(field),
        )
        if converted is not INVALID:
            changes[field.name] = converted
    return dataclasses.replace(default, **changes) if changes else default


def construct(cls: type[Any], data: Any, path: str, problems: list[str]) -> Any:
    """A new ``cls`` instance from ``data``, requiring every field without a default."""
    if not isinstance(data, Mapping):
        problems.append(f"{path}: expected a mapping, got {_describe(data)}")
        return INVALID
    hints = _hints(cls, path, problems)
    if hints is None:
        return INVALID
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs: dict[str, Any] = {}
    ok = True
    for key, value in data.items():
        key_path = join_path(path, key)
        field = fields.get(key) if isinstance(key, str) else None
        if field is None:
            problems.append(_unknown_key(key_path, str(key), fields))
            ok = False
            continue
        converted = convert(
            hints[field.name], value, key_path, problems, duration=is_duration_field(field)
        )
        if converted is INVALID:
            ok = False
        else:
            kwargs[field.name] = converted
    for name, field in fields.items():
        required = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        if required and name not in kwargs and name not in data:
            problems.append(f"{join_path(path, name)}: required")
            ok = False
    if not ok:
        return INVALID
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        problems.append(f"{path}: {exc}")
        return INVALID


def convert(
    tp: Any,
    value: Any,
    path: str,
    problems: list[str],
    *,
    current: Any = None,
    duration: bool = False,
) -> Any:
    """``value`` converted to type ``tp``, or :data:`INVALID` with a problem recorded."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is object:
        return value
    if origin is typing.Union or origin is types.UnionType:
        return _convert_union(
            args, value, path=path, problems=problems, current=current, duration=duration
        )
    if origin is typing.Literal:
        if value in args and not (isinstance(value, bool) and not any(a is value for a in args)):
            return value
        choices = ", ".join(repr(a) for a in args)
        hint = suggest(str(value), [str(a) for a in args])
        problems.append(f"{path}: {value!r} is not one of {choices}{hint}")
        return INVALID
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            return overlay(current, value, path, problems) if value is not None else current
        return construct(tp, {} if value is None else value, path, problems)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _convert_enum(tp, value, path, problems)
    if origin in (list, tuple, set, frozenset) or origin in _ABSTRACT_SEQUENCES:
        return _convert_collection(origin, args, value, path=path, problems=problems)
    if origin in (dict,) or origin in _ABSTRACT_MAPPINGS:
        return _convert_mapping(args, value, path, problems)
    return _convert_scalar(tp, value, path, problems, duration)


_ABSTRACT_SEQUENCES = (
    typing.get_origin(typing.Sequence[int]),
    typing.get_origin(typing.AbstractSet[int]),
)
_ABSTRACT_MAPPINGS = (typing.get_origin(typing.Mapping[str, int]),)


def _convert_union(
    args: tuple[Any, ...],
    value: Any,
    *,
    path: str,
    problems: list[str],
    current: Any,
    duration: bool,
) -> Any:
    members = [a for a in args if a is not type(None)]
    optional = len(members) < len(args)
    if value is None:
        nested = [m for m in members if isinstance(m, type) and dataclasses.is_dataclass(m)]
        if optional and nested and current is None:
            # Collector semantics: an empty section turns the feature on with its defaults.
            return construct(nested[0], {}, path, problems)
        if optional:
            return current if nested else None
    attempts: list[list[str]] = []
    for member in members:
        scratch: list[str] = []
        converted = convert(
            member,
            value,
            path,
            scratch,
            current=current if _instance_of(current, member) else None,
            duration=duration,
        )
        if converted is not INVALID:
            return converted
        attempts.append(scratch)
    if len(attempts) == 1:
        problems.extend(attempts[0])
    else:
        names = " or ".join(_type_name(m) for m in members)
        problems.append(f"{path}: expected {names}, got {_describe(value)}")
    return INVALID


def _instance_of(value: Any, tp: Any) -> bool:
    return isinstance(tp, type) and isinstance(value, tp)


def _convert_enum(tp: type[enum.Enum], value: Any, path: str, problems: list[str]) -> Any:
    for member in tp:
        if member.value == value and type(value) is not bool:
            return member
    values = [str(m.value) for m in tp]
    problems.append(
        f"{path}: {value!r} is not one of {', '.join(values)}{suggest(str(value), values)}"
    )
    return INVALID


def _convert_collection(
    origin: Any,
    args: tuple[Any, ...],
    value: Any,
    *,
    path: str,
    problems: list[str],
) -> Any:
    if not isinstance(value, list):
        problems.append(f"{path}: expected a list, got {_describe(value)}")
        return INVALID
    if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
        if len(value) != len(args):
            problems.append(f"{path}: expected a list of {len(args)} items, got {len(value)}")
            return INVALID
        item_types: list[Any] = list(args)
    else:
        item_types = [args[0] if args else Any] * len(value)
    items = [
        convert(t, v, join_path(path, i), problems)
        for i, (t, v) in enumerate(zip(item_types, value, strict=True))
    ]
    if any(item is INVALID for item in items):
        return INVALID
    if origin is list:
        return items
    if origin in (set, frozenset) or origin is _ABSTRACT_SEQUENCES[1]:
        return frozenset(items) if origin is not set else set(items)
    return tuple(items)


def _convert_mapping(args: tuple[Any, ...], value: Any, path: str, problems: list[str]) -> Any:
    if not isinstance(value, Mapping):
        problems.append(f"{path}: expected a mapping, got {_describe(value)}")
        return INVALID
    value_type = args[1] if len(args) == 2 else Any
    out: dict[str, Any] = {}
    ok = True
    for k, v in value.items():
        if not isinstance(k, str):
            problems.append(f"{join_path(path, k)}: keys must be strings, got {_describe(k)}")
            ok = False
            continue
        converted = convert(value_type, v, join_path(path, k), problems)
        if converted is INVALID:
            ok = False
        else:
            out[k] = converted
    return out if ok else INVALID


def _convert_scalar(tp: Any, value: Any, path: str, problems: list[str], duration: bool) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return _number(value, path, problems, duration)
        if duration and isinstance(value, str):
            try:
                return parse_duration(value)
            except ValueError as exc:
                problems.append(f"{path}: {exc}")
                return INVALID
    elif tp is str:
        if isinstance(value, str):
            return _text(value, path, problems)
        if (text := SUBSTITUTED_TEXT.get({}).get(path)) is not None:
            return text  # ${env:X} read as a number or bool, but the field wants the text
    elif tp is pathlib.Path:
        if isinstance(value, str):
            checked = _text(value, path, problems)
            return checked if isinstance(checked, _Invalid) else pathlib.Path(checked)
        if (text := SUBSTITUTED_TEXT.get({}).get(path)) is not None:
            return pathlib.Path(text)
    elif tp is datetime.timedelta:
        if isinstance(value, int | float) and not isinstance(value, bool):
            seconds = _number(value, path, problems, True)
            return seconds if seconds is INVALID else datetime.timedelta(seconds=seconds)
        if isinstance(value, str):
            try:
                return datetime.timedelta(seconds=parse_duration(value))
            except ValueError as exc:
                problems.append(f"{path}: {exc}")
                return INVALID
    elif isinstance(tp, type):
        if isinstance(value, tp):
            return value
    else:
        problems.append(f"{path}: unsupported config type {tp!r} (a component bug)")
        return INVALID
    expected = _type_name(tp) + (" or a duration such as 3s" if duration else "")
    problems.append(f"{path}: expected {expected}, got {_describe(value)}")
    return INVALID


def _hints(cls: type[Any], path: str, problems: list[str]) -> dict[str, Any] | None:
    try:
        return _type_hints(cls)
    except (NameError, TypeError) as exc:
        problems.append(f"{path or '<root>'}: cannot read the config type {cls.__name__}: {exc}")
        return None


_TYPE_HINTS: dict[type[Any], dict[str, Any]] = {}


def _type_hints(cls: type[Any]) -> dict[str, Any]:
    """``typing.get_type_hints`` of a configuration class, evaluated once per class (a class's
    annotations do not change; the callers only read the mapping). An error is not kept."""
    hints = _TYPE_HINTS.get(cls)
    if hints is None:
        hints = _TYPE_HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _unknown_key(key_path: str, key: str, fields: Mapping[str, Any]) -> str:
    hint = suggest(key, fields)
    if hint:
        return f"{key_path}: unknown key{hint}"
    valid = ", ".join(sorted(fields)) or "none"
    return f"{key_path}: unknown key (valid keys: {valid})"


def _type_name(tp: Any) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        pathlib.Path: "a path",
        datetime.timedelta: "a duration",
    }
    if tp in names:
        return names[tp]
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    origin = typing.get_origin(tp)
    if origin in (list, tuple, set, frozenset):
        return "a list"
    if origin is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        if value.bit_length() > 128:
            return f"an integer of {value.bit_length()} bits"
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
