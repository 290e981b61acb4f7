"""Forwarding under ``observe``: the user's own ``OTEL_EXPORTER_OTLP_*`` destination keeps working.

``observe`` points the workload's ``OTEL_EXPORTER_OTLP_ENDPOINT`` at its own receiver. A user who
already sent the agent's telemetry somewhere (a Collector, Jaeger, Phoenix) would silently lose
it; instead the run adds an OTLP exporter built from the same variables (endpoint, per-signal
endpoints, protocol, headers) and a pipeline from the run's OTLP receiver to it, so that
destination receives what the agent sends, unchanged, during the run. ``--no-forward`` opts out.
The summary says where telemetry was forwarded and how much of it arrived.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from otel_bridge.component import EXPORTER, Telemetry
from otel_bridge.config import ComponentAddition, PipelineAddition

FORWARD_EXPORTER_ID = "run_forward"
"""The forwarding exporter's name (``otlp/run_forward`` or ``otlphttp/run_forward``)."""
GRPC_DEFAULT_PORT = 4317


@dataclass(frozen=True, slots=True)
class Forward:
    """The user's destination, read from the environment."""

    protocol: str
    """``grpc`` or ``http/protobuf`` or ``http/json``."""
    protocol_source: str
    """Where the protocol came from (an environment variable, or how it was inferred)."""
    endpoint: str
    traces_endpoint: str
    logs_endpoint: str
    headers: dict[str, str]

    @property
    def exporter_type(self) -> str:
        """The exporter type the run adds."""
        return "otlp" if self.protocol == "grpc" else "otlphttp"

    @property
    def exporter_id(self) -> str:
        """The exporter's component id."""
        return f"{self.exporter_type}/{FORWARD_EXPORTER_ID}"

    @property
    def signals(self) -> list[str]:
        """The signals with a destination."""
        out = []
        if self.endpoint or self.traces_endpoint:
            out.append("traces")
        if self.endpoint or self.logs_endpoint:
            out.append("logs")
        return out

    def destination(self) -> str:
        """A readable destination (no headers: they may hold credentials)."""
        return self.endpoint or self.traces_endpoint or self.logs_endpoint

    def settings(self) -> dict[str, Any]:
        """The exporter's settings: short retries so the end of the run is not held up."""
        settings: dict[str, Any] = {
            "signals": self.signals,
            "headers": dict(self.headers),
            "timeout": 3.0,
            "shutdown_timeout": 3.0,
            "retry_on_failure": {
                "initial_interval": 0.2,
                "max_interval": 1.0,
                "max_elapsed_time": 2.0,
            },
        }
        if self.exporter_type == "otlp":
            settings["endpoint"] = self.endpoint or self.traces_endpoint or self.logs_endpoint
            return settings
        if self.endpoint:
            settings["endpoint"] = self.endpoint
        else:
            settings["endpoint"] = self.traces_endpoint or self.logs_endpoint
        # per-signal variables are full URLs (OTel spec), like the exporter's *_endpoint keys
        for key, value in (
            ("traces_endpoint", self.traces_endpoint),
            ("logs_endpoint", self.logs_endpoint),
        ):
            if value:
                settings[key] = value
        if self.protocol == "http/json":
            settings["encoding"] = "json"
        return settings


def parse_headers(text: str) -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_HEADERS``: ``k=v,k2=v2`` with URL-encoded values."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[unquote(key.strip()).lower()] = unquote(value.strip())
    return out


def forward_from_env(env: Mapping[str, str]) -> Forward | None:
    """The user's destination from ``env``; None when no OTLP endpoint variable is set."""

    def var(name: str) -> str:
        return env.get(f"OTEL_EXPORTER_OTLP_{name}", "").strip()

    endpoint, traces, logs = var("ENDPOINT"), var("TRACES_ENDPOINT"), var("LOGS_ENDPOINT")
    if not (endpoint or traces or logs):
        return None
    protocol, source = var("TRACES_PROTOCOL"), "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    if not protocol:
        protocol, source = var("PROTOCOL"), "OTEL_EXPORTER_OTLP_PROTOCOL"
    if protocol not in ("grpc", "http/protobuf", "http/json"):
        port = urlsplit(endpoint or traces or logs).port
        if port == GRPC_DEFAULT_PORT:
            protocol, source = "grpc", f"inferred from port {GRPC_DEFAULT_PORT}"
        else:
            protocol, source = "http/protobuf", "the OTLP default"
    headers = parse_headers(var("HEADERS"))
    headers.update(parse_headers(var("TRACES_HEADERS")))
    return Forward(
        protocol=protocol,
        protocol_source=source,
        endpoint=endpoint,
        traces_endpoint=traces,
        logs_endpoint=logs,
        headers=headers,
    )


def forward_overlay(
    forward: Forward, otlp_receiver: str
) -> tuple[ComponentAddition, tuple[PipelineAddition, ...]]:
    """The exporter and the pipelines (one per signal) that forward the receiver's data."""
    exporter = ComponentAddition(
        section="exporters", id=forward.exporter_id, settings=forward.settings()
    )
    pipelines = tuple(
        PipelineAddition(
            id=f"{signal}/{FORWARD_EXPORTER_ID}",
            receivers=(otlp_receiver,),
            exporters=(forward.exporter_id,),
        )
        for signal in forward.signals
    )
    return exporter, pipelines


def forward_summary(forward: Forward, telemetry: Telemetry) -> dict[str, Any]:
    """What was forwarded where, for ``summary.json``."""
    eid = forward.exporter_id

    def n(name: str) -> int:
        return telemetry.value(name, kind=EXPORTER, id=eid)

    return {
        "destination": forward.destination(),
        "protocol": forward.protocol,
        "protocol_source": forward.protocol_source,
        "signals": forward.signals,
        "spans_sent": n("sent_spans"),
        "log_records_sent": n("sent_log_records"),
        "spans_not_sent": sum(
            n(f"{v}_spans") for v in ("rejected", "failed", "dropped", "unsupported")
        ),
        "log_records_not_sent": sum(
            n(f"{v}_log_records") for v in ("rejected", "failed", "dropped", "unsupported")
        ),
    }
