"""The registry imports a component module only when a configuration names one of its types."""

from __future__ import annotations

import json
import subprocess
import sys

from otel_bridge.component import EXPORTER, PROCESSOR, RECEIVER
from otel_bridge.config import parse_config
from otel_bridge.errors import ConfigError
from otel_bridge.registry import BUILTIN_MODULES, BUILTIN_TYPES, build_registry, default_registry


def test_builtin_types_are_what_the_modules_register() -> None:
    """The static table the lazy registry trusts equals what importing every module yields."""
    eager = build_registry(BUILTIN_MODULES)
    assert eager.origins == BUILTIN_TYPES
    assert not eager.problems


def test_a_config_imports_only_the_modules_of_the_types_it_names() -> None:
    """In a fresh interpreter: a config with a host receiver and a file exporter imports those
    two modules, and neither the OTLP exporter (gRPC) nor the processors."""
    code = """
import json, sys
from otel_bridge.config import parse_config
from otel_bridge.errors import ConfigError
doc = {
    "receivers": {"host": {"root_pid": 1}},
    "exporters": {"file": {"path": "/dev/null"}},
    "service": {"pipelines": {"logs": {"receivers": ["host"], "exporters": ["file"]}}},
}
parse_config(doc, env={})
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("otel_bridge.", "grpc")))))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = set(json.loads(out.stdout))
    assert {"otel_bridge.receivers.host", "otel_bridge.exporters.file"} <= loaded
    for module in BUILTIN_MODULES:
        if module not in ("otel_bridge.receivers.host", "otel_bridge.exporters.file"):
            assert module not in loaded, module
    assert "grpc" not in loaded


def test_unknown_type_still_lists_every_valid_type_without_importing_them() -> None:
    """The refusal names every type of the kind, the not yet imported ones included."""
    registry = default_registry()
    doc = {
        "receivers": {"otlp": None},
        "exporters": {"grpah": None},
        "service": {"pipelines": {"logs": {"receivers": ["otlp"], "exporters": ["grpah"]}}},
    }
    try:
        parse_config(doc, env={}, registry=registry)
    except ConfigError as exc:
        message = str(exc)
    else:
        raise AssertionError("an unknown exporter type was accepted")
    assert "unknown exporter type 'grpah' (did you mean 'graph'?)" in message
    names = [n for (k, n) in BUILTIN_TYPES if k == EXPORTER]
    assert f"(valid types: {', '.join(sorted(names))})" in message
    assert registry.names(EXPORTER) == sorted(names)
    assert ("exporter", "graph") in registry.pending  # listed, not imported


def test_full_tables_load_every_module() -> None:
    """Reading a whole table (``components``, tests) imports everything, as before."""
    registry = default_registry()
    assert registry.get(RECEIVER, "otlp") is not None
    assert set(registry.processors) == {n for (k, n) in BUILTIN_TYPES if k == PROCESSOR}
    assert not registry.pending
    assert registry.origins == BUILTIN_TYPES
