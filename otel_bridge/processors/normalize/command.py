"""Conservative extraction of a tool call's declared shell command.

A command is extracted only when the tool call leaves no doubt about it:

* the JSON arguments (``gen_ai.tool.call.arguments``, OpenInference ``input.value`` when its
  ``input.mime_type`` is JSON; a text ``input.value`` that parses as JSON counts as JSON; never
  OpenInference ``tool.parameters``, which is the tool's parameter schema, not a call's
  arguments) are an object with exactly one string
  field named ``cmd``, ``command``, ``shell_command`` or ``script``; or, with no such field, an
  ``argv`` list of strings, or an ``args`` list of strings for a tool whose name says it
  executes something;
* or the raw, non-JSON text ``input.value`` of a tool whose name says it is a shell
  (``shell``, ``bash``, ``run_shell_command``, ``execute_command``, ``terminal``, ...).

Anything else yields no command. When the tool looks like a command tool (shell-like name, or a
command-like field is present) the reason is returned so the normalizer can report a
``command_not_extracted`` coverage record; an ordinary tool without any command field yields no
reason, because it simply declares no command.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from otel_bridge.model import AnyValue, Attributes
from otel_bridge.redaction import redact_text

from .values import NOT_JSON, json_value

COMMAND_FIELDS = ("cmd", "command", "shell_command", "script")
_SHELL_NAME = re.compile(
    r"(^|[_\-.\s])(shell|bash|sh|zsh|terminal|run_shell_command|execute_command|run_command|"
    r"exec_command|shell_exec|run_terminal_cmd|powershell|cmd)($|[_\-.\s])",
    re.IGNORECASE,
)
_EXEC_NAME = re.compile(r"exec|run|shell|bash|command|terminal|subprocess|spawn", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class CommandResult:
    """The outcome of extraction: a command, or the reason there is none."""

    command: str | None
    reason: str | None = None
    """Why no command was extracted, when the tool looked like it declares one."""


def is_shell_tool(name: str) -> bool:
    """True when a tool's name says it runs shell commands."""
    return bool(_SHELL_NAME.search(name.replace("-", "_")))


def extract_command(tool_name: str, attrs: Attributes) -> CommandResult:
    """The redacted declared command of a tool call span with attributes ``attrs``."""
    key, raw = _arguments(attrs)
    shell = is_shell_tool(tool_name)
    if raw is None:
        return CommandResult(None, "no_arguments" if shell else None)
    decoded = json_value(raw)
    if decoded is NOT_JSON:
        # Only OpenInference's text input is a raw string by design; the GenAI arguments
        # attribute and a JSON-typed input are JSON, so a non-JSON value there is suspect.
        raw_text = key == "input.value" and "json" not in _mime(attrs)
        if shell and raw_text and isinstance(raw, str):
            return _accept(raw)
        return CommandResult(None, "arguments_not_json" if shell else None)
    if isinstance(decoded, str):
        if shell:
            return _accept(decoded)
        return CommandResult(None, None)
    if not isinstance(decoded, dict):
        return CommandResult(None, "arguments_not_object" if shell else None)
    return _from_object(decoded, tool_name, shell)


def _mime(attrs: Attributes) -> str:
    value = attrs.get("input.mime_type")
    return value.lower() if isinstance(value, str) else ""


def _arguments(attrs: Attributes) -> tuple[str, AnyValue]:
    # OpenInference's ``tool.parameters`` is the tool's parameter *schema* (its spec says so),
    # never the values of one call: it is not read, whatever its shape.
    for key in ("gen_ai.tool.call.arguments", "input.value"):
        value = attrs.get(key)
        if value is not None:
            return key, value
    return "", None


def _from_object(args: dict[object, object], tool_name: str, shell: bool) -> CommandResult:
    present = [k for k in COMMAND_FIELDS if k in args]
    if len(present) > 1:
        return CommandResult(None, "ambiguous_command_fields:" + ",".join(present))
    if present:
        value = args[present[0]]
        if not isinstance(value, str):
            return CommandResult(None, f"command_field_not_string:{present[0]}")
        return _accept(value)
    vectors = [k for k in ("argv", "args") if k in args]
    if "args" in vectors and not _EXEC_NAME.search(tool_name):
        vectors.remove("args")
    if len(vectors) > 1:
        return CommandResult(None, "ambiguous_argument_vectors:argv,args")
    if vectors:
        vector = args[vectors[0]]
        if not isinstance(vector, list) or not all(isinstance(a, str) for a in vector):
            return CommandResult(None, f"argument_vector_not_strings:{vectors[0]}")
        if not vector or not vector[0]:
            return CommandResult(None, "empty_command")
        return _accept(shlex.join(vector))
    return CommandResult(None, "no_command_field" if shell else None)


def _accept(command: str) -> CommandResult:
    if not command.strip():
        return CommandResult(None, "empty_command")
    return CommandResult(redact_text(command))
