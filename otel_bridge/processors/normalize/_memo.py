"""Small per-normalizer memos of the span hot path: per (resource, scope) facts, bounded caches."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from otel_bridge.identity import int_value, iso_to_ms, str_value
from otel_bridge.model import (
    AnyValue,
    Attributes,
    Channel,
    EmitterFacts,
    Resource,
    Scope,
    Source,
    TransportPeer,
)

from .values import get_str

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

RESOURCE_IDENTITY = ("process.pid", "host.id", "process.creation.time")
"""Resource attributes every observation of a span carries, for exact process identity."""


def emitter_facts(resource: Attributes, peer: TransportPeer | None = None) -> EmitterFacts | None:
    """What a span's resource states about the process that emitted it, with the transport
    ``peer`` its request came from; None when it states none of pid, host id and start time
    and no peer is known."""
    pid = int_value(resource.get("process.pid"))
    host = str_value(resource.get("host.id"))
    start = iso_to_ms(str_value(resource.get("process.creation.time")))
    if pid is None and host is None and start is None and peer is None:
        return None
    return EmitterFacts(host_id=host, pid=pid, start_time_ms=start, peer=peer)


class Origin:
    """What the spans under one (resource, scope) pair share."""

    __slots__ = (
        "channel",
        "emitter",
        "identity",
        "resource",
        "scope",
        "server_channel",
        "server_source",
        "service",
        "serving",
        "source",
        "template",
    )

    def __init__(self, resource: Resource, scope: Scope, channels: tuple[Channel, Channel]) -> None:
        self.resource = resource  # kept alive so its id() is not reused while cached
        self.scope = scope
        self.channel, self.server_channel = channels
        """The channel of this pair's spans; of its SERVER spans (``channels.ChannelAssigner``)."""
        self.serving = self.server_channel is not self.channel
        """Whether SERVER spans get another channel (a scope rule names who serves calls)."""
        self.service = get_str(resource.attributes, "service.name") or "unknown_service"
        attributes = resource.attributes
        self.emitter = emitter_facts(attributes, resource.peer)
        """The emitting process (one object for every observation of this pair's spans)."""
        self.source = Source(
            channel=self.channel, backend="otlp", record_id="", emitter=self.emitter
        )
        """The source of this pair's spans but their ids (filled in per span)."""
        self.server_source = Source(
            channel=self.server_channel, backend="otlp", record_id="", emitter=self.emitter
        )
        """The same for its SERVER spans."""
        self.identity: dict[str, AnyValue] = {}
        for key in RESOURCE_IDENTITY:
            value = attributes.get(key)
            if value is not None:
                self.identity[key] = value
        self.template: dict[str, AnyValue] = {
            "trace_id": "",
            "span_id": "",
            **self.identity,
            "span.name": "",
            "span.status": "",
        }
        """The attributes every observation of a span carries, in their order; the span's
        values are filled into a copy."""


class Cache(Generic[K, V]):
    """A bounded memo: cleared when it reaches ``size`` entries."""

    __slots__ = ("_data", "_size", "get")

    def __init__(self, size: int) -> None:
        self._data: dict[K, V] = {}
        self._size = size
        self.get: Callable[[K], V | None] = self._data.get
        """The cached value of a key, or None: the dictionary's own ``get`` (no Python frame on
        the hot path; :meth:`put` clears the same dictionary, so it stays bound to it)."""

    def put(self, key: K, value: V) -> None:
        """Remember ``value`` under ``key``."""
        if len(self._data) >= self._size:
            self._data.clear()
        self._data[key] = value

    def __len__(self) -> int:
        """Entries held now."""
        return len(self._data)
