"""TLS (server certificates, mTLS) and bearer/basic auth on both OTLP receivers, exercised with
the OpenTelemetry SDK's own exporters; validate's checks; the warning for exposed endpoints."""

from __future__ import annotations

import base64
import http.client
import logging
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from certs import Certs, make_certs
from otlp_fixtures import Running

from otel_bridge.receivers.otlp.config import GrpcConfig, HttpConfig, OtlpReceiverConfig, Protocols
from otel_bridge.receivers.otlp.security import (
    AuthConfig,
    BasicAuthConfig,
    BearerTokenConfig,
    HtpasswdConfig,
    TlsConfig,
)

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the HTTP exporter")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs the gRPC exporter")

StartConfig = Callable[..., Running]
TOKEN = "s3cret-token"
BEARER = AuthConfig(bearertoken=BearerTokenConfig(token=TOKEN))


@pytest.fixture(autouse=True)
def _own_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """requests prefers REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE over the exporter's certificate_file
    when the exporter sets it on its session; a machine-wide bundle must not hide our CA."""
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """One CA, server and client certificate for the module."""
    return make_certs(tmp_path_factory.mktemp("certs"))


def _tls(certs: Certs, *, mtls: bool = False) -> TlsConfig:
    return TlsConfig(
        cert_file=str(certs.server),
        key_file=str(certs.server_key),
        client_ca_file=str(certs.ca) if mtls else "",
    )


