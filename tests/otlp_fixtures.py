"""Shared helpers of the OTLP tests: a running receiver handle and sample spans."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from otel_bridge.component import RECEIVER, Host
from otel_bridge.model import Resource, Scope, Span, SpanKind, Status, StatusCode
from otel_bridge.receivers.otlp import OtlpReceiver
from otel_bridge.testing import RecordingConsumer


@dataclass
class Running:
    """A started receiver, its sink and its host."""

    receiver: OtlpReceiver
    sink: RecordingConsumer
    host: Host

    @property
    def http_url(self) -> str:
        """Base URL of the HTTP server."""
        return f"http://127.0.0.1:{self.receiver.http_port}"

    @property
    def grpc_target(self) -> str:
        """``host:port`` of the gRPC server."""
        return f"127.0.0.1:{self.receiver.grpc_port}"

    def counter(self, name: str) -> int:
        """Receiver counter ``name``."""
        return self.host.telemetry.value(name, kind=RECEIVER, id="otlp")


StartReceiver = Callable[..., Running]


RESOURCE = Resource(attributes={"service.name": "svc", "process.pid": 42}, schema_url="https://r")
SCOPE = Scope(name="lib", version="1.0", attributes={"k": "v"}, schema_url="https://s")


def make_span(i: int = 1, **overrides: object) -> Span:
    """A span with distinctive ids and attributes of every AnyValue type."""
    fields: dict[str, object] = {
        "resource": RESOURCE,
        "scope": SCOPE,
        "trace_id": bytes([i % 256]) * 15 + b"\x01",
        "span_id": bytes([i % 256]) * 7 + b"\x02",
        "parent_span_id": b"\x09" * 8,
        "name": f"span-{i}",
        "kind": SpanKind.CLIENT,
        "start_time_unix_nano": 1_700_000_000_000_000_000 + i,
        "end_time_unix_nano": 1_700_000_000_500_000_000 + i,
        "attributes": {
            "s": "text",
            "i": -(2**63),
            "f": 1.5,
            "b": True,
            "bytes": b"\x00\xff",
            "arr": ("a", 1, False),
            "kv": {"inner": {"deep": (1, 2)}},
        },
        "status": Status(code=StatusCode.ERROR, message="boom"),
    }
    fields.update(overrides)
    return Span(**fields)  # type: ignore[arg-type]
