"""Checked readers for OTLP/JSON values: each raises a ``DecodeError`` that names the path.

OTLP/JSON is the proto3 JSON mapping with the OTLP deviations (hex ids, integer enums); see
:mod:`otel_bridge.otlp.json_codec`. Readers take the value and its path (``resourceSpans[0]...``)
and return the typed value, treating JSON ``null`` as the field's default as proto3 JSON does.
"""

from __future__ import annotations

import base64
import binascii
import math
import sys
from collections.abc import Mapping
from typing import Any

from otel_bridge.errors import DecodeError
from otel_bridge.model import AnyValue

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1
_UINT32_MAX = 2**32 - 1
_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


class NotUnicodeError(DecodeError):
    """A string that is not valid Unicode (a lone surrogate escape). Unlike the other faults in
    one record it fails the whole request, as invalid UTF-8 fails the protobuf parse of one."""


class OversizeInt:
    """An integer literal longer than the interpreter converts (``sys.get_int_max_str_digits``,
    4,300 digits by default), kept as its length so the reader that meets it names its field
    path (``spans[0].name: expected a string, got an integer literal of 5001 digits ...``)."""

    __slots__ = ("digits",)

    def __init__(self, text: str) -> None:
        self.digits = len(text.lstrip("-"))


def parse_int(text: str) -> int | OversizeInt:
    """``json.loads``' ``parse_int``: the integer, or an :class:`OversizeInt` past the limit."""
    try:
        return int(text)
    except ValueError:
        return OversizeInt(text)


