"""Secret redaction (otel_bridge.redaction) and the redact processor."""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import given

from otel_bridge.component import Consumer, CreateSettings
from otel_bridge.model import (
    Batch,
    Entity,
    EntityKind,
    LogRecord,
    Observation,
    Resource,
    Scope,
    Source,
    Span,
    SpanEvent,
)
from otel_bridge.processors.redact import AttributeRedactor, Config, factory
from otel_bridge.redaction import REDACTED, Redactor, redact_argv, redact_env, redact_text
from otel_bridge.testing import RecordingConsumer


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("mysql --password hunter2 -u bob", "hunter2"),
        ("tool --token=abc123xyz", "abc123xyz"),
        ("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwx python a.py", "sk-abcdefghijklmnopqrstuvwx"),
        ("curl -H 'Authorization: Bearer eyJhbGciOi.abc' x", "eyJhbGciOi.abc"),
        ("git clone https://bob:s3cr3tpw@example.com/r.git", "s3cr3tpw"),
        ("echo AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
        ("export GH=ghp_abcdefghijklmnopqrstuvwxyz0123", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
        ("DB_PASSWORD='pw-value' ./run", "pw-value"),
        ("--client-secret s3", "s3"),
        ("key AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
    ],
)
def test_redact_text_hides_secrets(text: str, secret: str) -> None:
    """Each secret shape is replaced and the rest of the text is kept."""
    out = redact_text(text)
    assert secret not in out
    assert REDACTED in out


@pytest.mark.parametrize(
    "text",
    [
        "ls -la /tmp",
        "python3 -m pytest -q",
        "git clone https://github.com/x/y",
        "PWD=/home ls",
        "task-abcdefghijklmnopqrstuv",
        "echo max_tokens=128",
    ],
)
def test_redact_text_keeps_harmless_text(text: str) -> None:
    """Text without secrets is unchanged."""
    assert redact_text(text) == text


def test_redact_argv_hides_next_argument_of_secret_option() -> None:
    """A secret option's separate value is hidden; its name and other args are kept."""
    argv = ["mysql", "--password", "hunter2", "--api-key=abc", "-p", "x", "DB_PASSWORD=foo"]
    assert redact_argv(argv) == [
        "mysql",
        "--password",
        REDACTED,
        f"--api-key={REDACTED}",
        "-p",
        "x",
        f"DB_PASSWORD={REDACTED}",
    ]


def test_redact_env_by_name_and_value() -> None:
    """Secret-named variables are hidden whole; other values are scanned."""
    env = {
        "HOME": "/root",
        "GITHUB_TOKEN": "x",
        "AWS_SECRET_ACCESS_KEY": "z",
        "TOKENIZERS_PARALLELISM": "false",
        "NOTE": "uses sk-abcdefghijklmnopqrstuvwx",
    }
    out = redact_env(env)
    assert out["HOME"] == "/root"
    assert out["GITHUB_TOKEN"] == REDACTED
    assert out["AWS_SECRET_ACCESS_KEY"] == REDACTED
    assert out["TOKENIZERS_PARALLELISM"] == "false"
    assert "sk-" not in out["NOTE"]


def test_extra_patterns_and_names() -> None:
    """Configured extra patterns and names are redacted too."""
    r = Redactor(extra_patterns=[r"corp-[0-9]{6}"], extra_names=["SESSION_BLOB"])
    assert r.text("id corp-123456 ok") == f"id {REDACTED} ok"
    assert r.env({"SESSION_BLOB": "v"}) == {"SESSION_BLOB": REDACTED}
    assert r.argv(["--session-blob", "v"]) == ["--session-blob", REDACTED]


_secret = st.from_regex(r"sk-[A-Za-z0-9]{20,30}", fullmatch=True)
_filler = st.text(
    alphabet=st.characters(whitelist_categories=("Ll", "Nd"), whitelist_characters=" /.="),
    max_size=20,
)


@given(_filler, _secret, _filler)
def test_embedded_key_never_survives(before: str, secret: str, after: str) -> None:
    """A key-shaped secret anywhere in text is never present after redaction."""
    assert secret not in redact_text(f"{before} {secret} {after}")


@given(st.text(max_size=60))
def test_redaction_is_idempotent(text: str) -> None:
    """Redacting twice changes nothing more than redacting once."""
    once = redact_text(text)
    assert redact_text(once) == once


_RES = Resource(attributes={"service.name": "agent"})
_SCOPE = Scope(name="t")


def test_processor_redacts_spans_logs_and_observations() -> None:
    """The processor redacts span, event and log attributes, argv, bodies and observations."""
    span = Span(
        resource=_RES,
        scope=_SCOPE,
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        attributes={
            "http.request.header.authorization": "Bearer abcdefghijk",
            "tool.args": "--token=abc",
            "gen_ai.usage.input_tokens": 12,
        },
        events=(SpanEvent(time_unix_nano=1, name="e", attributes={"api_key": "k"}),),
    )
    log = LogRecord(
        resource=_RES,
        scope=_SCOPE,
        body="password=hunter2",
        attributes={"process.command_args": ("x", "--password", "pw")},
    )
    obs = Observation(
        id="o#1",
        time_unix_nano=1,
        source=Source(channel="os", backend="linux", record_id="r"),  # type: ignore[arg-type]
        subject=Entity(
            kind=EntityKind.COMMAND,
            id="c",
            label="run --token t0k",
            attrs={"command.line": "run --token t0k"},
        ),
    )
    sink = RecordingConsumer()
    proc = factory.create(CreateSettings(id="redact"), Config(), sink)
    assert isinstance(proc, Consumer)
    proc.consume(Batch(spans=(span,), logs=(log,), observations=(obs,)))
    out_span, out_log, out_obs = sink.spans[0], sink.logs[0], sink.observations[0]
    assert out_span.attributes["http.request.header.authorization"] == REDACTED
    assert out_span.attributes["tool.args"] == f"--token={REDACTED}"
    assert out_span.attributes["gen_ai.usage.input_tokens"] == 12
    assert out_span.events[0].attributes["api_key"] == REDACTED
    assert out_log.attributes["process.command_args"] == ("x", "--password", REDACTED)
    assert out_log.body == f"password={REDACTED}"
    assert "t0k" not in out_obs.subject.label
    assert "t0k" not in str(out_obs.subject.attrs["command.line"])


def test_processor_extra_keys_allow_keys_and_bad_pattern() -> None:
    """Extra attribute keys are hidden, allowed keys kept, and a bad regex is a config problem."""
    redactor = AttributeRedactor(Config(attribute_keys=["user.email"], allow_keys=["app.token"]))
    attrs = redactor.attributes({"user.email": "a@b.c", "app.token": "visible", "x": "y"})
    assert attrs == {"user.email": REDACTED, "app.token": "visible", "x": "y"}
    assert Config(patterns=["(unclosed"]).validate()[0].startswith("patterns[0]: invalid")
    unchanged = {"a": "b"}
    assert redactor.attributes(unchanged) is unchanged


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("GITHUB_TOKEN", True),
        ("HF_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("MYSQL_PWD", True),
        ("--client-secret", True),
        ("api_key", True),
        ("authorization", False),  # a header name: the processor treats it by key, see below
        ("PATH", False),
        ("HOME", False),
        ("PWD", False),
        ("OLDPWD", False),
        ("TOKENIZERS_PARALLELISM", False),
        ("input_tokens", False),
        ("max_tokens", False),
        ("KEYMAP", False),
        ("OTEL_BRIDGE_RUN_ID", False),
    ],
)
def test_secret_names(name: str, secret: bool) -> None:
    """Secret-looking names are recognised; ordinary ones (PWD, token counts) are not."""
    from otel_bridge.redaction import is_secret_name

    assert is_secret_name(name) is secret


