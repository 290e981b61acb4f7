"""A refused request leaves no reference cycle behind: its body is freed when it is answered.

A request body held by a reference cycle (an exception whose traceback holds the frame that
holds the body, and that frame the exception) would stay in memory until the next collection
of the cyclic garbage collector, and under a memory limiter refusing many clients keep usage
over its limit. Here a real collector (OTLP receiver over HTTP and gRPC, in this
process) refuses requests from real clients with the cyclic garbage collector off and its
unreachable objects kept (``gc.DEBUG_SAVEALL``): a collection then finds no frame, traceback or
exception, and nothing it finds holds a body.
"""

from __future__ import annotations

import gc
import http.client
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest

from otel_bridge.component import RECEIVER
from otel_bridge.config import parse_config
from otel_bridge.otlp.proto_codec import encode_traces
from otel_bridge.pipeline import Collector
from otel_bridge.registry import default_registry
from otel_bridge.testing import failing_processor_factory, make_span

TRACES_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
REQUESTS = 4
"""Refused requests per protocol."""


def _collector(processor: str, settings: dict[str, Any]) -> Collector:
    """OTLP over HTTP and gRPC (ports chosen by the system) -> ``processor`` -> ``debug``."""
    registry = default_registry()
    registry.add(failing_processor_factory())
    doc = {
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": "127.0.0.1:0"},
                    "http": {"endpoint": "127.0.0.1:0"},
                },
            }
        },
        "processors": {processor: settings},
        "exporters": {"debug": {"verbosity": "basic"}},
        "service": {
            "pipelines": {
                "traces": {"receivers": ["otlp"], "processors": [processor], "exporters": ["debug"]}
            }
        },
    }
    return Collector(parse_config(doc, env={}, registry=registry))


@contextmanager
def _running(collector: Collector) -> Iterator[tuple[int, int]]:
    collector.start()
    try:
        receiver: Any = collector.component("otlp")
        yield receiver.http_port, receiver.grpc_port
    finally:
        collector.shutdown()


def _body() -> bytes:
    """200 spans with a 1,000-byte attribute each (about 220 kB)."""
    spans = [make_span(i, attributes={"pad": "x" * 1000}) for i in range(200)]
    return bytes(encode_traces(spans).SerializeToString())


def _post(port: int, body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _export(port: int, body: bytes) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        export = channel.unary_unary(TRACES_EXPORT, None, None)
        try:
            export(body, timeout=30)
        except grpc.RpcError as exc:
            return str(exc.code().name)
        return "OK"


def _garbage_after(send: Callable[[], None]) -> list[object]:
    """The unreachable objects left by ``send()``, found with automatic collections off."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        send()
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def _holds_a_body(obj: object, size: int) -> bool:
    return any(
        isinstance(r, (bytes, bytearray, memoryview)) and len(r) >= size
        for r in gc.get_referents(obj)
    )


@pytest.mark.parametrize(
    ("processor", "settings", "counter"),
    [
        # the limiter over its soft limit from the start: admission refuses each request
        # before it is decoded (HTTP drains the body unread, gRPC has received it whole)
        ("memory_limiter", {"limit_mib": 2, "spike_limit_mib": 1}, "requests_refused"),
        # a processor refusing each batch: the request was read and decoded, then refused
        ("failing", {"error": "refused"}, "spans_refused"),
    ],
    ids=["admission", "pipeline"],
)
def test_a_refused_request_leaves_no_reference_cycle_holding_its_body(
    processor: str, settings: dict[str, Any], counter: str
) -> None:
    body = _body()
    answers: list[object] = []
    collector = _collector(processor, settings)
    with _running(collector) as (http_port, grpc_port):

        def send() -> None:
            for _ in range(REQUESTS):
                answers.append(_post(http_port, body))
                answers.append(_export(grpc_port, body))

        garbage = _garbage_after(send)
        refused = collector.host.telemetry.value(counter, kind=RECEIVER, id="otlp")
    assert answers == [429, "RESOURCE_EXHAUSTED"] * REQUESTS
    assert refused == 2 * REQUESTS * (200 if counter == "spans_refused" else 1)
    kinds = (types.FrameType, types.TracebackType, BaseException)
    kept = [o for o in garbage if isinstance(o, kinds)]
    assert kept == [], f"refused requests left reference cycles: {kept[:5]}"
    holding = [type(o).__name__ for o in garbage if _holds_a_body(o, len(body))]
    assert holding == [], f"a reference cycle holds a request body: {holding}"
