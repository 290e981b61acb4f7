"""The rule table of docs/redaction.md, row by row, plus the look-alikes that must survive.

Each row: the rule, an example before and the exact text after. The same rows are in the doc
(checked below), so the documentation cannot drift from what the code does.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from otel_bridge.model import Resource, Scope, Span
from otel_bridge.processors.redact import AttributeRedactor, Config
from otel_bridge.redaction import redact_argv, redact_text

DOC = Path(__file__).resolve().parents[2] / "docs" / "redaction.md"

RULES: list[tuple[str, str, str]] = [
    (
        "curl user",
        "curl -u alice:s3cret https://api.example",
        "curl -u alice:[REDACTED] https://api.example",
    ),
    (
        "curl user",
        "curl --user alice:s3cret https://api.example",
        "curl --user alice:[REDACTED] https://api.example",
    ),
    ("curl user", "curl --user=alice:s3cret https://x", "curl --user=alice:[REDACTED] https://x"),
    ("curl user", "curl -ualice:s3cret https://x", "curl -ualice:[REDACTED] https://x"),
    ("curl user", "curl -u 'alice:two words' https://x", "curl -u 'alice:[REDACTED]' https://x"),
    ("curl user", "curl -U bob:pw2 https://x", "curl -U bob:[REDACTED] https://x"),
    ("mysql -p", "mysql -u root -pS3cret shop", "mysql -u root -p[REDACTED] shop"),
    ("mysql -p", "mysqldump -pS3cret shop", "mysqldump -p[REDACTED] shop"),
    # a #!/bin/sh script named mysql runs as `/bin/sh /path/mysql ...`
    (
        "mysql -p",
        "/bin/sh /opt/bin/mysql -uroot -pS3cret db",
        "/bin/sh /opt/bin/mysql -uroot -p[REDACTED] db",
    ),
    ("sshpass -p", "bash ./sshpass -p S3cret ssh h", "bash ./sshpass -p [REDACTED] ssh h"),
    # a command quoted in text: a tool call's JSON arguments, a shell's -c, an exception message
    (
        "mysql -p",
        '{"command": "mysql -u root -psk-test123 shop"}',
        '{"command": "mysql -u root -p[REDACTED] shop"}',
    ),
    (
        "mysql -p",
        'sh -c "cd /srv && mysql -pS3cret shop"',
        'sh -c "cd /srv && mysql -p[REDACTED] shop"',
    ),
    (
        "mysql -p",
        "Command '['sh', '-c', 'mysql -pS3cret db']' returned non-zero exit status 1.",
        "Command '['sh', '-c', 'mysql -p[REDACTED] db']' returned non-zero exit status 1.",
    ),
    ("mysql -p", "['mysqldump', '-pS3cret', 'db']", "['mysqldump', '-p[REDACTED]', 'db']"),
    ("secret option", "mysql --password=S3cret shop", "mysql --password=[REDACTED] shop"),
    ("secret option", "deploy --api-token tok123", "deploy --api-token [REDACTED]"),
    (
        "sshpass -p",
        "sshpass -p S3cret ssh -p 2222 deploy@host",
        "sshpass -p [REDACTED] ssh -p 2222 deploy@host",
    ),
    ("sshpass -p", "sshpass -pS3cret scp -P 22 f h:", "sshpass -p[REDACTED] scp -P 22 f h:"),
    ("secret variable", "PGPASSWORD=S3cret psql -h db", "PGPASSWORD=[REDACTED] psql -h db"),
    ("secret variable", "MYSQL_PWD=S3cret mysql shop", "MYSQL_PWD=[REDACTED] mysql shop"),
    (
        "URL credentials",
        "psql postgres://app:p@ss@db:5432/shop",
        "psql postgres://app:[REDACTED]@db:5432/shop",
    ),
    (
        "URL credentials",
        "https://alice:s3cret@api.example/v1?x=1",
        "https://alice:[REDACTED]@api.example/v1?x=1",
    ),
    (
        "secret query parameter",
        "https://api.example/v1?access_token=abc123&page=2",
        "https://api.example/v1?access_token=[REDACTED]&page=2",
    ),
    (
        "SQL password",
        "CREATE USER app WITH PASSWORD 'S3cret'",
        "CREATE USER app WITH PASSWORD '[REDACTED]'",
    ),
    (
        "SQL password",
        "ALTER USER 'app'@'%' IDENTIFIED BY 'S3cret'",
        "ALTER USER 'app'@'%' IDENTIFIED BY '[REDACTED]'",
    ),
    (
        "SQL password",
        "SET PASSWORD FOR app = PASSWORD('S3cret')",
        "SET PASSWORD FOR app = PASSWORD('[REDACTED]')",
    ),
    (
        "authorization header",
        "curl -H 'Authorization: Bearer abcdefgh123' https://x",
        "curl -H 'Authorization: Bearer [REDACTED]' https://x",
    ),
    (
        "key shape",
        "export OPENAI=sk-proj-ABCDEFGHIJKLMNOPQRSTUV",
        "export OPENAI=[REDACTED]",
    ),
]

KEPT: list[tuple[str, str]] = [
    ("ssh: -p is a port", "ssh -p 2222 deploy@host"),
    ("nc: -p is a port", "nc -l -p 4444"),
    ("scp: -P is a port", "scp -P 2222 f host:"),
    ("mysql: -P is a port", "mysql -P 3306 -h db shop"),
    ("mysql: a detached -p prompts; the next word is the database", "mysql -u root -p shop"),
    ("curl: a user without a password (curl prompts)", "curl -u alice https://x"),
    ("sort: --key is a field", "sort --key 2 data.txt"),
    ("sort: -u is unique", "sort -u names.txt"),
    ("ps: -u is a user", "ps -u root"),
    ("SQL: a column named password", "SELECT password_hash FROM users WHERE id = 'x'"),
    ("prose", "it's curl -u, not curl -p"),
]


@pytest.mark.parametrize(("rule", "before", "after"), RULES, ids=[r[1] for r in RULES])
def test_rule_row(rule: str, before: str, after: str) -> None:
    """The text form gives exactly ``after``; the argument-vector form agrees word by word."""
    assert redact_text(before) == after, rule
    words = shlex.split(before)
    if len(words) > 1 and "'" not in before:
        assert redact_argv(words) == shlex.split(after)


@pytest.mark.parametrize(("why", "text"), KEPT, ids=[k[1] for k in KEPT])
def test_lookalike_is_kept(why: str, text: str) -> None:
    """Options that only look like secrets for other tools are left alone."""
    assert redact_text(text) == text, why
    words = shlex.split(text.replace("'", ""))
    assert redact_argv(words) == words, why


def test_every_row_is_documented() -> None:
    """docs/redaction.md shows each example before and after."""
    doc = DOC.read_text(encoding="utf-8")
    for rule, before, after in RULES:
        assert f"`{before}`" in doc, before
        assert f"`{after}`" in doc, after
        assert rule in doc
    for _, text in KEPT:
        assert f"`{text}`" in doc, text


def test_span_attributes_are_redacted() -> None:
    """``db.statement``, ``process.command_line``, ``url.full`` and argv arrays of a span."""
    span = Span(
        resource=Resource(attributes={"service.name": "svc"}),
        scope=Scope(name="s"),
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        attributes={
            "db.statement": "ALTER USER 'app'@'%' IDENTIFIED BY 'S3cret'",
            "process.command_line": "sshpass -p S3cret ssh -p 2222 deploy@host",
            "url.full": "https://alice:s3cret@api.example/v1",
            "process.command_args": ("mysql", "-u", "root", "-pS3cret", "shop"),
            "net.peer.port": 2222,
        },
    )
    attrs = AttributeRedactor(Config()).span(span).attributes
    assert attrs == {
        "db.statement": "ALTER USER 'app'@'%' IDENTIFIED BY '[REDACTED]'",
        "process.command_line": "sshpass -p [REDACTED] ssh -p 2222 deploy@host",
        "url.full": "https://alice:[REDACTED]@api.example/v1",
        "process.command_args": ("mysql", "-u", "root", "-p[REDACTED]", "shop"),
        "net.peer.port": 2222,
    }


WORDS = st.sampled_from(
    [
        "curl",
        "-u",
        "--user",
        "-U",
        "--user=",
        "mysql",
        "-p",
        "-pX",
        "sshpass",
        "ssh",
        "nc",
        "a:b",
        "'a:b c'",
        '"x:y"',
        "'",
        '"',
        "|",
        ";",
        "&&",
        "PASSWORD",
        "IDENTIFIED",
        "BY",
        "('s')",
        "'s'",
        "https://u:p@h/x",
        "p@ss@h",
        "--password",
        "--key",
        "2",
        "sudo",
        "env",
        "A=B",
        "PGPASSWORD=x",
        "=",
        ":",
        "@",
        "[REDACTED]",
        "sk-",
        "Bearer",
        "Authorization:",
    ]
)


@settings(max_examples=300, deadline=None)
@given(words=st.lists(WORDS | st.text(max_size=8), max_size=12), sep=st.sampled_from([" ", "  "]))
def test_text_redaction_is_total_and_idempotent(words: list[str], sep: str) -> None:
    """Any text: redaction never raises, and redacting twice equals redacting once."""
    text = sep.join(words)
    once = redact_text(text)
    assert redact_text(once) == once


@settings(max_examples=300, deadline=None)
@given(argv=st.lists(WORDS | st.text(max_size=8), max_size=10))
def test_argv_redaction_is_total_idempotent_and_keeps_length(argv: list[str]) -> None:
    """Any argument vector: never raises, same length, idempotent."""
    once = redact_argv(argv)
    assert len(once) == len(argv)
    assert redact_argv(once) == once
