"""``configs/phoenix.yaml`` and ``configs/jaeger.yaml``: valid, and with non-colliding defaults."""

from __future__ import annotations

import importlib.resources

import pytest
from e2e_support import REPO

from otel_bridge.config import CollectorConfig, load_config
from otel_bridge.errors import ConfigError

CONFIGS = REPO / "configs"


def load(name: str, env: dict[str, str] | None = None) -> CollectorConfig:
    """Load a shipped config with exactly ``env`` as the environment."""
    return load_config(CONFIGS / name, env=env or {})


def endpoints(config: CollectorConfig) -> tuple[str, str, str]:
    """(receiver gRPC endpoint, receiver HTTP endpoint, exporter endpoint)."""
    protocols = config.receivers["otlp"].config.effective_protocols()
    (exporter,) = config.exporters.values()
    return protocols.grpc.endpoint, protocols.http.endpoint, exporter.config.endpoint


@pytest.mark.parametrize("name", ["phoenix.yaml", "jaeger.yaml"])
def test_config_is_one_evidence_pipeline(name: str) -> None:
    """Each config joins OTLP and the host plane and enriches before its one OTLP exporter."""
    config = load(name)
    assert config.warnings == ()
    (pipeline,) = config.pipelines.values()
    assert pipeline.type == "evidence"
    assert pipeline.receivers == ("otlp", "host")
    assert pipeline.processors == ("normalize", "correlate", "grade", "enrich")
    assert len(pipeline.exporters) == 1


def test_phoenix_defaults_to_local_phoenix_over_http() -> None:
    """Phoenix gets protobuf over HTTP at PHOENIX_COLLECTOR_ENDPOINT, default port 6006."""
    config = load("phoenix.yaml")
    (exporter_id,) = config.exporters
    assert exporter_id.startswith("otlphttp/")
    exporter = config.exporters[exporter_id].config
    assert exporter.endpoint == "http://127.0.0.1:6006"
    assert exporter.encoding == "proto"
    assert exporter.url("traces") == "http://127.0.0.1:6006/v1/traces"
    moved = load("phoenix.yaml", {"PHOENIX_COLLECTOR_ENDPOINT": "http://127.0.0.1:7006"})
    assert endpoints(moved)[2] == "http://127.0.0.1:7006"


def test_jaeger_default_does_not_collide_with_our_receiver() -> None:
    """Jaeger's default endpoint is not our receiver's port; both move by environment."""
    config = load("jaeger.yaml")
    (exporter_id,) = config.exporters
    assert exporter_id.startswith("otlp/")
    grpc, http, jaeger = endpoints(config)
    assert (grpc, http, jaeger) == ("127.0.0.1:4317", "127.0.0.1:4318", "127.0.0.1:14317")
    assert jaeger.rsplit(":", 1)[1] not in {grpc.rsplit(":", 1)[1], http.rsplit(":", 1)[1]}
    moved = load(
        "jaeger.yaml",
        {
            "JAEGER_ENDPOINT": "10.1.2.3:4317",
            "OTEL_BRIDGE_OTLP_GRPC_ENDPOINT": "127.0.0.1:0",
            "OTEL_BRIDGE_OTLP_HTTP_ENDPOINT": "127.0.0.1:0",
        },
    )
    assert endpoints(moved) == ("127.0.0.1:0", "127.0.0.1:0", "10.1.2.3:4317")


def test_bad_endpoint_from_environment_is_reported_with_its_key_path() -> None:
    """A malformed endpoint from the environment fails validation naming the exporter key."""
    with pytest.raises(ConfigError) as info:
        load("jaeger.yaml", {"JAEGER_ENDPOINT": "no-port"})
    assert any(p.startswith("exporters.otlp/jaeger.endpoint") for p in info.value.problems)


def test_configs_ship_with_the_package() -> None:
    """Both configs are package data of ``otel_bridge.configs``."""
    shipped = importlib.resources.files("otel_bridge.configs")
    for name in ("phoenix.yaml", "jaeger.yaml"):
        assert (shipped / name).read_text(encoding="utf-8") == (CONFIGS / name).read_text(
            encoding="utf-8"
        )
