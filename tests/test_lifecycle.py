"""One lifecycle test over every factory in ``default_registry()``.

For each component: the default config validates (through the real loader), and the component
survives create/shutdown, create/start/shutdown and a second shutdown. Network receivers whose
defaults bind fixed ports get port 0 (OVERRIDES) so tests never collide with a running collector.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from otel_bridge.component import EXPORTER, RECEIVER, CreateSettings, Factory, Host, Telemetry
from otel_bridge.config import overlay
from otel_bridge.registry import default_registry
from otel_bridge.testing import RecordingConsumer

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
