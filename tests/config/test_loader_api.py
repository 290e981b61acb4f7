"""The loader's public API: ids, summaries, warnings, validate() prefixes, broken factories."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.component import PROCESSOR, Component, Consumer, CreateSettings, Factory
from otel_bridge.config import ComponentId, load_config, parse_config
from otel_bridge.errors import ConfigError
from otel_bridge.registry import Registry
from otel_bridge.testing import double_registry


def minimal(**extra: Any) -> dict[str, Any]:
    """A minimal valid document with ``extra`` top-level sections merged in."""
    doc: dict[str, Any] = {
        "receivers": {"list": None},
        "exporters": {"recording": None},
        "service": {"pipelines": {"traces": {"receivers": ["list"], "exporters": ["recording"]}}},
    }
    doc.update(extra)
    return doc


def problems_of(doc: Any, registry: Registry | None = None) -> list[str]:
    """The problems parse_config reports for ``doc`` (fails if it parses)."""
    with pytest.raises(ConfigError) as info:
        parse_config(doc, env={}, registry=registry or double_registry())
    return list(info.value.problems)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("otlp", ComponentId("otlp")),
        ("file/os", ComponentId("file", "os")),
        ("a_1/x-y", ComponentId("a_1", "x-y")),
    ],
)
def test_component_id_parse(text: str, want: ComponentId) -> None:
    """Ids are ``type`` or ``type/name`` and print back as written."""
    assert ComponentId.parse(text) == want
    assert str(want) == text


@pytest.mark.parametrize("text", ["", "1abc", "file/", "file/a/b", "fi le", "file/a b", "-x"])
def test_component_id_rejects(text: str) -> None:
    """Malformed ids raise ValueError saying what is wrong."""
    with pytest.raises(ValueError, match="invalid id"):
        ComponentId.parse(text)


def test_bad_ids_in_sections_and_pipelines() -> None:
    """Malformed ids are problems at their key path."""
    doc = minimal()
    doc["receivers"]["list/"] = None
    doc["service"]["pipelines"]["traces/a b"] = {"receivers": ["list"], "exporters": ["recording"]}
    got = problems_of(doc)
    assert got[0].startswith("receivers.list/: invalid id 'list/'")
    assert got[1].startswith("service.pipelines.traces/a b: invalid id")


def test_minimal_config_shape() -> None:
    """A minimal config yields typed component configs, one pipeline and no warnings."""
    config = parse_config(minimal(), env={}, registry=double_registry())
    assert set(config.receivers) == {"list"}
    assert config.receivers["list"].id == ComponentId("list")
    assert config.receivers["list"].kind == "receiver"
    assert config.pipelines["traces"].type == "traces"
    assert config.pipelines["traces"].processors == ()
    assert config.warnings == ()
    assert config.log_level is None
    assert config.origin == "<dict>"
    assert config.summary() == ["traces: receivers: list; exporters: recording"]


def test_unused_components_are_warnings() -> None:
    """Configured but unused components load and are listed as warnings."""
    doc = minimal()
    doc["receivers"]["list/spare"] = None
    config = parse_config(doc, env={}, registry=double_registry())
    assert config.warnings == ("receivers.list/spare: configured but not used in any pipeline",)


@pytest.mark.parametrize(
    ("doc", "want"),
    [
        (None, ["<dict>: the configuration is empty"]),
        ([1], ["<dict>: expected a mapping at the top level"]),
    ],
)
def test_top_level_shape(doc: Any, want: list[str]) -> None:
    """An empty or non-mapping document is one clear problem."""
    assert problems_of(doc) == want


def test_sections_must_be_mappings() -> None:
    """Sections and pipeline bodies of the wrong shape are reported at their path."""
    got = problems_of(
        {
            "receivers": ["list"],
            "exporters": {"recording": None},
            "extensions": [],
            "service": {
                "pipelines": {"traces": ["list"], "logs": {"receivers": "list", "exporters": [1]}},
                "extensions": "x",
                "telemetry": {"logs": "loud"},
            },
        }
    )
    assert got == [
        "receivers: expected a mapping of component id to config",
        "extensions: expected a mapping",
        "service.extensions: expected a list of extension ids",
        "service.telemetry.logs: expected a mapping",
        "service.pipelines.traces: expected a mapping with receivers, processors, exporters",
        "service.pipelines.logs.receivers: expected a list of component ids",
        "service.pipelines.logs.exporters[0]: expected a component id, got 1",
    ]


def test_service_missing_or_wrong() -> None:
    """A missing service section or an empty pipelines map is reported."""
    assert problems_of({"receivers": {"list": None}}) == [
        "service: required (service.pipelines names what runs)"
    ]
    assert problems_of({"service": "x"}) == ["service: expected a mapping"]
    assert problems_of({"service": {"pipelines": {}}}) == [
        "service.pipelines: expected a non-empty mapping of pipelines"
    ]


def test_log_level_and_empty_extensions() -> None:
    """service.telemetry.logs.level is kept lower-case; empty extensions are accepted."""
    doc = minimal(extensions={})
    doc["service"]["telemetry"] = {"logs": {"level": "DEBUG"}}
    doc["service"]["extensions"] = []
    config = parse_config(doc, env={}, registry=double_registry())
    assert config.log_level == "debug"
    assert config.extensions == {}


def test_env_defaults_to_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without env=, os.environ is used for substitution."""
    monkeypatch.setenv("OTEL_BRIDGE_TEST_FAIL", "from-env")
    doc = minimal()
    doc["receivers"]["list"] = {"fail_start": "${env:OTEL_BRIDGE_TEST_FAIL}"}
    config = parse_config(doc, registry=double_registry())
    assert config.receivers["list"].config.fail_start == "from-env"


