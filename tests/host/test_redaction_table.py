"""A table of secrets that must be redacted and look-alikes that must survive, plus properties."""

from __future__ import annotations

import string

import hypothesis.strategies as st
import pytest
from hypothesis import given

from otel_bridge.model import LogRecord, Resource, Scope
from otel_bridge.processors.redact import AttributeRedactor, Config
from otel_bridge.redaction import REDACTED, Redactor, redact_argv, redact_env, redact_text

SECRETS: list[tuple[str, str]] = [
    ('{"password": "hunter2"}', "hunter2"),
    ("{'api_key': 'abc123def'}", "abc123def"),
    ('"Authorization": "Bearer abcdefgh123"', "abcdefgh123"),
    ('Authorization="Token abcdef123"', "abcdef123"),
    ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    ("Proxy-Authorization: Digest zzzyyyxxx", "zzzyyyxxx"),
    ("psql postgresql://admin:p%40ss@db:5432/x", "p%40ss"),
    ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "wJalrXUtnFEMI/K7MDENG"),
    ("SLACK=xoxb-1234567890-abcdef", "xoxb-1234567890-abcdef"),
    ("note hf_abcdefghijklmnopqrstuvwxyzABCDEF here", "hf_abcdefghijklmnopqrstuvwxyzABCDEF"),
    ("sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "sk-ant-api03-abcdefghijklmnopqrstuvwxyz"),
    ("sk-proj-ABCDEFGHIJKLMNOPQRSTUV", "sk-proj-ABCDEFGHIJKLMNOPQRSTUV"),
    ("github_pat_11ABCDEFGHIJKLMNOPQRSTUV_xyz", "github_pat_11ABCDEFGHIJKLMNOPQRSTUV_xyz"),
    ("gho_abcdefghijklmnopqrstuvwxyz01", "gho_abcdefghijklmnopqrstuvwxyz01"),
    ("ASIAABCDEFGHIJKLMNOP in log", "ASIAABCDEFGHIJKLMNOP"),
    (
        "jwt eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeKKF2Q",
        "eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeKKF2Q",
    ),
    ("--api-key sekrit1", "sekrit1"),
    ("--apikey=sekrit2", "sekrit2"),
    ("--private-key /path/k.pem", "/path/k.pem"),
    ("--auth-token=tok99", "tok99"),
    ("password: hunter2", "hunter2"),
    ("DATABASE_PASSWD=pw1 ./run", "pw1"),
    ("STRIPE_SECRET=whsec_live", "whsec_live"),
    ("MY_CREDENTIALS=cred-blob", "cred-blob"),
    ("curl 'https://x/?a=1&access_token=qwerty' -o f", "qwerty"),
    ("SESSION_COOKIE=c00kie ls", "c00kie"),
    ("gpg --key 0xDEADBEEF01", "0xDEADBEEF01"),
    ("tool --key=abcdef123", "abcdef123"),
    ("tool --key 12ab34cd56ef", "12ab34cd56ef"),
]

LOOKALIKES = [
    "--keyboard us",
    "--monkey banana",
    "--passes 3",
    "--tokenizer bpe",
    "--keep-going",
    "KEYBOARD=us",
    "MONKEY=banana",
    "TOKENIZERS_PARALLELISM=false",
    "max_tokens=100",
    "ssh-keygen -t ed25519",
    "https://example.com/a:b@c",
    "sk-short",
    "risk-assessment-framework-v2",
    "ghp_short",
    "keyword=foo",
    "author=bob",
    '{"name": "bob", "count": 3}',
    "PWD=/home/u OLDPWD=/tmp",
    "Bearer of bad news",
    "git log --author=alice",
    "sort --key 2 data.csv",
    "sort --key=1,1n -t, data.csv",
    "sort -key 3.2bn,4 data",
]


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_secret_is_replaced_and_context_kept(text: str, secret: str) -> None:
    """Every table secret disappears; the text before the secret is kept for recognisability."""
    out = redact_text(text)
    assert secret not in out
    assert REDACTED in out
    prefix = text[: text.index(secret)]
    assert out.startswith(prefix[: max(0, len(prefix) - 8)])


@pytest.mark.parametrize("text", LOOKALIKES)
def test_lookalike_is_left_alone(text: str) -> None:
    """Text that only resembles a secret (names, short prefixes, paths) is not altered."""
    assert redact_text(text) == text


@pytest.mark.parametrize(("text", "secret"), SECRETS)
def test_table_redaction_is_idempotent(text: str, secret: str) -> None:
    """Redacting already-redacted text changes nothing."""
    once = redact_text(text)
    assert redact_text(once) == once


def test_argv_secret_option_hides_only_the_following_argument() -> None:
    """In argv form, ``--password X`` hides X and leaves the next option and its value."""
    out = redact_argv(["mysql", "--password", "hunter2", "--user", "bob", "db"])
    assert out == ["mysql", "--password", REDACTED, "--user", "bob", "db"]


def test_argv_trailing_secret_option_is_kept_as_is() -> None:
    """A secret option at the end of argv has nothing to hide and keeps the vector length."""
    assert redact_argv(["tool", "--token"]) == ["tool", "--token"]


def test_argv_elements_are_scanned_as_text() -> None:
    """Secrets embedded inside argv elements (assignments, URLs) are redacted in place."""
    out = redact_argv(["env", "API_TOKEN=abc", "git", "clone", "https://u:pw9@h/r"])
    assert out == ["env", f"API_TOKEN={REDACTED}", "git", "clone", f"https://u:{REDACTED}@h/r"]


