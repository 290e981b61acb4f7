"""The one rule for text that is not valid Unicode (``docs/strings.md``).

The operating system hands out bytes: a file may be named ``caf\\xe9.txt`` (Latin-1, not
UTF-8), an argument vector or environment may hold any bytes but NUL. Python decodes such names
with ``surrogateescape`` (``os.fsdecode``, ``os.listdir``, ``os.readlink``), which turns each
undecodable byte into a lone surrogate (``"caf\\udce9.txt"``). Lone surrogates cannot be encoded
as UTF-8, so every JSON writer downstream (the stream files, ``graph.json``) would fail on them.

The rule, applied once at the edge where OS text becomes a record (the host receiver's record
factory), never inside an exporter:

* a clean string passes unchanged (the common case costs one ``isascii`` or one encode);
* a string holding lone surrogates is **replaced**: each of them becomes U+FFFD
  (:data:`REPLACEMENT`), so the value stays readable and every writer accepts it;
* the record is **flagged**: :data:`REPLACED_KEY` lists the attribute keys whose value was
  replaced, and :data:`RAW_KEY` maps each such key to the value **escaped** losslessly (same
  shape as the value): a backslash is doubled, an undecodable byte N is written ``\\xNN``, any
  other lone surrogate ``\\uDXXX``. So ``caf\\xe9.txt`` on disk is recorded as
  ``file.path: "/tmp/caf\\ufffd.txt"`` with
  ``evidence.text_raw: {"file.path": "/tmp/caf\\\\xe9.txt"}``.

A value is replaced, never dropped: what was observed stays visible, and what could not be
represented is marked rather than silently altered.
"""

from __future__ import annotations

from collections.abc import Mapping

from otel_bridge.model import AnyValue

REPLACEMENT = "\ufffd"
"""What each lone surrogate becomes in a replaced string."""
REPLACED_KEY = "evidence.text_replaced"
"""Record attribute: the keys (tuple of str) whose value held invalid text and was replaced."""
RAW_KEY = "evidence.text_raw"
"""Record attribute: key -> the original value escaped losslessly (see the module docstring)."""


def is_valid(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (holds no lone surrogate)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _surrogate(ch: str) -> bool:
    return "\ud800" <= ch <= "\udfff"


def replaced(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD."""
    if is_valid(text):
        return text
    return "".join(REPLACEMENT if _surrogate(ch) else ch for ch in text)


def escaped(text: str) -> str:
    """``text`` escaped losslessly: ``\\`` doubled, byte N as ``\\xNN``, surrogates ``\\uD...``.

    Undecodable bytes are the surrogates U+DC80..U+DCFF that ``surrogateescape`` produces.
    """
    out: list[str] = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif "\udc80" <= ch <= "\udcff":
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif _surrogate(ch):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def from_bytes(raw: bytes) -> str:
    """Bytes from the OS as text the way Python does (``surrogateescape``), for :func:`clean`."""
    return raw.decode("utf-8", "surrogateescape")


def _dirty(value: AnyValue) -> bool:
    if isinstance(value, str):
        return not is_valid(value)
    if isinstance(value, tuple):
        return any(_dirty(v) for v in value)
    if isinstance(value, Mapping):
        return any(not is_valid(k) or _dirty(v) for k, v in value.items())
    return False


def _map(value: AnyValue, fix: bool) -> AnyValue:
    """``value`` with every string (mapping keys included) replaced (``fix``) or escaped."""
    if isinstance(value, str):
        return replaced(value) if fix else escaped(value)
    if isinstance(value, tuple):
        return tuple(_map(v, fix) for v in value)
    if isinstance(value, Mapping):
        return {(replaced(k) if fix else escaped(k)): _map(v, fix) for k, v in value.items()}
    return value


_PLAIN = frozenset({int, float, bool, bytes, type(None)})
"""Value types that hold no text (:func:`_dirty` is False for them)."""


def _all_ascii(attributes: Mapping[str, AnyValue]) -> bool:
    """True when every key and string is ASCII (so valid) and no value is a mapping: then
    :func:`clean` has nothing to replace. One pass, nothing encoded; False only means "look
    closer"."""
    for key, value in attributes.items():
        if not key.isascii():
            return False
        if isinstance(value, str):
            if not value.isascii():
                return False
        elif isinstance(value, tuple):
            if not all(isinstance(item, str) and item.isascii() for item in value):
                return False
        elif type(value) not in _PLAIN:
            return False
    return True


def clean(attributes: Mapping[str, AnyValue]) -> dict[str, AnyValue]:
    """``attributes`` under the rule: replaced values, plus the flag and raw keys when any was.

    A key that is itself invalid text is replaced too (its raw form is the key of the raw
    entry's escaped value, escaped).
    """
    if _all_ascii(attributes):
        return dict(attributes)  # the common case: nothing to replace, no string encoded
    return clean_each(attributes)


def clean_each(attributes: Mapping[str, AnyValue]) -> dict[str, AnyValue]:
    """:func:`clean` without its all-ASCII fast path: every key and value checked (the
    reference its fast path is tested against)."""
    out: dict[str, AnyValue] = {}
    flagged: list[str] = []
    raw: dict[str, AnyValue] = {}
    for key, value in attributes.items():
        if not is_valid(key) or _dirty(value):
            good = replaced(key)
            out[good] = _map(value, True)
            flagged.append(good)
            raw[escaped(key)] = _map(value, False)
        else:
            out[key] = value
    if flagged:
        out[REPLACED_KEY] = tuple(flagged)
        out[RAW_KEY] = raw
    return out
