"""Test helpers: record spans with the real OpenTelemetry SDK and convert them to our model."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.resources import Resource as SdkResource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from otel_bridge.model import (
    AnyValue,
    Channel,
    LogRecord,
    Resource,
    Scope,
    Span,
    SpanKind,
    Status,
    StatusCode,
)

HOST = "host-1"
RUN = "run-1"


@contextmanager
def sdk_tracer(
    resource: Mapping[str, Any] | None = None, scope: str = "test.instrumentation"
) -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    """A real SDK tracer whose finished spans land in an in-memory exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=SdkResource.create(dict(resource or {"service.name": "svc"}))
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer(scope), exporter
    finally:
        provider.shutdown()


def _value(value: Any) -> AnyValue:
    if isinstance(value, list | tuple):
        return tuple(_value(v) for v in value)
    return value  # type: ignore[no-any-return]


def convert(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> tuple[Span, ...]:
    """Our model spans for SDK ``ReadableSpan``s (resource and scope objects shared per group)."""
    resources: dict[int, Resource] = {}
    scopes: dict[tuple[str, str], Scope] = {}
    out: list[Span] = []
    for s in spans:
        ctx = s.context
        assert ctx is not None
        sdk_res = s.resource
        res = resources.setdefault(
            id(sdk_res),
            Resource(attributes={k: _value(v) for k, v in sdk_res.attributes.items()}),
        )
        info = s.instrumentation_scope
        name = info.name if info else ""
        scope = scopes.setdefault(
            (name, (info.version or "") if info else ""),
            Scope(name=name, version=(info.version or "") if info else ""),
        )
        code = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}[
            s.status.status_code.value
        ]
        out.append(
            Span(
                resource=res,
                scope=scope,
                trace_id=ctx.trace_id.to_bytes(16, "big"),
                span_id=ctx.span_id.to_bytes(8, "big"),
                parent_span_id=s.parent.span_id.to_bytes(8, "big") if s.parent else b"",
                name=s.name,
                kind=SpanKind(s.kind.value + 1),
                start_time_unix_nano=s.start_time or 0,
                end_time_unix_nano=s.end_time or 0,
                attributes={k: _value(v) for k, v in (s.attributes or {}).items()},
                status=Status(code=code, message=s.status.description or ""),
            )
        )
    return tuple(out)


def model_span(
    name: str,
    span_id: int,
    *,
    parent: int | None = None,
    trace: int = 1,
    attrs: Mapping[str, AnyValue] | None = None,
    resource: Resource | None = None,
    scope: Scope | None = None,
    start: int = 1_000,
    end: int = 2_000,
    status: StatusCode = StatusCode.UNSET,
) -> Span:
    """A model span built directly (for order/batching tests where the SDK adds nothing)."""
    return Span(
        resource=resource or Resource(attributes={"service.name": "svc"}),
        scope=scope or Scope(name="test"),
        trace_id=trace.to_bytes(16, "big"),
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=parent.to_bytes(8, "big") if parent is not None else b"",
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=dict(attrs or {}),
        status=Status(code=status),
    )


OS_RESOURCE = Resource(
    attributes={
        "evidence.channel": Channel.OS.value,
        "evidence.backend": "linux",
        "host.id": HOST,
        "service.name": "otel-bridge-host",
        "otel_bridge.run.id": RUN,
    }
)


def os_record(
    event: str, record_id: str, *, time: int = 5_000, resource: Resource = OS_RESOURCE, **attrs: Any
) -> LogRecord:
    """An OS event log record as the host receiver emits it."""
    base: dict[str, AnyValue] = {
        "evidence.record_id": record_id,
        "evidence.attribution": "syscall",
        "process.pid": 42,
        "process.creation.time": "2026-01-01T00:00:00.000Z",
    }
    base.update({k.replace("__", "."): _value(v) for k, v in attrs.items()})
    return LogRecord(
        resource=resource,
        scope=Scope(name="otel_bridge.host"),
        time_unix_nano=time,
        event_name=event,
        attributes={k: v for k, v in base.items() if v is not None},
    )
