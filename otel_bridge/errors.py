"""The one exception hierarchy of otel-bridge.

::

    OtelBridgeError                 base of everything raised on purpose
    ├── ConfigError                 a configuration has problems; ``problems`` lists each
    │                               with its full key path
    ├── ComponentError              a component failed to create, start or shut down
    │   ├── StartupError            a component could not start (port in use, no permission)
    │   └── RefusedError            data refused for now (memory limit, queue full);
    │                               retryable: receivers answer HTTP 429 + Retry-After /
    │                               gRPC RESOURCE_EXHAUSTED + RetryInfo
    ├── PermanentError              data that will never be accepted; receivers answer
    │   │                           HTTP 400 / gRPC INVALID_ARGUMENT and the client drops it
    │   └── DecodeError             an incoming record or body is malformed; the message says
    │       │                       what is wrong, for the client
    │       └── PayloadTooLargeError a body exceeds the configured size limit
    ├── BackendUnavailableError     a host backend cannot run here; the message says why
    └── VerificationError           a run directory does not match its manifest

At run time nothing crashes on bad input: receivers turn ``DecodeError`` into a rejection that
the client sees, count it and keep running. Only :class:`RefusedError` is worth a retry
(:func:`is_retryable`); every other exception raised downstream of a receiver, ours or not (a
processor's ``ValueError``), is answered as permanent, so a client never resends a poison batch
forever. Configuration and start-up fail fast.
"""

from __future__ import annotations


class OtelBridgeError(Exception):
    """Base class of every error otel-bridge raises on purpose."""


class ConfigError(OtelBridgeError):
    """A configuration has one or more problems, each named by its full key path."""

    def __init__(self, problems: list[str] | tuple[str, ...]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("\n".join(self.problems) if self.problems else "invalid configuration")


class ComponentError(OtelBridgeError):
    """A component failed to create, start or shut down."""


class StartupError(ComponentError):
    """A component could not start."""


class RefusedError(ComponentError):
    """Data was refused for now (e.g. over the memory limit) and should be sent again later.

    Nothing was accepted: a receiver answers its client with a retryable status (gRPC
    ``RESOURCE_EXHAUSTED`` with ``RetryInfo``, HTTP 429 with ``Retry-After``) so the client's
    exporter retries after that delay.
    """


class PermanentError(OtelBridgeError):
    """Data that will never be accepted as sent; the message says why, for the sender.

    Receivers answer it (and any exception that is not a :class:`RefusedError`) with a
    non-retryable status: HTTP 400, gRPC ``INVALID_ARGUMENT``.
    """


class DecodeError(PermanentError):
    """A record or request body is malformed. The message is meant for the sender."""


class PayloadTooLargeError(DecodeError):
    """A request body exceeds the configured limit."""


class BackendUnavailableError(OtelBridgeError):
    """A host-observation backend cannot run on this machine; the message says why."""


class VerificationError(OtelBridgeError):
    """A run directory does not match its manifest."""


def is_retryable(exc: BaseException) -> bool:
    """Whether a client should send the data that raised ``exc`` again later."""
    return isinstance(exc, RefusedError)


def require_readable(path: str, what: str) -> None:
    """Raise :class:`OtelBridgeError` ("cannot read WHAT PATH: why") unless ``path`` opens for
    reading: an input named on the command line is checked before anything runs or is
    written (``review --transcript``, ``observe --review-transcript``)."""
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise OtelBridgeError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
