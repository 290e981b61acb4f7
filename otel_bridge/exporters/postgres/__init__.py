"""The ``postgres`` exporter: the evidence store on PostgreSQL (``docs/store.md``).

.. code-block:: yaml

    exporters:
      postgres:
        endpoint: postgresql://otel_bridge@127.0.0.1:5432/otel_bridge
        password: ${env:OTEL_BRIDGE_PG_PASSWORD}
        tls: {mode: verify-full, ca_file: /etc/ssl/pg-ca.pem}
        run_id: ${env:RUN_ID}
        retention: 30d

Needs the ``postgres`` extra (psycopg 3); without it ``validate`` names the missing driver.
"""

from __future__ import annotations

from otel_bridge.component import EXPORTER, Component, Consumer, CreateSettings, Factory

from .config import Config, TLSConfig
from .exporter import COUNTERS, PostgresExporter


def _create(settings: CreateSettings, config: Config, next_consumer: Consumer | None) -> Component:
    del next_consumer
    return PostgresExporter(config, settings)


factory: Factory[Config] = Factory(
    type_name="postgres",
    kind=EXPORTER,
    default_config=Config,
    create=_create,
    signals=frozenset({"evidence", "traces", "logs"}),
    counters=COUNTERS,
)
"""The ``postgres`` exporter factory."""

__all__ = ["COUNTERS", "Config", "PostgresExporter", "TLSConfig", "factory"]