def type_name(value: object) -> str:
    """The JSON name of ``value``'s type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, OversizeInt):
        limit = sys.get_int_max_str_digits()
        return f"an integer literal of {value.digits} digits (over the {limit}-digit limit)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters (a 5,000-digit string is not echoed)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def fail(path: str, message: str) -> DecodeError:
    """A ``DecodeError`` for ``path``."""
    return DecodeError(f"{path}: {message}")


def field(obj: Mapping[str, Any], camel: str, snake: str | None = None) -> Any:
    """The value of field ``camel`` in ``obj``, also accepting its original snake_case name.

    The OTLP specification asks senders for lowerCamelCase keys; like the Collector's receiver we
    also accept the proto field name, so data written by a proto-JSON library is not ignored.
    """
    value = obj.get(camel)
    if value is None and snake is not None:
        value = obj.get(snake)
    return value


def read_object(value: Any, path: str) -> Mapping[str, Any]:
    """A JSON object (``null`` reads as empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(path, f"expected an object, got {type_name(value)}")
    return value


def read_list(value: Any, path: str) -> list[Any]:
    """A JSON array (``null`` reads as empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise fail(path, f"expected an array, got {type_name(value)}")
    return value


def read_str(value: Any, path: str) -> str:
    """A string (``null`` reads as empty) that is valid Unicode.

    JSON's ``\\uD800`` escapes can spell a lone surrogate, which no UTF-8 encoder accepts: such a
    string is refused here, with its path, like invalid UTF-8 on the protobuf path, so it never
    reaches an exporter (:class:`NotUnicodeError`: the request is answered 400 and nothing of it
    is kept).
    """
    if value is None:
        return ""
    if not isinstance(value, str):
        raise fail(path, f"expected a string, got {type_name(value)}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise NotUnicodeError(
                f"{path}: not valid Unicode: lone surrogate {value[exc.start]!r} at {exc.start}"
            ) from None
    return value


def read_bool(value: Any, path: str) -> bool:
    """A boolean."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise fail(path, f"expected a boolean, got {type_name(value)}")
    return value


def _integer(value: Any, path: str, what: str) -> int:
    """The integer a JSON number or a decimal string gives, however wide (proto3 JSON)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise fail(path, f"expected {what}, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise fail(path, f"expected {what}, got {shown(value)}")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text, 10)
        except ValueError:
            try:
                as_float = float(text)
            except ValueError:
                raise fail(path, f"expected {what}, got {shown(value)}") from None
            if not as_float.is_integer():
                raise fail(path, f"expected {what}, got {shown(value)}") from None
            return int(as_float)
    raise fail(path, f"expected {what}, got {type_name(value)}")


def read_int(value: Any, path: str, lo: int, hi: int, what: str) -> int:
    """An integer in ``[lo, hi]``, given as a JSON number or a decimal string (proto3 JSON)."""
    number = _integer(value, path, what)
    if not lo <= number <= hi:
        raise fail(path, f"{number} is out of range for {what}")
    return number


def read_int_value(value: Any, path: str) -> int | str:
    """An ``AnyValue.intValue``: the int64, or, for an integer outside the int64 range, its
    decimal text, as the OpenTelemetry attribute mapping converts such an integer (to
    ``stringValue``; otel-bridge's encoders write a wider model integer the same way).

    The OpenTelemetry JS SDK's OTLP/JSON exporter writes every integral JavaScript number as
    ``intValue``, however large: ``2**64`` as ``18446744073709552000``, ``1e21`` as ``1e+21``.
    Refusing the value refused the whole request (HTTP 400), every span of the batch with it;
    now the value is kept (a number in exponent form as the exact value of its double,
    ``1e+23`` as ``99999999999999991611392``) and nothing is refused."""
    number = _integer(value, path, "a 64-bit integer")
    return number if _INT64_MIN <= number <= _INT64_MAX else str(number)


def read_uint64(value: Any, path: str) -> int:
    """A ``fixed64``/``uint64`` (timestamps)."""
    return read_int(value, path, 0, _UINT64_MAX, "an unsigned 64-bit integer")


def read_int64(value: Any, path: str) -> int:
    """An ``int64``."""
    return read_int(value, path, _INT64_MIN, _INT64_MAX, "a 64-bit integer")


def read_uint32(value: Any, path: str) -> int:
    """A ``uint32``/``fixed32`` (counts, flags)."""
    return read_int(value, path, 0, _UINT32_MAX, "an unsigned 32-bit integer")


def read_enum(value: Any, path: str) -> int:
    """An enum value; OTLP/JSON allows only integers, never enum names."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise fail(path, f"expected an integer enum value, got {type_name(value)}")
    return read_int(value, path, -(2**31), 2**31 - 1, "an integer enum value")


def read_double(value: Any, path: str) -> float:
    """A ``double``: a number, a numeric string, or ``"NaN"``/``"Infinity"``/``"-Infinity"``."""
    if value is None:
        return 0.0
    if isinstance(value, bool):
        raise fail(path, "expected a number, got a boolean")
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:  # an integer literal past the double range (10**309)
            raise fail(path, f"{shown(value)} is out of range for a double") from None
    if isinstance(value, str):
        if value in _SPECIAL_DOUBLES:
            return _SPECIAL_DOUBLES[value]
        try:
            number = float(value)
        except ValueError:
            raise fail(path, f"expected a number, got {shown(value)}") from None
        if math.isnan(number) or math.isinf(number):
            raise fail(path, f"expected a number, got {shown(value)}")
        return number
    raise fail(path, f"expected a number, got {type_name(value)}")


def read_bytes(value: Any, path: str) -> bytes:
    """A ``bytes`` field: base64, standard or URL-safe alphabet, padding optional."""
    text = read_str(value, path)
    if not text:
        return b""
    normalized = text.replace("-", "+").replace("_", "/")
    normalized += "=" * (-len(normalized) % 4)
    try:
        return base64.b64decode(normalized, validate=True)
    except (binascii.Error, ValueError):
        raise fail(path, "expected base64 data") from None


def read_hex_id(value: Any, path: str, size: int, *, optional: bool) -> bytes:
    """A trace or span id: ``2 * size`` hex characters (case-insensitive); not base64.

    An optional id may be absent or empty.
    """
    if value is None or value == "":
        if optional:
            return b""
        raise fail(path, f"expected {2 * size} hex characters, got 0")
    if not isinstance(value, str):
        raise fail(path, f"expected a hex string, got {type_name(value)}")
    if len(value) != 2 * size:
        raise fail(path, f"expected {2 * size} hex characters, got {len(value)}")
    bad = next((c for c in value if c not in _HEX_DIGITS), None)
    if bad is not None:
        raise fail(path, f"invalid hex character {bad!r}")
    return bytes.fromhex(value)


MAX_VALUE_DEPTH = 64
"""Deepest nesting of arrays and key-value lists inside one attribute value; deeper is refused."""


def read_any_value(value: Any, path: str, depth: int = 0) -> AnyValue:
    """A model value from a JSON ``AnyValue`` object (an empty object is ``None``)."""
    if depth > MAX_VALUE_DEPTH:
        raise fail(path, f"value nested deeper than {MAX_VALUE_DEPTH} levels")
    obj = read_object(value, path)
    for key, item in obj.items():
        if item is None:
            continue
        if key in ("stringValue", "string_value"):
            return read_str(item, f"{path}.stringValue")
        if key in ("boolValue", "bool_value"):
            return read_bool(item, f"{path}.boolValue")
        if key in ("intValue", "int_value"):
            return read_int_value(item, f"{path}.intValue")
        if key in ("doubleValue", "double_value"):
            return read_double(item, f"{path}.doubleValue")
        if key in ("bytesValue", "bytes_value"):
            return read_bytes(item, f"{path}.bytesValue")
        if key in ("arrayValue", "array_value"):
            apath = f"{path}.arrayValue"
            values = read_list(read_object(item, apath).get("values"), f"{apath}.values")
            return tuple(
                read_any_value(v, f"{apath}.values[{i}]", depth + 1) for i, v in enumerate(values)
            )
        if key in ("kvlistValue", "kvlist_value"):
            kpath = f"{path}.kvlistValue"
            return read_attributes(
                read_object(item, kpath).get("values"), f"{kpath}.values", depth + 1
            )
    return None


def read_attributes(value: Any, path: str, depth: int = 0) -> dict[str, AnyValue]:
    """Model attributes from a JSON array of ``KeyValue`` objects."""
    out: dict[str, AnyValue] = {}
    for i, item in enumerate(read_list(value, path)):
        kv_path = f"{path}[{i}]"
        kv = read_object(item, kv_path)
        key = read_str(kv.get("key"), f"{kv_path}.key")
        out[key] = read_any_value(kv.get("value"), f"{kv_path}.value", depth)
    return out
