"""Config edge cases: env values in typed fields, durations, nested overlays and pipeline checks."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_bridge.component import EXPORTER, Component, Consumer, CreateSettings, Factory
from otel_bridge.config import CollectorConfig, parse_config
from otel_bridge.errors import ConfigError
from otel_bridge.exporters import otlp as otlp_exporters
from otel_bridge.exporters.otlp.config import HttpExporterConfig
from otel_bridge.registry import Registry
from otel_bridge.testing import RecordingConsumer, double_registry


@dataclass(slots=True)
class Inner:
    """A nested section."""

    token: str = "t"
    port: int = 1
    flush_interval: float = 1.0


@dataclass(slots=True)
class TypedConfig:
    """A config with a field of each scalar type an env reference may land in."""

    name: str = "n"
    path: pathlib.Path = pathlib.Path("/tmp/x")
    maybe: str | None = None
    count: int = 0
    ratio: float = 0.0
    on: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)


def _create(settings: CreateSettings, config: TypedConfig, nxt: Consumer | None) -> Component:
    del settings, config, nxt
    return RecordingConsumer()


TYPED = Factory(type_name="typed", kind=EXPORTER, default_config=TypedConfig, create=_create)


def registry() -> Registry:
    """The test doubles plus the ``typed`` and the real ``otlphttp`` exporters."""
    return double_registry(TYPED, otlp_exporters.http_factory)


def parse(exporter: Any, env: dict[str, str], *, name: str = "typed") -> CollectorConfig:
    """Parse a one-pipeline config whose exporter ``name`` has the body ``exporter``."""
    doc = {
        "receivers": {"list": None},
        "exporters": {name: exporter},
        "service": {"pipelines": {"traces": {"receivers": ["list"], "exporters": [name]}}},
    }
    return parse_config(doc, env=env, registry=registry())


def typed(exporter: Any, env: dict[str, str]) -> TypedConfig:
    """The parsed ``typed`` exporter config."""
    config = parse(exporter, env).exporters["typed"].config
    assert isinstance(config, TypedConfig)
    return config


@pytest.mark.parametrize("text", ["12345", "0", "1.5", "true", "off", "yes", "-7", "1e3"])
def test_env_text_is_kept_for_string_fields(text: str) -> None:
    """A whole ${env:X} in a str field keeps the variable's text even when it reads as a scalar."""
    got = typed(
        {
            "name": "${env:V}",
            "maybe": "${V}",
            "labels": {"k": "${env:V}"},
            "names": ["${env:V}"],
            "inner": {"token": "${env:V}"},
        },
        {"V": text},
    )
    assert got.name == text
    assert got.maybe == text
    assert got.labels == {"k": text}
    assert got.names == [text]
    assert got.inner.token == text


def test_env_text_is_kept_for_path_fields() -> None:
    """A numeric-looking env value in a Path field becomes that path, not a type error."""
    assert typed({"path": "${env:P}"}, {"P": "2024"}).path == pathlib.Path("2024")


def test_env_scalars_still_convert_for_typed_fields() -> None:
    """Numbers and booleans from env still land in int, float and bool fields."""
    got = typed(
        {"count": "${env:C}", "ratio": "${env:R}", "on": "${env:B}", "inner": {"port": "${P:-9}"}},
        {"C": "42", "R": "2", "B": "true"},
    )
    assert (got.count, got.ratio, got.on, got.inner.port) == (42, 2.0, True, 9)


def test_env_text_in_wrong_typed_field_is_still_an_error() -> None:
    """A word from env in an int field is a type error naming the nested path."""
    with pytest.raises(ConfigError) as info:
        typed({"inner": {"port": "${env:P}"}}, {"P": "http"})
    assert any(p.startswith("exporters.typed.inner.port: expected") for p in info.value.problems)


def test_env_duration_strings_reach_duration_fields() -> None:
    """``flush_interval: ${env:I}`` with ``I=250ms`` is 0.25 seconds."""
    assert (
        typed({"inner": {"flush_interval": "${env:I}"}}, {"I": "250ms"}).inner.flush_interval
        == 0.25
    )


def test_substituted_texts_do_not_leak_between_parses() -> None:
    """An int from env in one parse does not turn an int literal into text in the next."""
    typed({"name": "${env:V}"}, {"V": "5"})
    with pytest.raises(ConfigError, match=r"exporters\.typed\.name: expected"):
        typed({"name": 5}, {})


