"""TLS and authentication of the ``otlp`` receiver's servers, shaped like the Collector's.

Each protocol section takes a ``tls`` block (the Collector's ``configtls`` server settings) and
an ``auth`` block holding one authenticator, with the settings of the Collector's
``bearertokenauth`` or ``basicauth`` extensions written in place (otel-bridge ships no
extensions)::

    receivers:
      otlp:
        protocols:
          grpc:
            endpoint: 0.0.0.0:4317
            tls:
              cert_file: server.pem
              key_file: server-key.pem
              client_ca_file: ca.pem        # optional: require client certificates (mTLS)
            auth:
              bearertoken: {token: "${env:OTLP_TOKEN}"}   # or filename: token.txt
          http:
            endpoint: 0.0.0.0:4318
            tls: {cert_file: server.pem, key_file: server-key.pem}
            auth:
              basic: {htpasswd: {file: users.htpasswd, inline: "agent:secret"}}

Requests without valid credentials are answered HTTP 401 (with ``WWW-Authenticate``) or gRPC
``UNAUTHENTICATED``, before their body is read or decoded, and counted in
``requests_unauthenticated``. Tokens and passwords are compared in constant time. See
``docs/security.md`` for the rules and the checks ``validate`` makes.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import ssl
from dataclasses import dataclass

_HASHED = ("$2a$", "$2b$", "$2y$", "$apr1$", "$1$", "$5$", "$6$", "{SHA}")


@dataclass(slots=True, kw_only=True)
class TlsConfig:
    """Server TLS settings (the Collector's ``configtls`` server shape)."""

    cert_file: str = ""
    """PEM certificate chain the server presents."""
    key_file: str = ""
    """PEM private key of ``cert_file``."""
    client_ca_file: str = ""
    """PEM CA bundle; when set, clients must present a certificate it signed (mTLS)."""
    min_version: str = "1.2"
    """Lowest TLS version accepted: ``"1.2"`` or ``"1.3"``."""

    def problems(self, path: str) -> list[str]:
        """What is wrong with these settings, as ``"<path>.key: message"``."""
        out: list[str] = []
        if not self.cert_file or not self.key_file:
            out.append(f"{path}: set both cert_file and key_file")
        for name in ("cert_file", "key_file", "client_ca_file"):
            value = getattr(self, name)
            if value and not os.path.isfile(value):
                out.append(f"{path}.{name}: no such file {value!r}")
        if self.min_version not in ("1.2", "1.3"):
            out.append(f'{path}.min_version: must be "1.2" or "1.3"')
        return out

    def server_context(self) -> ssl.SSLContext:
        """An ``SSLContext`` for the HTTP server (OSError/SSLError if a file is unusable)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = (
            ssl.TLSVersion.TLSv1_3 if self.min_version == "1.3" else ssl.TLSVersion.TLSv1_2
        )
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(self.client_ca_file)
        return context

    def pem(self) -> tuple[bytes, bytes, bytes | None]:
        """``(key, certificate chain, client CA or None)`` as bytes, for grpcio."""
        with open(self.key_file, "rb") as f:
            key = f.read()
        with open(self.cert_file, "rb") as f:
            chain = f.read()
        client_ca = None
        if self.client_ca_file:
            with open(self.client_ca_file, "rb") as f:
                client_ca = f.read()
        return key, chain, client_ca


@dataclass(slots=True, kw_only=True)
class BearerTokenConfig:
    """The Collector's ``bearertokenauth`` settings: one token, inline or in a file."""

    token: str = ""
    filename: str = ""
    """A file holding the token (read at start; surrounding whitespace ignored)."""
    scheme: str = "Bearer"
    """The scheme before the token in the ``Authorization`` header."""


@dataclass(slots=True, kw_only=True)
class HtpasswdConfig:
    """``user:password`` lines, in a file and/or inline (plain passwords only)."""

    file: str = ""
    inline: str = ""


@dataclass(slots=True, kw_only=True)
class BasicAuthConfig:
    """The Collector's ``basicauth`` server settings."""

    htpasswd: HtpasswdConfig | None = None


@dataclass(slots=True, kw_only=True)
class AuthConfig:
    """Exactly one authenticator."""

    bearertoken: BearerTokenConfig | None = None
    basic: BasicAuthConfig | None = None

    def problems(self, path: str) -> list[str]:
        """What is wrong with these settings, as ``"<path>.key: message"``."""
        if (self.bearertoken is None) == (self.basic is None):
            return [f"{path}: set exactly one of bearertoken, basic"]
        if self.bearertoken is not None:
            return _bearer_problems(self.bearertoken, f"{path}.bearertoken")
        assert self.basic is not None
        return _basic_problems(self.basic, f"{path}.basic")

    def authenticator(self) -> Authenticator:
        """The checker of ``Authorization`` header values (reads the files now)."""
        if self.bearertoken is not None:
            cfg = self.bearertoken
            token = cfg.token
            if cfg.filename:
                with open(cfg.filename, encoding="utf-8") as f:
                    token = f.read().strip()
            return Authenticator(bearer=(cfg.scheme, token))
        assert self.basic is not None
        assert self.basic.htpasswd is not None
        return Authenticator(users=_users(self.basic.htpasswd))


def _bearer_problems(cfg: BearerTokenConfig, path: str) -> list[str]:
    if bool(cfg.token) == bool(cfg.filename):
        return [f"{path}: set exactly one of token, filename"]
    if cfg.filename and not os.path.isfile(cfg.filename):
        return [f"{path}.filename: no such file {cfg.filename!r}"]
    if not cfg.scheme or any(c.isspace() for c in cfg.scheme):
        return [f"{path}.scheme: must be one word such as Bearer"]
    return []


def _basic_problems(cfg: BasicAuthConfig, path: str) -> list[str]:
    htpasswd = cfg.htpasswd
    if htpasswd is None or not (htpasswd.file or htpasswd.inline):
        return [f"{path}.htpasswd: set file or inline"]
    if htpasswd.file and not os.path.isfile(htpasswd.file):
        return [f"{path}.htpasswd.file: no such file {htpasswd.file!r}"]
    try:
        users = _users(htpasswd)
    except ValueError as exc:
        return [f"{path}.htpasswd: {exc}"]
    return [] if users else [f"{path}.htpasswd: no user:password line"]


def _users(cfg: HtpasswdConfig) -> dict[str, str]:
    text = cfg.inline
    if cfg.file:
        with open(cfg.file, encoding="utf-8") as f:
            text = f.read() + "\n" + text
    users: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise ValueError(f"line {n} is not user:password")
        if password.startswith(_HASHED):
            raise ValueError(f"line {n}: hashed passwords are not supported; write it plain")
        users[user] = password
    return users


class Authenticator:
    """Checks an ``Authorization`` header value in constant time."""

    def __init__(
        self, *, bearer: tuple[str, str] | None = None, users: dict[str, str] | None = None
    ) -> None:
        self._bearer = bearer
        self._users = users or {}

    @property
    def challenge(self) -> str:
        """The ``WWW-Authenticate`` value of a 401."""
        if self._bearer is not None:
            return self._bearer[0]
        return 'Basic realm="otel-bridge"'

    def check(self, header: str | None) -> bool:
        """Whether ``header`` (the ``Authorization`` value, None when absent) is valid."""
        if not header:
            return False
        scheme, _, credentials = header.strip().partition(" ")
        credentials = credentials.strip()
        if self._bearer is not None:
            want_scheme, token = self._bearer
            same = hmac.compare_digest(credentials.encode(), token.encode())
            return scheme.lower() == want_scheme.lower() and same
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, _, password = decoded.partition(":")
        expected = self._users.get(user)
        ok = hmac.compare_digest(password.encode(), (expected or "\0").encode())
        return expected is not None and ok