def test_env_hides_secret_names_even_when_empty_and_scans_the_rest() -> None:
    """Secret-named variables are hidden whole; PWD stays; others are scanned for key shapes."""
    out = redact_env(
        {"PWD": "/x", "GITHUB_TOKEN": "", "PATH": "/bin", "URL": "https://u:p@h/", "A": "x"}
    )
    assert out == {
        "PWD": "/x",
        "GITHUB_TOKEN": REDACTED,
        "PATH": "/bin",
        "URL": f"https://u:{REDACTED}@h/",
        "A": "x",
    }


def test_extra_names_cover_options_assignments_and_argv() -> None:
    """An extra secret name applies to ``NAME=v``, ``--name v`` and argv forms alike."""
    r = Redactor(extra_names=["flavour"])
    assert r.text("FLAVOUR=vanilla") == f"FLAVOUR={REDACTED}"
    assert r.text("app --flavour vanilla") == f"app --flavour {REDACTED}"
    assert r.argv(["app", "--flavour", "vanilla"]) == ["app", "--flavour", REDACTED]
    assert redact_text("FLAVOUR=vanilla") == "FLAVOUR=vanilla"


def test_processor_redacts_json_tool_arguments_in_log_attributes() -> None:
    """The redact processor hides a password inside a JSON-encoded attribute value."""
    redactor = AttributeRedactor(Config())
    record = LogRecord(
        resource=Resource(attributes={"service.name": "agent"}),
        scope=Scope(name="t"),
        time_unix_nano=1,
        attributes={"gen_ai.tool.call.arguments": '{"user": "bob", "password": "hunter2"}'},
    )
    out = redactor.log(record)
    value = out.attributes["gen_ai.tool.call.arguments"]
    assert isinstance(value, str)
    assert "hunter2" not in value
    assert '"user": "bob"' in value


def test_processor_allow_key_overrides_secret_name() -> None:
    """An allow-listed key keeps its value even though its name looks secret."""
    redactor = AttributeRedactor(Config(allow_keys=["app.token_count"]))
    attrs = {"app.token_count": "42", "app.api_token": "xyz"}
    assert redactor.attributes(attrs) == {"app.token_count": "42", "app.api_token": REDACTED}


_TOKEN_ALPHABET = string.ascii_letters + string.digits
_secret_shapes = st.one_of(
    st.text(_TOKEN_ALPHABET, min_size=20, max_size=40).map(lambda s: "sk-" + s),
    st.text(_TOKEN_ALPHABET, min_size=20, max_size=40).map(lambda s: "ghp_" + s),
    st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16).map(
        lambda s: "AKIA" + s
    ),
    st.text(_TOKEN_ALPHABET, min_size=30, max_size=40).map(lambda s: "hf_" + s),
)
_filler = st.text(alphabet=string.ascii_lowercase + " /.:", max_size=20)


@given(_filler, _secret_shapes, _filler)
def test_key_shapes_never_survive_between_spaces(before: str, secret: str, after: str) -> None:
    """A key-shaped secret surrounded by spaces never appears in redacted output."""
    out = redact_text(f"{before} {secret} {after}")
    assert secret not in out


_names = st.sampled_from(["API_KEY", "DB_PASSWORD", "GH_TOKEN", "MY_SECRET", "AWS_ACCESS_KEY"])
_values = st.text(alphabet=_TOKEN_ALPHABET + "/+-", min_size=4, max_size=30)


@given(_names, _values, st.sampled_from(["{}={}", "{}: {}", '"{}": "{}"', "--{}={}"]))
def test_secret_named_values_never_survive(name: str, value: str, form: str) -> None:
    """A value assigned to a secret name, in env, YAML, JSON or option form, is always hidden."""
    text = "run " + form.format(name.lower() if form.startswith("--") else name, value) + " ok"
    out = redact_text(text)
    assert value not in out.replace(REDACTED, "\0")
    assert out.endswith(" ok")


@given(st.text(max_size=80))
def test_redaction_is_idempotent_on_any_text(text: str) -> None:
    """Redacting twice gives the same text as redacting once, for arbitrary input."""
    once = redact_text(text)
    assert redact_text(once) == once


@given(st.lists(st.text(max_size=15), max_size=8))
def test_argv_redaction_is_idempotent(argv: list[str]) -> None:
    """Redacting an argv twice equals redacting it once."""
    once = redact_argv(argv)
    assert redact_argv(once) == once


def test_a_bare_key_option_hides_all_but_a_sort_key_definition() -> None:
    """In an argv, ``--key`` keeps ``sort``'s field spec and hides anything else."""
    assert redact_argv(["sort", "--key", "2", "f"]) == ["sort", "--key", "2", "f"]
    assert redact_argv(["sort", "--key=2,2n", "f"]) == ["sort", "--key=2,2n", "f"]
    assert redact_argv(["tool", "--key", "s3cr3t-value"]) == ["tool", "--key", REDACTED]
    assert redact_argv(["tool", "--api-key", "2"]) == ["tool", "--api-key", REDACTED]
    assert redact_argv(["tool", "--key"]) == ["tool", "--key"]
    # a user who names "key" a secret gets every value hidden
    assert Redactor(extra_names=["key"]).argv(["sort", "--key", "2"]) == ["sort", "--key", REDACTED]