def _send(exporter: Any) -> bool:
    """Export one span with ``exporter``; whether it succeeded."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExportResult

    provider = TracerProvider(resource=Resource.create({"service.name": "secure"}))
    span = provider.get_tracer("t").start_span("secured")
    span.end()
    result = exporter.export([span])
    exporter.shutdown()
    return bool(result is SpanExportResult.SUCCESS)


def _http_exporter(running: Running, certs: Certs, **kw: Any) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    url = f"https://127.0.0.1:{running.receiver.http_port}/v1/traces"
    return OTLPSpanExporter(endpoint=url, certificate_file=str(certs.ca), timeout=5, **kw)


def _grpc_exporter(running: Running, certs: Certs, *, client: bool = False, **kw: Any) -> Any:
    import grpc
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    credentials = grpc.ssl_channel_credentials(
        root_certificates=certs.ca.read_bytes(),
        private_key=certs.client_key.read_bytes() if client else None,
        certificate_chain=certs.client.read_bytes() if client else None,
    )
    return OTLPSpanExporter(
        endpoint=f"127.0.0.1:{running.receiver.grpc_port}",
        credentials=credentials,
        timeout=5,
        **kw,
    )


def test_http_tls_with_bearer_token(start_config: StartConfig, certs: Certs) -> None:
    """HTTPS with a bearer token: the SDK exporter with the token delivers; without it, or with
    a wrong one, it gets 401 and nothing is delivered."""
    config = OtlpReceiverConfig(
        protocols=Protocols(http=HttpConfig(endpoint="127.0.0.1:0", tls=_tls(certs), auth=BEARER))
    )
    running = start_config(config)
    assert _send(_http_exporter(running, certs, headers={"authorization": f"Bearer {TOKEN}"}))
    assert not _send(_http_exporter(running, certs))
    assert not _send(_http_exporter(running, certs, headers={"authorization": "Bearer nope"}))
    assert [s.name for s in running.sink.spans] == ["secured"]
    assert running.counter("requests_unauthenticated") == 2

    context = ssl.create_default_context(cafile=str(certs.ca))
    conn = http.client.HTTPSConnection(
        "127.0.0.1", running.receiver.http_port, context=context, timeout=5
    )
    conn.request("POST", "/v1/traces", b"{}", {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert (response.status, response.getheader("WWW-Authenticate")) == (401, "Bearer")
    conn.close()


def test_grpc_tls_with_bearer_token(start_config: StartConfig, certs: Certs) -> None:
    """gRPC over TLS with a bearer token in the metadata: delivered; without it UNAUTHENTICATED."""
    config = OtlpReceiverConfig(
        protocols=Protocols(grpc=GrpcConfig(endpoint="127.0.0.1:0", tls=_tls(certs), auth=BEARER))
    )
    running = start_config(config)
    assert _send(_grpc_exporter(running, certs, headers={"authorization": f"Bearer {TOKEN}"}))
    assert not _send(_grpc_exporter(running, certs))
    assert [s.name for s in running.sink.spans] == ["secured"]
    assert running.counter("requests_unauthenticated") == 1


def test_mutual_tls_on_both_protocols(start_config: StartConfig, certs: Certs) -> None:
    """With client_ca_file, only clients presenting a certificate from that CA get through."""
    config = OtlpReceiverConfig(
        protocols=Protocols(
            grpc=GrpcConfig(endpoint="127.0.0.1:0", tls=_tls(certs, mtls=True)),
            http=HttpConfig(endpoint="127.0.0.1:0", tls=_tls(certs, mtls=True)),
        )
    )
    running = start_config(config)
    client = {
        "client_certificate_file": str(certs.client),
        "client_key_file": str(certs.client_key),
    }
    assert _send(_http_exporter(running, certs, **client))
    assert _send(_grpc_exporter(running, certs, client=True))
    assert not _send(_http_exporter(running, certs))
    assert not _send(_grpc_exporter(running, certs))
    assert len(running.sink.spans) == 2
    assert running.counter("tls_handshake_failures") >= 1


def test_http_basic_auth_and_plaintext_client_refused(
    start_config: StartConfig, certs: Certs, tmp_path: Path
) -> None:
    """Basic auth from an htpasswd file: the right password passes, a wrong one is 401; a
    plaintext client cannot talk to the TLS port, and the server keeps serving."""
    users = tmp_path / "users"
    users.write_text("# agents\nagent:correct horse\n")
    auth = AuthConfig(basic=BasicAuthConfig(htpasswd=HtpasswdConfig(file=str(users))))
    config = OtlpReceiverConfig(
        protocols=Protocols(http=HttpConfig(endpoint="127.0.0.1:0", tls=_tls(certs), auth=auth))
    )
    running = start_config(config)
    port = running.receiver.http_port
    plain = http.client.HTTPConnection("127.0.0.1", port, timeout=5)

    def plaintext_post() -> None:
        # http.client writes the headers and the body separately; the server refuses the
        # connection on its first bytes (not a TLS record), so the body's write may already
        # meet the reset (BrokenPipeError: 28 of 300 under two busy processes), not the read
        plain.request("POST", "/v1/traces", b"{}", {"Content-Type": "application/json"})
        plain.getresponse()

    with pytest.raises((ConnectionError, http.client.HTTPException)):
        plaintext_post()
    plain.close()
    context = ssl.create_default_context(cafile=str(certs.ca))

    def post(credentials: str) -> int:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        token = base64.b64encode(credentials.encode()).decode()
        headers = {"Content-Type": "application/json", "Authorization": f"Basic {token}"}
        conn.request("POST", "/v1/traces", b"{}", headers)
        status = conn.getresponse().status
        conn.close()
        return status

    assert post("agent:correct horse") == 200
    assert post("agent:wrong") == 401
    assert post("nobody:correct horse") == 401


def test_validate_refuses_bad_combinations_with_key_paths(tmp_path: Path) -> None:
    """Each problem names its key path."""
    hashed = tmp_path / "hashed"
    hashed.write_text("agent:$apr1$abc$def\n")
    config = OtlpReceiverConfig(
        protocols=Protocols(
            grpc=GrpcConfig(
                endpoint="0.0.0.0:4317",
                auth=AuthConfig(bearertoken=BearerTokenConfig(token="t")),
            ),
            http=HttpConfig(
                endpoint="127.0.0.1:4318",
                tls=TlsConfig(cert_file=str(tmp_path / "missing.pem")),
                auth=AuthConfig(basic=BasicAuthConfig(htpasswd=HtpasswdConfig(file=str(hashed)))),
            ),
        )
    )
    problems = config.validate()
    assert problems == [
        "protocols.grpc.auth: credentials would cross the network in clear text; add "
        "protocols.grpc.tls or listen on a loopback address",
        "protocols.http.tls: set both cert_file and key_file",
        f"protocols.http.tls.cert_file: no such file {str(tmp_path / 'missing.pem')!r}",
        "protocols.http.auth.basic.htpasswd: line 1: hashed passwords are not supported; "
        "write it plain",
    ]
    both = AuthConfig(bearertoken=BearerTokenConfig(token="t"), basic=BasicAuthConfig())
    assert both.problems("a") == ["a: set exactly one of bearertoken, basic"]
    assert BearerTokenConfig().__class__ is BearerTokenConfig
    assert AuthConfig(bearertoken=BearerTokenConfig()).problems("a") == [
        "a.bearertoken: set exactly one of token, filename"
    ]


def test_binding_beyond_loopback_without_auth_is_warned(
    start_config: StartConfig, caplog: pytest.LogCaptureFixture, certs: Certs
) -> None:
    """0.0.0.0 without auth starts, with a warning naming the key to set; with auth (over TLS)
    there is no warning."""
    with caplog.at_level(logging.WARNING):
        start_config(OtlpReceiverConfig(protocols=Protocols(http=HttpConfig(endpoint="0.0.0.0:0"))))
    assert "listens on 0.0.0.0:0, beyond loopback, without auth" in caplog.text
    assert "protocols.http.auth" in caplog.text
    caplog.clear()
    secured = HttpConfig(endpoint="0.0.0.0:0", tls=_tls(certs), auth=BEARER)
    with caplog.at_level(logging.WARNING):
        start_config(OtlpReceiverConfig(protocols=Protocols(http=secured)))
    assert "beyond loopback" not in caplog.text
