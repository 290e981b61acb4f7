"""Conservative command extraction: a table of accepted and rejected tool calls."""

from __future__ import annotations

import json

import pytest
from otel_span_helpers import model_span

from otel_bridge.model import AnyValue, Batch, RelationKind
from otel_bridge.processors.normalize import Normalizer, extract_command

GENAI = "gen_ai.tool.call.arguments"

ACCEPT: list[tuple[str, dict[str, AnyValue], str]] = [
    ("shell", {GENAI: json.dumps({"command": "ls -la"})}, "ls -la"),
    ("anything", {GENAI: json.dumps({"cmd": "make test", "cwd": "/src"})}, "make test"),
    ("runner", {GENAI: json.dumps({"shell_command": "pytest -q"})}, "pytest -q"),
    ("x", {GENAI: json.dumps({"script": "echo hi", "timeout": 3})}, "echo hi"),
    ("exec", {GENAI: json.dumps({"argv": ["git", "commit", "-m", "a b"]})}, "git commit -m 'a b'"),
    ("run_process", {GENAI: json.dumps({"args": ["python3", "-V"]})}, "python3 -V"),
    ("tool", {GENAI: json.dumps({"argv": ["ls"]})}, "ls"),
    ("bash", {"input.value": "cat /etc/hosts", "input.mime_type": "text/plain"}, "cat /etc/hosts"),
    ("run_shell_command", {"input.value": json.dumps("whoami")}, "whoami"),
    (
        "terminal",
        {"input.value": json.dumps({"command": "uname -a"}), "input.mime_type": "application/json"},
        "uname -a",
    ),
    ("shell", {GENAI: {"command": "df -h"}}, "df -h"),
    (
        "shell",
        {GENAI: json.dumps({"command": "curl -H 'Authorization: Bearer abcdefghijklmnop' x"})},
        "curl -H 'Authorization: Bearer [REDACTED]' x",
    ),
    (
        "shell",
        {GENAI: json.dumps({"command": "export OPENAI_API_KEY=sk-abc; run"})},
        "export OPENAI_API_KEY=[REDACTED]; run",
    ),
]

REJECT: list[tuple[str, dict[str, AnyValue], str | None]] = [
    (
        "shell",
        {GENAI: json.dumps({"command": "ls", "cmd": "pwd"})},
        "ambiguous_command_fields:cmd,command",
    ),
    ("shell", {GENAI: json.dumps({"command": ["ls", "-l"]})}, "command_field_not_string:command"),
    ("shell", {GENAI: json.dumps({"command": "   "})}, "empty_command"),
    (
        "shell",
        {GENAI: json.dumps({"argv": ["ls"], "args": ["-l"]})},
        "ambiguous_argument_vectors:argv,args",
    ),
    ("exec", {GENAI: json.dumps({"argv": ["ls", 3]})}, "argument_vector_not_strings:argv"),
    ("exec", {GENAI: json.dumps({"argv": []})}, "empty_command"),
    ("shell", {GENAI: json.dumps({"input": {"command": "ls"}})}, "no_command_field"),
    ("shell", {GENAI: json.dumps([1, 2])}, "arguments_not_object"),
    ("shell", {}, "no_arguments"),
    ("shell", {GENAI: "{not json"}, "arguments_not_json"),
    ("shell", {"input.value": "{", "input.mime_type": "application/json"}, "arguments_not_json"),
    ("calculator", {GENAI: json.dumps({"args": ["1", "2"]})}, None),
    ("weather", {GENAI: json.dumps({"city": "Paris"})}, None),
    ("weather", {"input.value": "Paris"}, None),
    (
        "search",
        {
            "tool.parameters": json.dumps(
                {"type": "object", "properties": {"command": {"type": "string"}}}
            )
        },
        None,
    ),
    ("browser", {GENAI: json.dumps({"cmd": 3})}, "command_field_not_string:cmd"),
]


@pytest.mark.parametrize(("tool", "attrs", "expected"), ACCEPT)
def test_accepted_commands(tool: str, attrs: dict[str, AnyValue], expected: str) -> None:
    """Unambiguous declarations yield the (redacted) command."""
    result = extract_command(tool, attrs)
    assert result.command == expected
    assert result.reason is None


@pytest.mark.parametrize(("tool", "attrs", "reason"), REJECT)
def test_rejected_commands(tool: str, attrs: dict[str, AnyValue], reason: str | None) -> None:
    """Ambiguous or absent declarations yield no command, with a reason when it matters."""
    result = extract_command(tool, attrs)
    assert result.command is None
    assert result.reason == reason


def test_shell_raw_text_input_is_the_command() -> None:
    """A shell tool's raw non-JSON text input.value is taken as the command verbatim."""
    assert extract_command("bash", {"input.value": "{ ls; }"}).command == "{ ls; }"


def test_rejected_command_becomes_coverage() -> None:
    """A shell tool whose command cannot be extracted gives a command_not_extracted record."""
    span = model_span(
        "execute_tool shell",
        1,
        attrs={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "shell",
            GENAI: json.dumps({"command": "ls", "cmd": "pwd"}),
        },
    )
    out = Normalizer()(Batch(spans=(span,)))
    assert not [o for o in out.observations if o.relation is RelationKind.DECLARED_COMMAND]
    (cov,) = out.coverage
    assert cov.reason == "command_not_extracted"
    assert "ambiguous_command_fields" in cov.detail
    assert cov.source.record_id == "0000000000000001"
