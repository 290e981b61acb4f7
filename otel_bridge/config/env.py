"""``${env:VAR}`` substitution over a loaded configuration, as the OpenTelemetry Collector does it.

Grammar, inside any string value (keys are never substituted):

* ``${env:NAME}`` and the Collector's short form ``${NAME}``: the value of environment variable
  ``NAME``; an undefined variable is an error naming the key path.
* ``${env:NAME:-default}``: the value, or ``default`` when ``NAME`` is undefined *or empty*
  (shell semantics).
* ``$$``: a literal ``$``. Any other ``$`` is kept as it is.

When a string consists of exactly one reference, the substituted text is read as a YAML scalar,
so ``port: ${env:PORT}`` yields an ``int`` and ``enabled: ${env:ON}`` a ``bool``, as in the
Collector. Anything that does not read as a plain scalar stays a string. The text behind each
such scalar is recorded (see :data:`SUBSTITUTED_TEXT`) so that a field typed ``str`` still gets
the variable's text (``token: ${env:TOKEN}`` with ``TOKEN=12345`` or ``off``), as in the Collector.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_TOKEN = re.compile(r"\$\$|\$\{([^}]*)\}")
_REFERENCE = re.compile(rf"^(?:env:)?({_NAME})(?::-(.*))?$", re.DOTALL)

SUBSTITUTED_TEXT: ContextVar[dict[str, str]] = ContextVar("otel_bridge_substituted_text")
"""Key path -> substituted text, for values that a whole reference turned into a non-string.

The loader sets a fresh dict around one parse; :func:`substitute` fills it and the typed overlay
reads it when a ``str`` field receives such a value.
"""


def join_path(path: str, key: object) -> str:
    """``path`` extended by a mapping key (``a.b``) or a list index (``a[0]``)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def substitute(value: Any, env: Mapping[str, str], problems: list[str], path: str = "") -> Any:
    """``value`` with every string substituted; problems are appended with their key path."""
    if isinstance(value, str):
        return _substitute_string(value, env, problems, path)
    if isinstance(value, Mapping):
        return {k: substitute(v, env, problems, join_path(path, k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [substitute(v, env, problems, join_path(path, i)) for i, v in enumerate(value)]
    return value


def _substitute_string(text: str, env: Mapping[str, str], problems: list[str], path: str) -> Any:
    if "$" not in text:
        return text
    failed = False

    def replace(match: re.Match[str]) -> str:
        nonlocal failed
        if match.group(0) == "$$":
            return "$"
        inner = match.group(1)
        ref = _REFERENCE.match(inner)
        where = path or "<root>"
        if ref is None:
            failed = True
            problems.append(
                f"{where}: unsupported reference ${{{inner}}} "
                "(use ${env:NAME} or ${env:NAME:-default}; write $$ for a literal $)"
            )
            return ""
        name, default = ref.group(1), ref.group(2)
        found = env.get(name)
        if found is not None and (found != "" or default is None):
            return found
        if default is not None:
            return default
        failed = True
        problems.append(f"{where}: environment variable {name} is not set")
        return ""

    result = _TOKEN.sub(replace, text)
    if failed:
        return text
    whole = _TOKEN.fullmatch(text)
    if whole is not None and whole.group(0) != "$$":
        scalar = _as_scalar(result)
        if not isinstance(scalar, str):
            texts = SUBSTITUTED_TEXT.get(None)
            if texts is not None:
                texts[path] = result
        return scalar
    return result


def _as_scalar(text: str) -> Any:
    """``text`` read as a YAML scalar (int, float, bool) when it is one, else ``text``."""
    import yaml  # noqa: PLC0415 (only when a variable is substituted)

    try:
        parsed = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError):
        return text  # e.g. an integer of more than 4300 digits: kept as text
    if isinstance(parsed, bool | int | float):
        return parsed
    return text
