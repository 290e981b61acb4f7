"""Propagate the active tool span into child processes, so correlation is exact, not heuristic.

An agent author calls :func:`instrument` once, after setting up OpenTelemetry. Then:

* every child started through :class:`subprocess.Popen` while a span is active gets
  ``TRACEPARENT`` (W3C, written by the globally configured propagator from the current context)
  in its environment. An explicit ``TRACEPARENT`` in the ``env`` passed to ``Popen`` is never
  overwritten; one merely inherited from ``os.environ`` (the context this process itself was
  started in) is replaced by the active span's. ``subprocess.run``/``call``/
  ``check_output`` and ``asyncio.create_subprocess_exec``/``create_subprocess_shell`` (on POSIX
  they start ``subprocess.Popen``) are covered through ``Popen``. **Not covered**: ``os.system``,
  ``os.spawn*``, ``os.exec*``, ``os.posix_spawn`` and ``os.fork`` (they bypass ``Popen``).
* ``concurrent.futures.ThreadPoolExecutor.submit`` runs the submitted callable in a copy of the
  submitting thread's ``contextvars`` context. ``loop.run_in_executor`` with the default (or any
  ``ThreadPoolExecutor``) executor goes through ``submit``, so it is covered too.

Which tool span is found, by framework (tested with the installed versions):

* **AutoGen** (autogen-core/agentchat 0.7.5): ``FunctionTool`` opens its ``execute_tool`` span
  with ``start_as_current_span`` and runs a *sync* function via ``loop.run_in_executor(None, ...)``
  which does not copy the context: the copying ``submit`` makes the tool span current in the
  worker thread. Async tools run in the task's context and need nothing.
* **LangGraph** ``ToolNode`` (langgraph 1.x, langchain-core 1.x) with OpenInference's
  ``LangChainInstrumentor``: tool spans are created from callbacks and never made current in the
  OTel context. The span is found through ``openinference.instrumentation.langchain.
  get_current_span()``, which reads LangChain's own context variable; ToolNode runs sync tools in
  LangChain's context-copying executor, so it is visible in the worker thread.
* Anything else that makes its tool span current (``start_as_current_span``) in the thread or
  task that starts the process.

When both an OTel current span and an OpenInference LangChain span exist, the one that started
later (the innermost) is used. :func:`uninstrument` restores the originals.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import functools
import inspect
import os
import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

_lock = threading.Lock()
_originals: dict[str, Any] = {}

_POPEN_INIT = subprocess.Popen.__init__
_POPEN_SIG = inspect.signature(_POPEN_INIT)


def _langchain_span() -> trace.Span | None:
    try:
        from openinference.instrumentation.langchain import (  # noqa: PLC0415 (optional extra)
            get_current_span,
        )
    except ImportError:
        return None
    try:
        span = get_current_span()
    except Exception:  # the instrumentor is not set up: no LangChain span to find
        return None
    return span if isinstance(span, trace.Span) else None


def _start(span: trace.Span) -> int:
    value = getattr(span, "start_time", None)
    return value if isinstance(value, int) else -1


def current_tool_span() -> trace.Span | None:
    """The span a child process started now belongs to, or None when there is none."""
    found = [
        s
        for s in (trace.get_current_span(), _langchain_span())
        if s is not None and s.get_span_context().is_valid
    ]
    if not found:
        return None
    return max(found, key=_start)


def traceparent_env() -> dict[str, str]:
    """The W3C headers of the current tool span, as environment variables (may be empty)."""
    span = current_tool_span()
    if span is None:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=trace.set_span_in_context(span, otel_context.Context()))
    return {k.upper(): v for k, v in carrier.items() if k.lower() in ("traceparent", "tracestate")}


def _explicit_traceparent(env: Mapping[str, str] | None) -> bool:
    """True when the caller chose a ``TRACEPARENT`` for this child on purpose.

    A value inherited from this process's own environment (``env`` is None, or a copy of
    ``os.environ``) is the context *this* process was started in, not a choice for the child: a
    launcher such as ``otel-bridge observe`` puts its run context there, and keeping it would
    hide the tool span that really starts the child.
    """
    if env is None:
        return False
    value = env.get("TRACEPARENT")
    return value is not None and value != os.environ.get("TRACEPARENT")


def _with_traceparent(env: Mapping[str, str] | None) -> Mapping[str, str] | None:
    if _explicit_traceparent(env):
        return env
    headers = traceparent_env()
    if not headers:
        return env
    merged = dict(os.environ if env is None else env)
    merged.pop("TRACESTATE", None)
    merged.update(headers)
    return merged


@functools.wraps(_POPEN_INIT)
def _popen_init(self: subprocess.Popen[Any], *args: Any, **kwargs: Any) -> None:
    try:
        bound = _POPEN_SIG.bind(self, *args, **kwargs)
    except TypeError:
        _POPEN_INIT(self, *args, **kwargs)
        return
    env = bound.arguments.get("env")
    new_env = _with_traceparent(env)
    if new_env is not env:
        bound.arguments["env"] = new_env
    _POPEN_INIT(*bound.args, **bound.kwargs)


def _make_submit(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def submit(
        self: concurrent.futures.ThreadPoolExecutor, fn: Callable[..., Any], /, *a: Any, **k: Any
    ) -> concurrent.futures.Future[Any]:
        ctx = contextvars.copy_context()
        result: concurrent.futures.Future[Any] = original(self, ctx.run, fn, *a, **k)
        return result

    return submit


def instrument() -> None:
    """Patch ``subprocess.Popen`` and ``ThreadPoolExecutor.submit``. Idempotent."""
    with _lock:
        if _originals:
            return
        _originals["popen_init"] = subprocess.Popen.__init__
        _originals["submit"] = concurrent.futures.ThreadPoolExecutor.submit
        subprocess.Popen.__init__ = _popen_init  # type: ignore[method-assign]
        concurrent.futures.ThreadPoolExecutor.submit = _make_submit(  # type: ignore[method-assign]
            _originals["submit"]
        )


def uninstrument() -> None:
    """Restore the originals. Safe when not instrumented."""
    with _lock:
        if not _originals:
            return
        subprocess.Popen.__init__ = _originals.pop("popen_init")  # type: ignore[method-assign]
        concurrent.futures.ThreadPoolExecutor.submit = _originals.pop("submit")  # type: ignore[method-assign]


def is_instrumented() -> bool:
    """True between :func:`instrument` and :func:`uninstrument`."""
    with _lock:
        return bool(_originals)
