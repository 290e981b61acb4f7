"""instrument(): TRACEPARENT reaches real child processes, also from framework worker threads."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_bridge.instrument import instrument, is_instrumented, uninstrument

PRINT_TP = [sys.executable, "-c", "import os; print(os.environ.get('TRACEPARENT', ''))"]


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """An in-memory exporter on the global SDK tracer provider (set once per process)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exp = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    return exp


@pytest.fixture
def instrumented(exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """instrument() for one test, undone afterwards."""
    exporter.clear()
    instrument()
    try:
        yield exporter
    finally:
        uninstrument()


def span_hex(span: trace.Span | ReadableSpan) -> str:
    """The span id as 16 hex digits."""
    ctx = span.get_span_context()
    assert ctx is not None
    return f"{ctx.span_id:016x}"


def child_tp() -> str:
    """TRACEPARENT as a real child process sees it."""
    return subprocess.run(PRINT_TP, capture_output=True, text=True, check=True).stdout.strip()


def test_popen_gets_current_span(instrumented: InMemorySpanExporter) -> None:
    """A child started inside a span sees a W3C traceparent naming that span."""
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("tool") as span:
        tp = child_tp()
    parts = tp.split("-")
    assert parts[0] == "00"
    assert parts[2] == span_hex(span)
    assert parts[1] == f"{span.get_span_context().trace_id:032x}"


def test_no_span_no_traceparent(instrumented: InMemorySpanExporter) -> None:
    """Outside any span nothing is added."""
    assert "TRACEPARENT" not in os.environ
    assert child_tp() == ""


def test_explicit_traceparent_kept(instrumented: InMemorySpanExporter) -> None:
    """An explicit TRACEPARENT in env is never overwritten."""
    tracer = trace.get_tracer("test")
    mine = f"00-{'12' * 16}-{'34' * 8}-01"
    with tracer.start_as_current_span("tool"):
        out = subprocess.run(
            PRINT_TP,
            env={**os.environ, "TRACEPARENT": mine},
            capture_output=True,
            text=True,
            check=True,
        )
        env_only = subprocess.run(
            PRINT_TP, env={"PATH": "/usr/bin"}, capture_output=True, text=True, check=True
        )
    assert out.stdout.strip() == mine
    assert env_only.stdout.strip().startswith("00-")  # an env without it gets one


def test_inherited_traceparent_replaced(
    instrumented: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TRACEPARENT merely inherited from os.environ gives way to the active tool span's."""
    launcher = f"00-{'ab' * 16}-{'cd' * 8}-01"
    monkeypatch.setenv("TRACEPARENT", launcher)
    monkeypatch.setenv("TRACESTATE", "launcher=1")
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("tool") as span:
        plain = child_tp()
        copied = subprocess.run(
            PRINT_TP, env=dict(os.environ), capture_output=True, text=True, check=True
        ).stdout.strip()
    for tp in (plain, copied):
        assert tp.split("-")[2] == span_hex(span)
        assert tp != launcher
    assert child_tp() == launcher  # outside a span the inherited context is left alone


def test_asyncio_subprocess(instrumented: InMemorySpanExporter) -> None:
    """asyncio.create_subprocess_exec and _shell children get the task's span."""
    tracer = trace.get_tracer("test")

    async def main() -> tuple[str, str, str]:
        with tracer.start_as_current_span("tool") as span:
            p = await asyncio.create_subprocess_exec(*PRINT_TP, stdout=subprocess.PIPE)
            out, _ = await p.communicate()
            q = await asyncio.create_subprocess_shell(
                'printf "%s" "$TRACEPARENT"', stdout=subprocess.PIPE
            )
            out2, _ = await q.communicate()
            return span_hex(span), out.decode().strip(), out2.decode()

    want, got, got_shell = asyncio.run(main())
    assert got.split("-")[2] == want
    assert got_shell.split("-")[2] == want


def test_thread_pool_and_run_in_executor(instrumented: InMemorySpanExporter) -> None:
    """Work submitted to a thread pool or run_in_executor keeps the submitting span."""
    tracer = trace.get_tracer("test")
    with (
        tracer.start_as_current_span("tool") as span,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        via_pool = pool.submit(child_tp).result()

    async def main() -> tuple[str, str]:
        with tracer.start_as_current_span("tool2") as s2:
            got = await asyncio.get_running_loop().run_in_executor(None, child_tp)
            return span_hex(s2), got

    want2, via_loop = asyncio.run(main())
    assert via_pool.split("-")[2] == span_hex(span)
    assert via_loop.split("-")[2] == want2


def test_uninstrument_restores(exporter: InMemorySpanExporter) -> None:
    """uninstrument() puts the original Popen and submit back; both calls are idempotent."""
    popen, submit = subprocess.Popen.__init__, concurrent.futures.ThreadPoolExecutor.submit
    instrument()
    instrument()
    assert is_instrumented()
    assert subprocess.Popen.__init__ is not popen
    uninstrument()
    uninstrument()
    assert not is_instrumented()
    assert subprocess.Popen.__init__ is popen
    assert concurrent.futures.ThreadPoolExecutor.submit is submit
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("tool"):
        assert child_tp() == ""


def _autogen_tool_tp() -> tuple[str, str]:
    """Run a real AutoGen FunctionTool with a sync function; return (child tp, tool span id)."""
    pytest.importorskip("autogen_core", reason="needs AutoGen (the examples extra)")
    from autogen_core import CancellationToken
    from autogen_core.tools import FunctionTool

    def shell(command: str) -> str:
        """Run a command and report the TRACEPARENT it saw."""
        return child_tp()

    tool = FunctionTool(shell, description="run a shell command")
    result = asyncio.run(tool.run_json({"command": "true"}, CancellationToken()))
    return str(result), ""


@pytest.mark.examples
def test_autogen_sync_function_tool(instrumented: InMemorySpanExporter) -> None:
    """AutoGen 0.7.5 runs sync tools via run_in_executor; the child still names the tool span."""
    got, _ = _autogen_tool_tp()
    spans = [s for s in instrumented.get_finished_spans() if "execute_tool" in s.name]
    assert spans, [s.name for s in instrumented.get_finished_spans()]
    assert got.split("-")[2] == span_hex(spans[-1])


@pytest.mark.examples
def test_autogen_without_instrument_loses_span(exporter: InMemorySpanExporter) -> None:
    """Without instrument() the executor thread has no span: that is the gap it closes."""
    assert not is_instrumented()
    got, _ = _autogen_tool_tp()
    assert got == ""


@pytest.mark.examples
def test_langgraph_toolnode_sync_tool(instrumented: InMemorySpanExporter) -> None:
    """A LangGraph ToolNode sync tool's child names the OpenInference tool span."""
    for module in ("langchain_core", "langgraph", "openinference.instrumentation.langchain"):
        pytest.importorskip(module, reason="needs LangGraph and OpenInference (the examples extra)")
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode
    from openinference.instrumentation.langchain import LangChainInstrumentor

    @tool
    def run_shell(command: str) -> str:
        """Run a shell command and report the TRACEPARENT it saw."""
        return child_tp()

    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=trace.get_tracer_provider())
    try:
        builder = StateGraph(MessagesState)
        builder.add_node("tools", ToolNode([run_shell]))
        builder.add_edge(START, "tools")
        builder.add_edge("tools", END)
        graph = builder.compile()
        msg = AIMessage(
            content="",
            tool_calls=[{"name": "run_shell", "args": {"command": "true"}, "id": "call-1"}],
        )
        result = graph.invoke({"messages": [msg]})
    finally:
        instrumentor.uninstrument()
    got = str(result["messages"][-1].content)
    tool_spans = [
        s
        for s in instrumented.get_finished_spans()
        if (s.attributes or {}).get("openinference.span.kind") == "TOOL"
    ]
    assert tool_spans, [s.name for s in instrumented.get_finished_spans()]
    assert got.split("-")[2] == span_hex(tool_spans[-1])
