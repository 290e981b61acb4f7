"""Rows as PostgreSQL ``COPY ... FROM STDIN`` text, formatted here rather than by the driver.

psycopg's ``Copy.write_row`` looks up a dumper for every value of every row (arrays and jsonb
in Python); the store's rows hold a handful of types, so one ``str`` per row built by
:func:`line` and written with ``Copy.write`` costs a fraction of that. The text format:
columns separated by a tab, rows ended by a newline, ``\\N`` for NULL, and a backslash, tab,
newline or carriage return inside a value escaped with a backslash.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import msgspec

_ESCAPE = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_SPECIAL = ("\\", "\t", "\n", "\r")
NULL = "\\N"


class Json:
    """A value for a ``jsonb`` column (``None`` inside stays JSON ``null``)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def escape(text: str) -> str:
    """``text`` as one COPY field."""
    for c in _SPECIAL:
        if c in text:
            return text.translate(_ESCAPE)
    return text


def _element(item: str | None) -> str:
    if item is None:
        return "NULL"
    return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'


def array(items: Iterable[str | None]) -> str:
    """A ``text[]`` literal (every element quoted, so no element needs other care)."""
    return "{" + ",".join(_element(i) for i in items) + "}"


def field(value: Any) -> str:
    """One value as a COPY field: None, str, int, bool, float, bytes (bytea), datetime
    (timestamptz), list or tuple of str (text[]), :class:`Json` (jsonb)."""
    kind = type(value)
    if value is None:
        return NULL
    if kind is str:
        return escape(value)
    if kind is int:
        return str(value)
    if kind is bool:
        return "t" if value else "f"
    if kind is float:
        return repr(value)
    if kind is bytes:
        return f"\\\\x{value.hex()}"
    if kind is datetime:
        return f"{value.isoformat()}"
    if kind is list or kind is tuple:
        return escape(array(value))
    if kind is Json:
        return escape(msgspec.json.encode(value.value).decode())
    raise TypeError(f"no COPY text for {kind.__name__}")


def line(values: Sequence[Any]) -> str:
    """One row, newline included."""
    return "\t".join([field(v) for v in values]) + "\n"


def lines(rows: Iterable[Sequence[Any]]) -> str:
    """Every row of ``rows``."""
    return "".join([line(r) for r in rows])
