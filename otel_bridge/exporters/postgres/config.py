"""Configuration of the ``postgres`` exporter (``docs/store.md``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from otel_bridge.store import MISSING_DRIVER, driver_available

SSL_MODES = ("", "disable", "allow", "prefer", "require", "verify-ca", "verify-full")


@dataclass(slots=True)
class TLSConfig:
    """TLS to the server (libpq's ``sslmode`` and files); empty fields use libpq's defaults."""

    mode: str = ""
    """``disable``, ``prefer``, ``require``, ``verify-ca``, ``verify-full`` (libpq sslmode)."""
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


@dataclass(slots=True)
class Config:
    """Configuration of the ``postgres`` exporter."""

    endpoint: str = "postgresql://otel_bridge@127.0.0.1:5432/otel_bridge"
    """``postgresql://user@host:port/db`` (libpq URL; query parameters are passed through)."""
    password: str = ""
    """The password; give it as ``${env:VAR}``, never inline (it is redacted from messages)."""
    tls: TLSConfig = field(default_factory=TLSConfig)
    connect_timeout: float = 10.0
    """Seconds a connection attempt may take."""
    run_id: str = ""
    """The run the records belong to. Empty: under ``observe`` its run id, else a new id per
    start (set it, e.g. ``${env:RUN_ID}``, so a restarted collector resumes the same run)."""
    task: str = ""
    """The task the run performs (the ``--task`` selector of the readers)."""
    service: str = ""
    """The service (``--service`` selector); empty: the ``service.name`` of the first span."""
    host_id: str = ""
    """The host of the run; empty: this machine's id (``identity.host_id``)."""
    run: dict[str, str] = field(default_factory=dict)
    """Run metadata copied into the graph's ``run`` object, as the ``graph`` exporter's."""
    flush_interval: float = 5.0
    """Seconds between upserts of the changed graph rows; 0 upserts after every batch."""
    partition_interval: float = 86400.0
    """Width of one time partition of the raw tables (at least 60 s)."""
    retention: float = 0.0
    """Drop raw-record partitions older than this (seconds, ``"30d"``...); 0 keeps them."""
    migrate: bool = True
    """Apply missing schema migrations at start (else the schema must be current)."""
    crosshost_join: bool = True
    """Join connection ends across hosts in the store, at each insert (``docs/store.md``,
    *Cross-host joins*): every writer of the database sees every stored end, so ends that reach
    two gateways, or one gateway before and after a restart, are joined; a gateway's in-memory
    connection joins are then left to the store (same ids, stored once)."""
    skew_window: float = 5.0
    """The store join's bound on two ends' time difference (the ``crosshost`` processor's)."""
    retain_support: bool = True
    support_limit: int = 1000
    occurrence_window: int = 200_000

    def validate(self) -> list[str]:
        """Problems with this configuration, relative to the component."""
        problems: list[str] = []
        if not driver_available():
            problems.append(MISSING_DRIVER)
        try:
            scheme = urlsplit(self.endpoint).scheme
        except ValueError:
            scheme = ""
        if scheme not in ("postgresql", "postgres"):
            problems.append("endpoint: must be a postgresql://user@host:port/db URL")
        elif urlsplit(self.endpoint).password:
            problems.append("endpoint: no password in the URL; use password: ${env:VAR}")
        if self.tls.mode not in SSL_MODES:
            problems.append(f"tls.mode: one of {', '.join(m for m in SSL_MODES if m)}")
        if self.flush_interval < 0:
            problems.append("flush_interval: must not be negative")
        if self.partition_interval < 60:
            problems.append("partition_interval: at least 60s")
        if self.retention < 0:
            problems.append("retention: must not be negative")
        if self.skew_window < 0:
            problems.append("skew_window: must not be negative")
        if self.occurrence_window < 2:
            problems.append("occurrence_window: must be at least 2")
        return problems
