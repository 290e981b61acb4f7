"""Issue 17: a gateway writing PostgreSQL stopped with SIGTERM mid-run drains before it closes.

Real processes: ``configs/gateway-postgres.yaml`` (TLS, token, key file, graph journal, the
``postgres`` exporter into the test's own server) fed by ``configs/agent.yaml`` (persistent
sending queue), and a client sending spans with the OpenTelemetry SDK that keeps a receipt of
every span the agent acknowledged. The gateway gets SIGTERM while calls are in flight: its
receivers stop and wait for the calls still in the pipeline, then the exporters flush and close,
so nothing fails on the way out (before, the store's connection was closed under calls still
being handled and every one of them was an export failure). The agent holds what the gateway did
not take; a restarted gateway takes it. At the end every acknowledged span is stored exactly once.
"""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest
from fleet_support import (
    CollectorProcess,
    agent_env,
    gateway_env,
    start_load,
    stored_span_rows,
)
from store.store_support import Server, free_port, pg_server
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "otlp"))
from certs import make_certs

__all__ = ["pg_server"]

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the dev extra")
psycopg = pytest.importorskip("psycopg", reason="needs the postgres extra")

RUN = "sigterm-run"
FAST_RETRY = [
    "exporters.otlp/gateway.retry_on_failure.initial_interval=0.2s",
    "exporters.otlp/gateway.retry_on_failure.max_interval=1s",
]


def stored(url: str) -> list[str]:
    """The span ids of the run's span observations (``<span id>#0``), one per stored row."""
    return stored_span_rows(url, RUN)


def export_failures(log: str) -> list[int]:
    """The ``exporter errors N`` figures of a collector's progress lines."""
    return [int(n) for n in re.findall(r"exporter errors (\d+)", log)]


@pytest.mark.slow  # about 40 s: a gateway stopped and restarted under load, the agent's drain
def test_a_sigtermed_postgres_gateway_drains_and_loses_nothing(
    tmp_path: Path, pg_server: Server
) -> None:
    url = pg_server.url(pg_server.create_database())
    certs = make_certs(tmp_path)
    gw_port, agent_port = free_port(), free_port()
    gw_env = gateway_env(tmp_path / "gateway", certs.server, certs.server_key)
    gw_env.update(
        OTEL_BRIDGE_GATEWAY_GRPC_ENDPOINT=f"127.0.0.1:{gw_port}",
        OTEL_BRIDGE_GATEWAY_HTTP_ENDPOINT="127.0.0.1:0",
        OTEL_BRIDGE_DB_URL=url,
        OTEL_BRIDGE_GATEWAY_RUN=RUN,
    )
    a_env = agent_env(f"127.0.0.1:{gw_port}", certs.ca, tmp_path / "queue")
    a_env["OTEL_BRIDGE_OTLP_HTTP_ENDPOINT"] = f"127.0.0.1:{agent_port}"
    gateway = CollectorProcess("gateway-postgres.yaml", gw_env)
    agent = CollectorProcess("agent.yaml", a_env, sets=FAST_RETRY)
    client, progress = start_load(f"http://127.0.0.1:{agent_port}", tmp_path / "receipts")
    try:
        progress.wait_for(r"acked 200\b")
        gateway.proc.send_signal(signal.SIGTERM)  # mid-run: the agent keeps delivering
        assert gateway.proc.wait(timeout=120) == 0
        log = gateway.stderr.log()
        assert "connection is closed" not in log, log
        assert set(export_failures(log)) == {0}, log  # printed at exit: one line at least
        progress.wait_for(r"acked 300\b")  # the agent queues meanwhile
        gateway = CollectorProcess("gateway-postgres.yaml", gw_env)
        progress.wait_for(r"acked 400\b")
        assert client.stdin is not None
        client.stdin.write("stop\n")
        client.stdin.close()
        assert client.wait(timeout=60) == 0
        acked = set((tmp_path / "receipts").read_text().split())
        wait_until(lambda: acked <= set(stored(url)), 90, "every acknowledged span stored")
        assert agent.stop() == 0
        assert gateway.stop() == 0, gateway.stderr.log()
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
        agent.kill()
        gateway.kill()
    spans = stored(url)
    assert len(acked) >= 400
    assert acked <= set(spans)  # nothing acknowledged was lost
    assert len(spans) == len(set(spans))  # nothing stored twice
