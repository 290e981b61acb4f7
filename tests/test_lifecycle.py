"""One lifecycle test over every factory in ``default_registry()``.

For each component: the default config validates (through the real loader), the component
survives create/shutdown, create/start/shutdown and a second shutdown, and it counts only the
counters its factory declares. Network receivers whose
defaults bind fixed ports get port 0 (OVERRIDES) so tests never collide with a running collector.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

import otel_bridge
from otel_bridge.component import (
    COLLECTOR_COUNTERS,
    EXPORTER,
    PIPELINE_COUNTERS,
    RECEIVER,
    Consumer,
    CreateSettings,
    Factory,
    Host,
    Telemetry,
    UndeclaredCounterError,
    declared_counters,
)
from otel_bridge.config import overlay
from otel_bridge.errors import RefusedError
from otel_bridge.model import Batch
from otel_bridge.registry import default_registry
from otel_bridge.testing import ProcessRecord, RecordingConsumer, make_log, make_span

REGISTRY = default_registry()
FACTORIES = REGISTRY.all()

OVERRIDES: dict[str, dict[str, Any]] = {
    "otlp": {
        "protocols": {"grpc": {"endpoint": "127.0.0.1:0"}, "http": {"endpoint": "127.0.0.1:0"}}
    },
    # The host receiver observes a process lineage that `observe` names; here: this test.
    "host": {"root_pid": os.getpid()},
}
"""Per receiver type: YAML overlaid on the default config for the start test (receivers only:
the ``otlp`` exporter shares the receiver's type name)."""


def ids(factory: Factory[Any]) -> str:
    """A readable test id: ``kind/type``."""
    return f"{factory.kind}/{factory.type_name}"


def create(factory: Factory[Any], config: Any) -> tuple[Any, RecordingConsumer]:
    """Create the component with a recording next consumer where it needs one."""
    sink = RecordingConsumer()
    nxt = None if factory.kind == EXPORTER else sink
    component = factory.create(
        CreateSettings(id=factory.type_name, pipeline="evidence", telemetry=Telemetry()),
        config,
        nxt,
    )
    return component, sink


def test_registry_lists_every_kind() -> None:
    """The default registry has receivers, processors and exporters, each with signals."""
    kinds = {f.kind for f in FACTORIES}
    assert kinds == {"receiver", "processor", "exporter"}
    for factory in FACTORIES:
        assert factory.signals <= {"traces", "logs", "evidence"}
        assert factory.signals


@pytest.mark.parametrize("factory", FACTORIES, ids=ids)
def test_default_config_validates(factory: Factory[Any]) -> None:
    """The default config is a dataclass and its validate() finds no problem."""
    config = factory.default_config()
    assert dataclasses.is_dataclass(config)
    validate = getattr(config, "validate", None)
    assert validate is None or validate() == []
    assert factory.default_config() is not config


@pytest.mark.parametrize("factory", FACTORIES, ids=ids)
def test_create_then_shutdown(
    factory: Factory[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A created, never started component shuts down cleanly, twice."""
    monkeypatch.chdir(tmp_path)
    component, _ = create(factory, factory.default_config())
    component.shutdown()
    component.shutdown()


@pytest.mark.parametrize("factory", FACTORIES, ids=ids)
def test_create_start_shutdown(
    factory: Factory[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A component starts and shuts down cleanly, and a second shutdown is harmless."""
    monkeypatch.chdir(tmp_path)
    problems: list[str] = []
    config = overlay(
        factory.default_config(),
        OVERRIDES.get(factory.type_name) if factory.kind == RECEIVER else None,
        factory.type_name,
        problems,
    )
    assert problems == []
    component, _ = create(factory, config)
    component.start(Host())
    component.shutdown()
    component.shutdown()


def sample_batch() -> Batch:
    """A batch with a span, a log record and a process's observations, for every consumer."""
    started = 1_700_000_000_000_000_000
    process = ProcessRecord(pid=4242, exe="/bin/ls", argv=("ls",), time=started, host="h")
    return Batch(
        spans=(make_span(1),),
        logs=(make_log(1),),
        observations=tuple(process.observations()),
    )


@pytest.mark.parametrize("factory", FACTORIES, ids=ids)
def test_declared_counters_are_well_formed(factory: Factory[Any]) -> None:
    """Each counter has a unique name, a description and a unit, and none shadows a standard
    counter the collector counts for the kind."""
    names = [spec.name for spec in declared_counters(factory)]
    assert len(names) == len(set(names))
    for spec in factory.counters:
        assert spec.description
        assert spec.unit
        assert spec.name
        assert not spec.name.startswith(".")
        assert " " not in spec.name


@pytest.mark.parametrize("factory", FACTORIES, ids=ids)
def test_counts_only_declared_counters(
    factory: Factory[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started, fed a batch and shut down, a component counts only what its factory declares,
    under ``<kind>.<id>.<name>``."""
    monkeypatch.chdir(tmp_path)
    problems: list[str] = []
    config = overlay(
        factory.default_config(), OVERRIDES.get(factory.type_name), factory.type_name, problems
    )
    telemetry = Telemetry()
    sink = RecordingConsumer()
    component = factory.create(
        CreateSettings(id=f"{factory.type_name}/x", telemetry=telemetry),
        config,
        None if factory.kind == EXPORTER else sink,
    )
    component.start(Host(telemetry=telemetry))
    if isinstance(component, Consumer):
        # an exporter whose backend is down (postgres: no database here) refuses for now
        with contextlib.suppress(RefusedError):
            component.consume(sample_batch())
    component.shutdown()
    assert telemetry.undeclared() == {}
    declared = telemetry.declared()
    for full in telemetry.counters():
        assert full.startswith(f"{factory.kind}.{factory.type_name}/x.")
        name = full.removeprefix(f"{factory.kind}.{factory.type_name}/x.")
        assert any(name == d or name.startswith(f"{d}.") for d in _names(declared)), full


def _names(declared: dict[str, Any]) -> list[str]:
    return [full.split(".", 2)[2] for full in declared]


def test_undeclared_counter_is_caught() -> None:
    """Counting a name the factory does not declare raises in strict mode (tests) and is
    recorded, never silently added, otherwise."""
    factory = FACTORIES[0]
    strict = Telemetry(strict=True).for_factory(factory, factory.type_name)
    with pytest.raises(UndeclaredCounterError, match="not declared"):
        strict.count("no_such_counter")
    lenient = Telemetry().for_factory(factory, factory.type_name)
    lenient.count("no_such_counter", 2)
    assert lenient.undeclared() == {f"{factory.kind}.{factory.type_name}.no_such_counter": 2}
    assert lenient.counters() == {}


def _literal_counter_names() -> list[tuple[str, str]]:
    """``(file, name)`` for every ``<...telemetry...>.count("literal", ...)`` in the package."""
    root = Path(otel_bridge.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "count"
                and "telemetry" in ast.unparse(node.func.value)
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.append((str(path.relative_to(root)), node.args[0].value))
    return found


def test_every_literal_counter_name_is_declared() -> None:
    """Statically: each counter name counted with a literal is declared by some factory or is a
    standard counter of the collector."""
    declared = {spec.name for f in FACTORIES for spec in declared_counters(f)}
    declared |= {spec.name for spec in (*PIPELINE_COUNTERS, *COLLECTOR_COUNTERS)}
    literal = _literal_counter_names()
    assert len(literal) >= 10
    assert [(f, n) for f, n in literal if n not in declared] == []
