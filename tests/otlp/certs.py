"""Test certificates: a CA, a server certificate for 127.0.0.1/localhost and a client one.

Made with the ``cryptography`` package when it is installed, else with the ``openssl`` command;
:func:`make_certs` skips the calling test when neither is available.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certs:
    """Paths of the PEM files."""

    ca: Path
    server: Path
    server_key: Path
    client: Path
    client_key: Path


def make_certs(directory: Path) -> Certs:
    """Write a CA, a server and a client certificate (with keys) under ``directory``."""
    certs = Certs(
        *(
            directory / n
            for n in ("ca.pem", "server.pem", "server-key.pem", "client.pem", "client-key.pem")
        )
    )
    try:
        import cryptography  # noqa: F401
    except ImportError:
        if shutil.which("openssl") is None:
            pytest.skip("needs the cryptography package or the openssl command")
        _with_openssl(directory, certs)
    else:
        _with_cryptography(certs)
    return certs


def _with_cryptography(certs: Certs) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("otel-bridge test CA"))
        .issuer_name(name("otel-bridge test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    certs.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for cn, cert_path, key_path, usage in (
        ("127.0.0.1", certs.server, certs.server_key, ExtendedKeyUsageOID.SERVER_AUTH),
        (
            "otel-bridge test client",
            certs.client,
            certs.client_key,
            ExtendedKeyUsageOID.CLIENT_AUTH,
        ),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if usage == ExtendedKeyUsageOID.SERVER_AUTH:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
                ),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        write_key(key, key_path)


def _with_openssl(directory: Path, certs: Certs) -> None:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=directory)

    ca_key = directory / "ca-key.pem"
    run(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(certs.ca),
        "-days",
        "1",
        "-subj",
        "/CN=otel-bridge test CA",
    )
    for cn, cert, key, ext in (
        (
            "127.0.0.1",
            certs.server,
            certs.server_key,
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        ),
        (
            "otel-bridge test client",
            certs.client,
            certs.client_key,
            "extendedKeyUsage=clientAuth\n",
        ),
    ):
        csr = directory / f"{cert.stem}.csr"
        extfile = directory / f"{cert.stem}.ext"
        extfile.write_text(ext)
        run(
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(csr),
            "-subj",
            f"/CN={cn}",
        )
        run(
            "x509",
            "-req",
            "-in",
            str(csr),
            "-CA",
            str(certs.ca),
            "-CAkey",
            str(ca_key),
            "-CAcreateserial",
            "-out",
            str(cert),
            "-days",
            "1",
            "-extfile",
            str(extfile),
        )
