"""``follow_exporters``: which environments send their telemetry to this collector."""

from __future__ import annotations

import pytest

from otel_bridge.identity import reaches_listener
from otel_bridge.receivers.host.config import HostConfig
from otel_bridge.receivers.host.selectors import Selectors, exports_here, service_of

HERE = [("127.0.0.1", 4317), ("127.0.0.1", 4318)]


def env(**variables: str) -> bytes:
    return b"\0".join(f"{k}={v}".encode() for k, v in {"PATH": "/bin", **variables}.items())


@pytest.mark.parametrize(
    ("variables", "listening", "found"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}, HERE, "ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "127.0.0.1:4317"}, HERE, "ENDPOINT"),  # gRPC, no scheme
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://[::1]:4318/v1/traces"},
            [("0.0.0.0", 4318)],
            "TRACES_ENDPOINT",
        ),
        ({"OTEL_SERVICE_NAME": "agent"}, HERE, "default"),  # the SDKs' default endpoint
        ({"OTEL_SERVICE_NAME": "agent"}, [("127.0.0.1", 5555)], ""),  # not listening there
        ({"OTEL_SERVICE_NAME": "a", "OTEL_TRACES_EXPORTER": "console"}, HERE, ""),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:5555"}, HERE, ""),  # elsewhere
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector.example:4318"}, HERE, ""),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318", "OTEL_SDK_DISABLED": "true"},
            HERE,
            "",
        ),
        ({"OTEL_BRIDGE_LOG_LEVEL": "info"}, HERE, ""),  # this collector's own settings
        ({}, HERE, ""),
    ],
)
def test_an_environment_sends_here_only_when_it_names_a_port_of_ours(
    variables: dict[str, str], listening: list[tuple[str, int]], found: str
) -> None:
    said = exports_here(env(**variables), listening)
    assert (found in said) if found else said == "", said


def test_only_a_standing_collector_follows_by_environment() -> None:
    """Under ``observe`` (a root pid) the workload's lineage is the subject, not the machine's
    other agents; ``follow_exporters: false`` turns it off."""
    assert Selectors.of(HostConfig(), standing=True).exporters
    assert not Selectors.of(HostConfig(), standing=False).exporters
    assert not Selectors.of(HostConfig(follow_exporters=False), standing=True)


def test_the_service_an_environment_names() -> None:
    assert service_of(env(OTEL_SERVICE_NAME="agent")) == "agent"
    attributes = "deployment.environment=dev,service.name=my%20agent"
    assert service_of(env(OTEL_RESOURCE_ATTRIBUTES=attributes)) == "my agent"
    both = env(OTEL_RESOURCE_ATTRIBUTES="service.name=b", OTEL_SERVICE_NAME="a")
    assert service_of(both) == "a"  # the specification: OTEL_SERVICE_NAME wins
    assert service_of(env()) == ""


@pytest.mark.parametrize(
    ("host", "port", "listeners", "reached"),
    [
        ("127.0.0.1", 4318, [("0.0.0.0", 4318)], True),  # a wildcard bind, from loopback
        ("localhost", 4318, [("::", 4318)], True),
        ("127.0.0.1", 4317, [("0.0.0.0", 4318)], False),  # another port
        ("10.1.2.3", 4318, [("0.0.0.0", 4318)], False),  # an address not known to be ours
        ("::ffff:127.0.0.1", 4318, [("127.0.0.1", 4318)], True),  # IPv4-mapped
        ("localhost", 4318, [("127.0.0.1", 4318)], True),
        ("127.0.0.2", 4318, [("127.0.0.1", 4318)], False),  # a loopback bind takes its own
        ("::1", 4318, [("localhost", 4318)], True),
        ("10.1.2.3", 4318, [("10.1.2.3", 4318)], True),
        ("localhost", 4318, [("10.1.2.3", 4318)], False),
    ],
)
def test_which_client_address_reaches_a_bound_listener(
    host: str, port: int, listeners: list[tuple[str, int]], reached: bool
) -> None:
    """One rule for observe's report, compare and ``follow_exporters``."""
    assert reaches_listener(host, port, listeners) is reached