def test_literal_int_in_a_string_field_is_still_rejected() -> None:
    """Only env references get the text fallback: a YAML int literal in a str field is an error."""
    with pytest.raises(ConfigError, match=r"exporters\.typed\.labels\.k: expected"):
        typed({"labels": {"k": 5}}, {})


def test_otlp_http_exporter_header_token_from_env() -> None:
    """The real otlphttp exporter keeps a numeric API token's text (YAML 1.1 reads 0123 as 83)."""
    config = parse(
        {"endpoint": "http://127.0.0.1:4318", "headers": {"api-key": "${env:KEY}"}},
        {"KEY": "0123"},
        name="otlphttp",
    )
    exporter = config.exporters["otlphttp"].config
    assert isinstance(exporter, HttpExporterConfig)
    assert exporter.headers == {"api-key": "0123"}


def test_nested_overlay_keeps_sibling_defaults() -> None:
    """Setting one nested key keeps the other nested defaults and the top-level defaults."""
    got = typed({"inner": {"port": 7}}, {})
    assert got.inner == Inner(token="t", port=7, flush_interval=1.0)
    assert got.name == "n"


def test_unknown_nested_key_suggests_the_close_one() -> None:
    """A misspelt nested key names its full path and the key it was probably meant to be."""
    with pytest.raises(ConfigError) as info:
        typed({"inner": {"tokn": "x"}}, {})
    (problem,) = info.value.problems
    assert problem.startswith("exporters.typed.inner.tokn:")
    assert "'token'" in problem


def test_every_problem_is_reported_at_once() -> None:
    """Several bad values anywhere in one config are all listed in one ConfigError."""
    with pytest.raises(ConfigError) as info:
        typed({"count": "x", "inner": {"port": "y", "nope": 1}, "on": 3}, {"U": ""})
    paths = sorted(p.split(":", 1)[0] for p in info.value.problems)
    assert paths == [
        "exporters.typed.count",
        "exporters.typed.inner.nope",
        "exporters.typed.inner.port",
        "exporters.typed.on",
    ]


def test_undefined_env_in_nested_list_names_index_path() -> None:
    """An undefined variable inside a list names the list index in its path."""
    with pytest.raises(ConfigError) as info:
        typed({"names": ["a", "${env:MISSING}"]}, {})
    assert "exporters.typed.names[1]: environment variable MISSING is not set" in (
        info.value.problems
    )


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ("metrics", "metrics pipelines are not supported"),
        ("trace", "did you mean 'traces'?"),
        ("logs/", ""),
    ],
)
def test_bad_pipeline_types_are_named(pipeline: str, message: str) -> None:
    """Unsupported or misspelt pipeline types are reported at their pipeline path."""
    doc = {
        "receivers": {"list": None},
        "exporters": {"recording": None},
        "service": {"pipelines": {pipeline: {"receivers": ["list"], "exporters": ["recording"]}}},
    }
    with pytest.raises(ConfigError) as info:
        parse_config(doc, env={}, registry=registry())
    assert any(
        p.startswith(f"service.pipelines.{pipeline}") and message in p for p in info.value.problems
    )


def test_receiver_that_cannot_feed_a_pipeline_type_is_rejected() -> None:
    """A logs-only receiver in a traces pipeline is a configuration error."""
    doc = {
        "receivers": {"logsonly": None},
        "exporters": {"recording": None},
        "service": {
            "pipelines": {"traces": {"receivers": ["logsonly"], "exporters": ["recording"]}}
        },
    }
    with pytest.raises(ConfigError) as info:
        parse_config(doc, env={}, registry=registry())
    assert any("logsonly" in p and "traces" in p for p in info.value.problems)


def test_pipeline_referencing_undeclared_component_is_rejected() -> None:
    """A pipeline naming an exporter absent from ``exporters`` is an error naming both."""
    doc = {
        "receivers": {"list": None},
        "exporters": {"recording": None},
        "service": {
            "pipelines": {"logs": {"receivers": ["list"], "exporters": ["recording/other"]}}
        },
    }
    with pytest.raises(ConfigError) as info:
        parse_config(doc, env={}, registry=registry())
    assert any(
        p.startswith("service.pipelines.logs.exporters") and "recording/other" in p
        for p in info.value.problems
    )


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(
        alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
        max_size=20,
    )
)
def test_any_env_text_round_trips_through_a_string_field(text: str) -> None:
    """Whatever text a variable holds, a str field given ``${env:V}`` holds exactly that text."""
    assert typed({"name": "${env:V}"}, {"V": text}).name == text
