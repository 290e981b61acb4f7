"""What every example agent shares: OpenTelemetry set-up, the model endpoint, and the tools.

* :func:`setup_tracing` configures the OpenTelemetry SDK from the standard environment
  (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL``, ``OTEL_RESOURCE_ATTRIBUTES``)
  with the OTLP exporter, a ``service.name``, and the resource attributes that let otel-bridge
  resolve the agent to the process the OS saw (``process.pid``, ``process.creation.time``,
  ``host.id``). The provider flushes when the :class:`Tracing` context closes.
* :func:`model_endpoint` yields the base URL of the scripted model server: the one given with
  ``--model-url`` (or ``EXAMPLE_MODEL_URL``), else one started on a thread of this process.
* :func:`run_command` and :func:`write_file` are the tools the agents call: a real subprocess
  (no shell) and a real file write.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextvars import Token
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import model_server
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

MODEL_URL_ENV = "EXAMPLE_MODEL_URL"
"""Environment variable naming the model server's base URL (``http://127.0.0.1:PORT/v1``)."""


def _host_id() -> str:
    try:
        from otel_bridge.identity import host_id

        return host_id()
    except ImportError:  # the examples also run without otel-bridge installed
        for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
            with contextlib.suppress(OSError), open(path, encoding="ascii") as f:
                value = f.read().strip()
                if value:
                    return value
        import socket

        return socket.gethostname()


def _start_time_ms(pid: int) -> int | None:
    try:
        from otel_bridge.identity import linux_start_time_ms

        start = linux_start_time_ms(pid)
    except (ImportError, OSError):
        start = None
    if start is None:
        try:
            import psutil

            start = round(psutil.Process(pid).create_time() * 1000)
        except Exception:  # psutil missing or the platform refuses: leave it unknown
            return None
    return start


def format_creation_time(start_ms: int) -> str:
    """``process.creation.time`` as otel-bridge writes it: ISO 8601 UTC, millisecond precision."""
    moment = datetime.datetime.fromtimestamp(start_ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def process_resource_attributes() -> dict[str, Any]:
    """Resource attributes naming this process exactly: pid, start time, host, command."""
    pid = os.getpid()
    attrs: dict[str, Any] = {
        "process.pid": pid,
        "host.id": _host_id(),
        "process.executable.path": sys.executable,
        "process.runtime.name": sys.implementation.name,
    }
    start = _start_time_ms(pid)
    if start is not None:
        attrs["process.creation.time"] = format_creation_time(start)
    return attrs


def _exporter() -> SpanExporter | None:
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        print(
            "note: OTEL_EXPORTER_OTLP_ENDPOINT is not set; spans are not exported",
            file=sys.stderr,
        )
        return None
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"  # the specification's default
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter()
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter()
    raise SystemExit(f"unsupported OTEL_EXPORTER_OTLP_PROTOCOL {protocol!r}")


ENV_CARRIER = ("TRACEPARENT", "TRACESTATE")
"""The W3C trace-context environment variables (OpenTelemetry's environment carrier)."""


def adopt_parent_context(*, consume: bool) -> Token[Context] | None:
    """Make an inherited ``TRACEPARENT`` the parent of this process's spans.

    A launcher such as ``otel-bridge observe`` passes its own span context in the environment;
    the agent's root spans then join that trace. With ``consume`` the variables are removed from
    ``os.environ``, so the agent's children get the context of the span that starts them
    (``otel_bridge.instrument``) instead of inheriting the launcher's. Returns the token to detach.
    """
    carrier = {k.lower(): os.environ[k] for k in ENV_CARRIER if os.environ.get(k)}
    if consume:
        for key in ENV_CARRIER:
            os.environ.pop(key, None)
    if "traceparent" not in carrier:
        return None
    parent = propagate.extract(carrier)
    if not trace.get_current_span(parent).get_span_context().is_valid:
        return None
    return otel_context.attach(parent)


@dataclass(slots=True)
class Tracing:
    """A configured tracer provider; closing it flushes and shuts the exporter down."""

    provider: TracerProvider
    instrumented: bool
    token: Token[Context] | None = None

    def __enter__(self) -> Tracing:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.token is not None:
            otel_context.detach(self.token)
        self.provider.force_flush()
        self.provider.shutdown()


def setup_tracing(service_name: str, *, instrument: bool = True) -> Tracing:
    """Configure the global tracer provider for ``service_name`` from the standard environment.

    An inherited ``TRACEPARENT`` becomes the parent of the agent's spans
    (:func:`adopt_parent_context`). With ``instrument``, call
    ``otel_bridge.instrument.instrument()`` when otel-bridge provides it, so subprocesses
    started inside a span carry that span's ``TRACEPARENT`` (exact links); the inherited one
    is consumed so it cannot shadow them.
    Without it, children inherit the environment unchanged and otel-bridge can only bridge tool
    calls to processes heuristically.
    """
    resource = Resource.create({"service.name": service_name, **process_resource_attributes()})
    provider = TracerProvider(resource=resource)
    exporter = _exporter()
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
    trace.set_tracer_provider(provider)
    instrumented = instrument and instrument_subprocesses()
    token = adopt_parent_context(consume=instrumented)
    return Tracing(provider=provider, instrumented=instrumented, token=token)


def instrument_subprocesses() -> bool:
    """Call ``otel_bridge.instrument.instrument()`` if it exists; True when it was called."""
    try:
        module = importlib.import_module("otel_bridge.instrument")
    except ImportError:
        return False
    module.instrument()
    return True


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every example takes."""
    parser.add_argument(
        "--model-url",
        default=os.environ.get(MODEL_URL_ENV),
        help=f"model server base URL (default: ${MODEL_URL_ENV}, else one started in-process)",
    )
    parser.add_argument(
        "--script", help="model script for the in-process model server (JSON, see model_server.py)"
    )
    parser.add_argument(
        "--task", default="Run the scripted commands and write the notes.", help="the user task"
    )


@contextlib.contextmanager
def model_endpoint(url: str | None, script: str | None) -> Iterator[str]:
    """The model's base URL: ``url`` if given, else an in-process server's, stopped on exit."""
    if url:
        yield url.rstrip("/")
        return
    server = model_server.serve_in_thread(model_server.load_script(script))
    try:
        yield server.base_url
    finally:
        server.shutdown()
        server.server_close()


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command tool returns to the model."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str

    def summary(self) -> str:
        """A short text for the model: exit code and the first lines of output."""
        out = (self.stdout or self.stderr).strip()
        return f"exit code {self.exit_code}" + (f": {out[:200]}" if out else "")


def run_command(command: str, *, timeout: float = 30.0) -> CommandResult:
    """Run ``command`` as a real subprocess, without a shell (split like a POSIX shell would)."""
    argv = tuple(shlex.split(command))
    if not argv:
        return CommandResult(argv=argv, exit_code=127, stdout="", stderr="empty command")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        return CommandResult(argv=argv, exit_code=127, stdout="", stderr=str(exc))
    return CommandResult(
        argv=argv, exit_code=done.returncode, stdout=done.stdout, stderr=done.stderr
    )


def write_file(path: str, content: str) -> str:
    """Write ``content`` to ``path`` (relative to the working directory); the absolute path."""
    target = Path(path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content, encoding="utf-8")
    return str(target)
