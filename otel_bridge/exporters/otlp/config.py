"""Configuration of the ``otlp`` (gRPC) and ``otlphttp`` exporters, shaped like the Collector's.

::

    exporters:
      otlp:                               # alias: otlp_grpc
        endpoint: 127.0.0.1:4317          # host:port, http://host:port, or https://host:port
        headers: {authorization: "Bearer ${env:TOKEN}"}
        timeout: 10s
        compression: gzip                 # gzip | none
        retry_on_failure: {enabled: true, initial_interval: 5s, max_interval: 30s,
                           max_elapsed_time: 300s}
        sending_queue: {enabled: true, queue_size: 1000, num_consumers: 2,
                        storage: /var/lib/otel-bridge/queue}   # optional: persistent queue
        signals: [traces, logs]           # what this backend accepts; [traces] sends no logs
        tls: {ca_file: ca.pem}            # trust this CA (setting any file turns TLS on);
                                          # server_name_override: the name to verify (gRPC)
                                          # cert_file + key_file: a client certificate (mTLS)
      otlphttp:                           # alias: otlp_http
        endpoint: http://127.0.0.1:4318   # /v1/traces and /v1/logs are appended
        traces_endpoint: ""               # full URL overriding endpoint + /v1/traces
        logs_endpoint: ""
        encoding: proto                   # proto | json
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

Compression = Literal["gzip", "none"]
SignalName = Literal["traces", "logs"]


def _both_signals() -> list[SignalName]:
    return ["traces", "logs"]


@dataclass(slots=True, kw_only=True)
class RetryConfig:
    """Retry of retryable failures with exponential backoff and jitter."""

    enabled: bool = True
    initial_interval: float = 5.0
    """Seconds before the first retry (unless the server asks for another delay)."""
    max_interval: float = 30.0
    """Upper bound of one backoff interval, in seconds."""
    max_elapsed_time: float = field(default=300.0, metadata={"duration": True})
    """Seconds after which a batch is given up; 0 retries for ever (until shutdown)."""
    multiplier: float = 1.5
    randomization_factor: float = 0.5
    """Jitter: each interval is drawn from ``interval * (1 ± randomization_factor)``."""

    def problems(self, path: str) -> list[str]:
        """Problems as ``"path.key: message"``."""
        out: list[str] = []
        if self.initial_interval <= 0:
            out.append(f"{path}.initial_interval: must be positive")
        if self.max_interval < self.initial_interval:
            out.append(f"{path}.max_interval: must be at least initial_interval")
        if self.max_elapsed_time < 0:
            out.append(f"{path}.max_elapsed_time: must not be negative")
        if self.multiplier < 1:
            out.append(f"{path}.multiplier: must be at least 1")
        if not 0 <= self.randomization_factor < 1:
            out.append(f"{path}.randomization_factor: must be in [0, 1)")
        return out


@dataclass(slots=True, kw_only=True)
class QueueConfig:
    """A bounded queue of batches drained by background senders."""

    enabled: bool = True
    """Off: ``consume`` sends synchronously and raises when the batch cannot be delivered."""
    queue_size: int = 1000
    """Batches held at most; when full, new batches are dropped and counted."""
    num_consumers: int = 2
    """Sender threads."""
    storage: str = ""
    """A directory: when set, the queue is persistent. Every accepted batch is written to a
    write-ahead log there before ``consume`` returns and removed only once the backend
    acknowledged it; a restart replays what is left (:mod:`otel_bridge.exporters.otlp.wal`)."""
    max_bytes: int = 256 << 20
    """Persistent queue only: bytes of unacknowledged batches held at most; past it new batches
    are dropped and counted."""
    fsync: bool = True
    """Persistent queue only: ``fdatasync`` every batch before ``consume`` returns (survives a
    power loss); false survives a killed process only."""

    def problems(self, path: str) -> list[str]:
        """Problems as ``"path.key: message"``."""
        out: list[str] = []
        if self.storage and not self.enabled:
            out.append(f"{path}.storage: a persistent queue needs enabled: true")
        if self.max_bytes <= 0:
            out.append(f"{path}.max_bytes: must be positive")
        if self.queue_size <= 0:
            out.append(f"{path}.queue_size: must be positive")
        if self.num_consumers <= 0:
            out.append(f"{path}.num_consumers: must be positive")
        return out


@dataclass(slots=True, kw_only=True)
class ClientTLSConfig:
    """The Collector's client ``configtls`` subset: a private CA and a client certificate."""

    ca_file: str = ""
    """PEM roots to verify the server with (empty: the system's)."""
    cert_file: str = ""
    """Client certificate chain (PEM), for a server that requires one (mTLS)."""
    key_file: str = ""
    """The client certificate's private key (PEM)."""
    server_name_override: str = ""
    """gRPC: verify the server's certificate for this name instead of the endpoint's host."""

    @property
    def enabled(self) -> bool:
        """True when any file is set: TLS is then used whatever the endpoint's scheme."""
        return bool(self.ca_file or self.cert_file or self.key_file)

    def problems(self, prefix: str) -> list[str]:
        """``cert_file`` and ``key_file`` come together; files must exist."""
        import os  # noqa: PLC0415 - only when validating

        out: list[str] = []
        if bool(self.cert_file) != bool(self.key_file):
            out.append(f"{prefix}: set both cert_file and key_file, or neither")
        for name in ("ca_file", "cert_file", "key_file"):
            value = getattr(self, name)
            if value and not os.path.isfile(value):
                out.append(f"{prefix}.{name}: no such file {value!r}")
        return out

    def read(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(CA, key, certificate) PEM bytes, None for what is not set."""

        def load(path: str) -> bytes | None:
            if not path:
                return None
            with open(path, "rb") as f:
                return f.read()

        return load(self.ca_file), load(self.key_file), load(self.cert_file)


@dataclass(slots=True, kw_only=True)
class OtlpExporterConfig:
    """Settings shared by both OTLP exporters."""

    endpoint: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    """Sent with every request (gRPC metadata keys are lower-cased)."""
    timeout: float = 10.0
    """Seconds one send attempt may take."""
    compression: Compression = "gzip"
    retry_on_failure: RetryConfig = field(default_factory=RetryConfig)
    sending_queue: QueueConfig = field(default_factory=QueueConfig)
    shutdown_timeout: float = 5.0
    """Seconds ``shutdown`` waits for the queue to drain before dropping (and counting) the rest."""
    tls: ClientTLSConfig = field(default_factory=ClientTLSConfig)
    """TLS towards the backend: a private CA, a client certificate."""
    signals: list[SignalName] = field(default_factory=_both_signals)
    """The signals the backend accepts. A signal left out is never sent (Phoenix and Jaeger take
    traces only: ``[traces]``); a signal the backend refuses at run time (HTTP 404/405/415, gRPC
    ``UNIMPLEMENTED``) is reported once and then no longer sent for the run."""

    def validate(self) -> list[str]:
        """Problems as ``"key.path: message"``, relative to the exporter."""
        problems = self.endpoint_problems()
        if self.timeout <= 0:
            problems.append("timeout: must be positive")
        if self.shutdown_timeout < 0:
            problems.append("shutdown_timeout: must not be negative")
        if not self.signals:
            problems.append("signals: choose at least one of traces, logs")
        if len(set(self.signals)) != len(self.signals):
            problems.append("signals: lists a signal twice")
        problems += self.retry_on_failure.problems("retry_on_failure")
        problems += self.sending_queue.problems("sending_queue")
        problems += self.tls.problems("tls")
        return problems

    def endpoint_problems(self) -> list[str]:
        """Problems with ``endpoint``."""
        return [] if self.endpoint else ["endpoint: required"]


@dataclass(slots=True, kw_only=True)
class GrpcExporterConfig(OtlpExporterConfig):
    """``otlp`` (alias ``otlp_grpc``): ``endpoint`` is ``host:port``; ``https://`` turns TLS on."""

    endpoint: str = "127.0.0.1:4317"

    def endpoint_problems(self) -> list[str]:
        """``endpoint`` must be ``[http://|https://]host:port``."""
        target = self.endpoint
        for scheme in ("http://", "https://"):
            if target.startswith(scheme):
                target = target[len(scheme) :]
        host, sep, port = target.rstrip("/").rpartition(":")
        if not sep or not host or not port.isdigit():
            return [f"endpoint: {self.endpoint!r} is not host:port"]
        return []


@dataclass(slots=True, kw_only=True)
class HttpExporterConfig(OtlpExporterConfig):
    """``otlphttp`` (alias ``otlp_http``): ``endpoint`` is a base URL; signal paths are appended."""

    endpoint: str = "http://127.0.0.1:4318"
    traces_endpoint: str = ""
    """Full URL for traces; default ``endpoint`` + ``/v1/traces``."""
    logs_endpoint: str = ""
    """Full URL for logs; default ``endpoint`` + ``/v1/logs``."""
    encoding: Literal["proto", "json"] = "proto"

    def url(self, signal: Literal["traces", "logs"]) -> str:
        """The URL requests of ``signal`` go to."""
        override = self.traces_endpoint if signal == "traces" else self.logs_endpoint
        return override or self.endpoint.rstrip("/") + f"/v1/{signal}"

    def endpoint_problems(self) -> list[str]:
        """Each URL must be ``http://`` or ``https://`` with a host."""
        problems = []
        for key, value in (
            ("endpoint", self.endpoint),
            ("traces_endpoint", self.traces_endpoint),
            ("logs_endpoint", self.logs_endpoint),
        ):
            if key != "endpoint" and not value:
                continue
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                problems.append(f"{key}: {value!r} is not an http:// or https:// URL")
        return problems
