"""The standing fuzz suite, run briefly (``benchmarks/fuzz.py`` runs it longer).

Each property is stated in ``fuzz_targets``; here each runs for a few dozen generated inputs
(fixed derandomized seeds would hide new failures, so the examples vary from run to run and
hypothesis keeps any failure in its database to replay first).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_targets import (
    TARGETS,
    Servers,
    check_http,
    grpc_caller,
    os_attributes,
    otlp_json_body,
    otlp_proto_body,
    post,
    running_receiver,
)
from hypothesis import HealthCheck, given, settings

from otel_bridge import strings

_BRIEF = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_in_process_target(name: str) -> None:
    """Each in-process target's property holds for a brief run of generated inputs."""
    strategy, check = TARGETS[name]

    @_BRIEF
    @given(strategy)
    def run(value: Any) -> None:
        check(value)

    run()


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    """One real OTLP receiver (HTTP and gRPC) for the module."""
    with running_receiver() as running:
        yield running


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(json_body=otlp_json_body, proto_body=otlp_proto_body())
def test_http_receiver_never_answers_5xx(
    servers: Servers, json_body: bytes, proto_body: bytes
) -> None:
    """Fuzzed OTLP/JSON and OTLP/protobuf bodies over real HTTP: never a 5xx, and every span the
    receiver accepted can be written."""
    check_http(servers, json_body, "application/json")
    check_http(servers, proto_body, "application/x-protobuf")


def test_grpc_receiver_never_answers_a_server_fault(servers: Servers) -> None:
    """Fuzzed protobuf over a real gRPC channel: never INTERNAL/UNKNOWN, and the server still
    accepts a valid request afterwards."""
    channel, call = grpc_caller(servers)

    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(otlp_proto_body())
    def run(body: bytes) -> None:
        call(body)

    try:
        run()
    finally:
        channel.close()
    assert post(servers, b'{"resourceSpans": []}', "application/json") == 200


def test_os_strings_strategy_reaches_invalid_text() -> None:
    """The OS-string strategy does produce undecodable bytes (the suite tests the rule)."""
    found: list[bool] = []

    @settings(max_examples=60, deadline=None)
    @given(os_attributes)
    def run(attrs: dict[str, Any]) -> None:
        found.append(any(not strings.is_valid(k) for k in attrs))

    run()
    assert any(found)