def test_load_config_reads_files(tmp_path: Path) -> None:
    """load_config reads YAML from disk and records the path as origin."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "receivers: {list: }\nexporters: {recording: }\n"
        "service: {pipelines: {logs: {receivers: [list], exporters: [recording]}}}\n"
    )
    config = load_config(path, env={}, registry=double_registry())
    assert config.origin == str(path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", registry=double_registry())
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="the configuration is empty"):
        load_config(empty, registry=double_registry())


@dataclass(slots=True)
class Checked:
    """A config whose validate() returns whatever the test puts in ``found``."""

    found: list[str] | None = None

    def validate(self) -> list[str]:
        """The stored problems."""
        if self.found is None:
            raise RuntimeError("validator crashed")
        return self.found


@pytest.mark.parametrize(
    ("found", "want"),
    [
        (["a.b: bad"], ["processors.checked.a.b: bad"]),
        (["items[2]: bad"], ["processors.checked.items[2]: bad"]),
        (["must set something"], ["processors.checked: must set something"]),
        (["two words: bad"], ["processors.checked: two words: bad"]),
        ([], []),
    ],
)
def test_validate_problem_prefixes(found: list[str], want: list[str]) -> None:
    """Relative key paths from validate() get the component path; free text gets ``path: ``."""
    assert checked_problems(found) == want


def test_validate_crash_is_a_problem() -> None:
    """A validate() that raises is reported, not propagated."""
    assert checked_problems(None) == ["processors.checked: validation failed: validator crashed"]


def checked_problems(found: list[str] | None) -> list[str]:
    """What parse_config reports for a processor whose config's validate() returns ``found``."""

    def default() -> Checked:
        return Checked(found=found)

    def create(settings: CreateSettings, cfg: Checked, nxt: Consumer | None) -> Component:
        raise AssertionError("not called")

    reg = double_registry(
        Factory(type_name="checked", kind=PROCESSOR, default_config=default, create=create)
    )
    doc = minimal(processors={"checked": None})
    doc["service"]["pipelines"]["traces"]["processors"] = ["checked"]
    try:
        parse_config(doc, env={}, registry=reg)
    except ConfigError as exc:
        return list(exc.problems)
    return []


def test_validate_skipped_after_type_errors() -> None:
    """validate() does not run when the overlay already found problems (no cascades)."""
    calls: list[int] = []

    @dataclass(slots=True)
    class Counted:
        size: int = 1

        def validate(self) -> list[str]:
            calls.append(1)
            return ["size: never shown"]

    def create(settings: CreateSettings, cfg: Counted, nxt: Consumer | None) -> Component:
        raise AssertionError("not called")

    reg = double_registry(
        Factory(type_name="counted", kind=PROCESSOR, default_config=Counted, create=create)
    )
    doc = minimal(processors={"counted": {"size": "x"}})
    doc["service"]["pipelines"]["traces"]["processors"] = ["counted"]
    assert problems_of(doc, reg) == ["processors.counted.size: expected an integer, got string 'x'"]
    assert calls == []


def test_broken_default_config_is_reported() -> None:
    """A factory whose default_config raises is a problem naming the component."""

    def broken() -> Any:
        raise RuntimeError("no defaults")

    def create(settings: CreateSettings, cfg: Any, nxt: Consumer | None) -> Component:
        raise AssertionError("not called")

    reg = double_registry(
        Factory(type_name="broken", kind=PROCESSOR, default_config=broken, create=create)
    )
    got = problems_of(minimal(processors={"broken": None}), reg)
    assert got == ["processors.broken: default config of processor 'broken' failed: no defaults"]


def test_problems_from_every_section_at_once() -> None:
    """Problems in receivers, processors, exporters and service all come in one error."""
    got = problems_of(
        {
            "receivers": {"list": {"x": 1}},
            "processors": {"nope": None},
            "exporters": {"recording": {"fail_start": 3}},
            "service": {"pipelines": {"traces": {"receivers": ["list"], "exporters": ["gone"]}}},
        }
    )
    assert [p.split(":")[0] for p in got] == [
        "receivers.list.x",
        "processors.nope",
        "exporters.recording.fail_start",
        "service.pipelines.traces.exporters[0]",
    ]