def test_authorization_attribute_is_hidden_by_key() -> None:
    """Header attributes named authorization, cookie or set-cookie are hidden whole."""
    redactor = AttributeRedactor(Config())
    attrs = {
        "http.request.header.authorization": "Basic dXNlcjpwYXNz",
        "http.request.header.cookie": "sid=1",
        "http.response.header.set-cookie": "sid=2",
        "http.request.header.accept": "text/plain",
    }
    out = redactor.attributes(attrs)
    assert out["http.request.header.authorization"] == REDACTED
    assert out["http.request.header.cookie"] == REDACTED
    assert out["http.response.header.set-cookie"] == REDACTED
    assert out["http.request.header.accept"] == "text/plain"


@given(st.lists(st.text(max_size=12), max_size=8))
def test_redact_argv_keeps_length(argv: list[str]) -> None:
    """Redacting an argument vector never adds or drops arguments."""
    assert len(redact_argv(argv)) == len(argv)


def test_nested_values_are_redacted() -> None:
    """Secrets inside arrays and key-value lists are redacted too."""
    redactor = AttributeRedactor(Config())
    out = redactor.attributes(
        {"list": ("ok", "--token=abc"), "map": {"password": "pw", "n": 1}, "n": 3}
    )
    assert out["list"] == ("ok", f"--token={REDACTED}")
    assert out["map"] == {"password": REDACTED, "n": 1}
    assert out["n"] == 3
