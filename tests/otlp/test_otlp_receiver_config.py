"""The otlp receiver's configuration through the real loader, its lifecycle and start-up errors."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from otel_bridge.component import CreateSettings, Host
from otel_bridge.config import parse_config
from otel_bridge.errors import ConfigError, StartupError
from otel_bridge.exporters.otlp import factories as exporter_factories
from otel_bridge.model import Batch
from otel_bridge.pipeline import Collector
from otel_bridge.receivers.otlp import OtlpReceiver, factory
from otel_bridge.receivers.otlp.config import (
    GrpcConfig,
    HttpConfig,
    OtlpReceiverConfig,
    Protocols,
    split_endpoint,
)
from otel_bridge.testing import RecordingConsumer, double_registry

REGISTRY = double_registry(factory, *exporter_factories)


def parse(receiver: Any, exporters: dict[str, Any] | None = None) -> Any:
    """Parse a config with an otlp receiver feeding the recording exporter."""
    return parse_config(
        {
            "receivers": {"otlp": receiver},
            "exporters": {"recording": None, **(exporters or {})},
            "service": {
                "pipelines": {
                    "traces": {
                        "receivers": ["otlp"],
                        "exporters": ["recording", *(exporters or {})],
                    }
                }
            },
        },
        registry=REGISTRY,
        env={},
    )


def receiver_config(config: Any) -> OtlpReceiverConfig:
    """The typed receiver config of a parsed configuration."""
    typed = config.receivers["otlp"].config
    assert isinstance(typed, OtlpReceiverConfig)
    return typed


def test_no_protocols_section_means_both_on_with_defaults() -> None:
    """`otlp:` with no settings serves gRPC on 127.0.0.1:4317 and HTTP on 127.0.0.1:4318."""
    protocols = receiver_config(parse(None)).effective_protocols()
    assert protocols.grpc == GrpcConfig(endpoint="127.0.0.1:4317", max_recv_msg_size_mib=4)
    assert protocols.http is not None
    assert protocols.http.endpoint == "127.0.0.1:4318"


def test_empty_section_turns_a_protocol_on_and_omitted_one_off() -> None:
    """Collector semantics: `grpc:` with no value is on with defaults; leaving http out is off."""
    protocols = receiver_config(parse({"protocols": {"grpc": None}})).effective_protocols()
    assert protocols.grpc == GrpcConfig()
    assert protocols.http is None


def test_settings_overlay_the_defaults() -> None:
    """Given keys override defaults; others keep them."""
    config = parse(
        {"protocols": {"http": {"endpoint": "127.0.0.1:0", "max_request_body_size": 1024}}}
    )
    protocols = receiver_config(config).effective_protocols()
    assert protocols.http == HttpConfig(endpoint="127.0.0.1:0", max_request_body_size=1024)
    assert protocols.grpc is None


def test_bad_values_are_reported_with_full_key_paths() -> None:
    """Bad endpoints, sizes and typos name their full key path."""
    with pytest.raises(ConfigError) as info:
        parse(
            {
                "protocols": {
                    "grpc": {"endpoint": "nohost", "max_recv_msg_size_mib": 0},
                    "http": {"endpoint": "127.0.0.1:70000"},
                }
            }
        )
    text = str(info.value)
    assert "receivers.otlp.protocols.grpc.endpoint: 'nohost' is not host:port" in text
    assert "receivers.otlp.protocols.grpc.max_recv_msg_size_mib: must be positive" in text
    assert "receivers.otlp.protocols.http.endpoint: '127.0.0.1:70000': port must be" in text
    with pytest.raises(ConfigError, match=r"protocols\.http\.max_request_body_sise: unknown key"):
        parse({"protocols": {"http": {"max_request_body_sise": 5}}})


def test_empty_protocols_is_an_error() -> None:
    """`protocols: {}` enables nothing, which is reported."""
    with pytest.raises(ConfigError, match="must enable at least one of grpc, http"):
        parse({"protocols": {}})


def test_exporter_configs_parse_with_durations() -> None:
    """Exporter durations accept Go-style strings; compression and encoding are checked."""
    config = parse(
        None,
        {
            "otlp_http": {
                "endpoint": "http://127.0.0.1:4318",
                "timeout": "2s",
                "encoding": "json",
                "retry_on_failure": {"initial_interval": "200ms", "max_elapsed_time": "1m"},
            }
        },
    )
    typed = config.exporters["otlp_http"].config
    assert typed.timeout == 2.0
    assert typed.retry_on_failure.initial_interval == pytest.approx(0.2)
    assert typed.retry_on_failure.max_elapsed_time == 60.0
    with pytest.raises(ConfigError, match=r"exporters\.otlp_grpc\.compression"):
        parse(None, {"otlp_grpc": {"compression": "zstd"}})


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [("127.0.0.1:4317", ("127.0.0.1", 4317)), ("[::1]:0", ("::1", 0)), ("host:1", ("host", 1))],
)
def test_split_endpoint(endpoint: str, expected: tuple[str, int]) -> None:
    """host:port and [v6]:port split into host and port."""
    assert split_endpoint(endpoint) == expected


def test_port_in_use_is_a_startup_error() -> None:
    """A port already bound fails start-up with StartupError naming the endpoint."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        for protocols in (
            Protocols(http=HttpConfig(endpoint=f"127.0.0.1:{port}")),
            Protocols(grpc=GrpcConfig(endpoint=f"127.0.0.1:{port}")),
        ):
            receiver = factory.create(
                CreateSettings(id="otlp"),
                OtlpReceiverConfig(protocols=protocols),
                RecordingConsumer(),
            )
            with pytest.raises(StartupError, match=f"127.0.0.1:{port}"):
                receiver.start(Host())
            receiver.shutdown()


def test_lifecycle_shutdown_before_start_and_twice() -> None:
    """Shutdown is safe before start and twice; ports are None until started and when off."""
    receiver = factory.create(
        CreateSettings(id="otlp"), factory.default_config(), RecordingConsumer()
    )
    assert isinstance(receiver, OtlpReceiver)
    assert receiver.grpc_port is None
    assert receiver.http_port is None
    receiver.shutdown()
    receiver.shutdown()
    assert factory.default_config().validate() == []


def test_ports_exposed_in_a_real_collector() -> None:
    """Through the Collector, the started receiver exposes its bound ports and delivers data."""
    import urllib.request

    config = parse(
        {"protocols": {"grpc": {"endpoint": "127.0.0.1:0"}, "http": {"endpoint": "127.0.0.1:0"}}}
    )
    collector = Collector(config)
    collector.start()
    try:
        receiver = collector.component("otlp")
        assert isinstance(receiver, OtlpReceiver)
        assert receiver.grpc_port
        assert receiver.http_port
        request = urllib.request.Request(
            f"http://127.0.0.1:{receiver.http_port}/v1/traces",
            data=b'{"resourceSpans": []}',
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            assert response.status == 200
        sink = collector.component("recording")
        assert isinstance(sink, RecordingConsumer)
        assert sink.batches == [] or all(isinstance(b, Batch) for b in sink.batches)
    finally:
        collector.shutdown()
